"""``LiveMonitor``: live progress and latency timeline of everything a controller runs,
for work submitted from code (no form).

Usage::

    mon = LiveMonitor(ctl)
    mon                  # display it; it refreshes about once a second while tasks run
    ids = [ctl.submit(d, wf) for d in data]

    LiveMonitor(ctl, server_lanes=True)   # + lanes of the servers' waiting / running / KV
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from .._errors import ConfigError
from ..tracing import schema as S
from ..tracing.server_metrics import SCRAPE_FAILED, SERIES, SERIES_NAMES
from ._progress import ProgressSnapshot, ProgressView, Refresher
from ._widgets import widgets

#: the lanes ``LiveMonitor(..., server_lanes=True)`` draws
MONITOR_LANES = ("waiting", "running", "kv_cache_usage")


class MetricsFollower:
    """The rows of a controller's server metrics frame that some lanes need, read a few at
    a time: each :meth:`poll` copies only the rows recorded since the last one
    (``tracer.server_metrics_df(start=cursor)``), not the whole frame, and keeps only the
    metrics the lanes' series are made of (a handful of the ~25 a scrape records).

    Args:
        controller: a ``RolloutController`` (its ``tracer``; without one, each poll reads
            ``controller.server_metrics()`` whole).
        lanes: series names.
    """

    def __init__(self, controller: Any, lanes: Sequence[str]) -> None:
        self.controller = controller
        self.lanes = tuple(lanes)
        names: set[str] = {SCRAPE_FAILED}  # the lanes' gaps
        for series in SERIES:
            if series.name in self.lanes:
                for how, *metrics in (*series.vllm, *series.sglang):
                    for m in metrics:
                        names.update((f"{m}_sum", f"{m}_count") if how == "hist_mean"
                                     else (m,))
        self.metrics = frozenset(names)
        self.cursor = 0
        self._epoch: object = None
        self._parts: list[pd.DataFrame] = []
        self.frame = pd.DataFrame(columns=list(S.SERVER_METRIC_COLUMNS))

    def poll(self) -> pd.DataFrame:
        """The kept rows so far (the new ones appended)."""
        tracer = getattr(self.controller, "tracer", None)
        if tracer is None or not hasattr(tracer, "server_metrics_df"):
            self.frame = self._keep(self.controller.server_metrics())
            return self.frame
        epoch = getattr(tracer, "epoch_ns", None)
        if epoch != self._epoch:  # a new tracer epoch (reset): its rows start again
            self._epoch, self.cursor, self._parts = epoch, 0, []
            self.frame = pd.DataFrame(columns=list(S.SERVER_METRIC_COLUMNS))
        new = tracer.server_metrics_df(self.cursor)
        self.cursor += len(new)
        kept = self._keep(new)
        if len(kept):
            self._parts.append(kept)
            self.frame = pd.concat(self._parts, ignore_index=True)
            self._parts = [self.frame]
        return self.frame

    def _keep(self, frame: pd.DataFrame) -> pd.DataFrame:
        if not len(frame):
            return frame.iloc[:0]
        kept = frame[frame[S.METRIC].astype(str).isin(self.metrics)]
        return kept.astype({S.SERVER: str, S.METRIC: str, S.LABELS: str})


class LiveMonitor:
    """Counts, progress bar, latest tasks and timeline of all of a controller's tasks.

    Args:
        controller: a ``RolloutController`` (anything with ``traces()`` and ``spans()``).
        refresh_interval: seconds between refreshes.
        show_timeline: draw the live latency timeline.
        autostart: start refreshing at once when a loop is running.
        server_lanes: draw lanes of the servers' state under the timeline (needs a
            controller scraping its servers, ``scrape_interval=``): ``True`` for
            :data:`MONITOR_LANES` (waiting, running, KV cache usage), or the series names.
            Each refresh copies only the metric rows recorded since the last one.

    Raises:
        ConfigError: an unknown series name in ``server_lanes``.
    """

    def __init__(self, controller: Any, *, refresh_interval: float = 1.0,
                 show_timeline: bool = True, autostart: bool = True,
                 server_lanes: bool | Sequence[str] = False) -> None:
        self.controller = controller
        lanes: tuple[str, ...] = ()
        if server_lanes is True:
            lanes = MONITOR_LANES
        elif server_lanes is not False:
            lanes = (server_lanes,) if isinstance(server_lanes, str) else tuple(server_lanes)
            bad = [x for x in lanes if x not in SERIES_NAMES]
            if bad:
                raise ConfigError(f"unknown server lane(s) {bad}; the series are "
                                  f"{list(SERIES_NAMES)}")
        self.lanes = lanes
        self.metrics = MetricsFollower(controller, lanes) if lanes and show_timeline else None
        self.view = ProgressView(title="all tasks", show_timeline=show_timeline)
        self.error = widgets.HTML(value="")
        self.refresher = Refresher(self.refresh, refresh_interval, self._show_error)
        self.box = widgets.VBox([self.view.box, self.error])
        if autostart:
            self.refresher.start()

    def refresh(self) -> ProgressSnapshot:
        """Update the view from the controller now."""
        tasks = self.controller.traces()
        snapshot = ProgressSnapshot.from_frames(tasks)
        cols = [c for c in (S.STATUS, S.WORKER, S.QUEUE_S, S.TOTAL_S) if c in tasks]
        metrics = self.metrics.poll() if self.metrics is not None else None
        self.view.update(snapshot, tasks[cols], self.controller.spans(), tasks,
                         server_metrics=metrics, lanes=self.lanes)
        return snapshot

    def start(self) -> None:
        self.refresher.start()

    def stop(self) -> None:
        self.refresher.stop()

    def _show_error(self, exc: BaseException) -> None:
        self.error.value = f"<span style='color:#b91c1c'>⚠ {type(exc).__name__}: {exc}</span>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.box._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"LiveMonitor({self.view.snapshot.summary()})"
