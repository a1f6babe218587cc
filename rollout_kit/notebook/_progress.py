"""The live view shared by ``SubmitPanel`` and ``LiveMonitor``: counts, a progress bar, a
results table and a latency timeline, refreshed from the controller's traces.

Compute (``ProgressSnapshot.from_frames``) is separate from rendering (``ProgressView``), so
tests can check the numbers without widgets.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..tracing import schema as S
from ._widgets import widgets

_TERMINAL = ("accepted", "rejected", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """Counts of the tasks a view follows, taken from a tasks DataFrame."""

    submitted: int = 0
    queued: int = 0
    running: int = 0
    accepted: int = 0
    rejected: int = 0
    failed: int = 0
    cancelled: int = 0
    task_ids: tuple[int, ...] = field(default=(), repr=False)

    @property
    def done(self) -> int:
        return self.accepted + self.rejected + self.failed + self.cancelled

    @classmethod
    def from_frames(cls, tasks: pd.DataFrame, task_ids: Iterable[int] | None = None
                    ) -> ProgressSnapshot:
        """Count statuses of ``task_ids`` (all tasks when ``None``) in ``tasks``."""
        if task_ids is not None:
            ids = list(task_ids)
            tasks = tasks.reindex(ids)
        status = tasks[S.STATUS].astype("object") if len(tasks) else pd.Series([], dtype=object)
        counts = status.value_counts()
        pending = tasks[status.isna() | (status == "pending")] if len(tasks) else tasks
        started = pending[S.DISPATCH_TS].notna() if len(pending) else pd.Series([], dtype=bool)
        return cls(
            submitted=len(tasks),
            queued=int((~started).sum()),
            running=int(started.sum()),
            accepted=int(counts.get("accepted", 0)),
            rejected=int(counts.get("rejected", 0)),
            failed=int(counts.get("failed", 0)),
            cancelled=int(counts.get("cancelled", 0)),
            task_ids=tuple(int(i) for i in tasks.index),
        )

    def summary(self) -> str:
        """One line: ``submitted 12 · queued 0 · running 3 · accepted 8 · …``."""
        return (f"submitted {self.submitted} · queued {self.queued} · running {self.running}"
                f" · accepted {self.accepted} · rejected {self.rejected}"
                f" · failed {self.failed} · cancelled {self.cancelled}")


class ProgressView:
    """Widgets showing a ``ProgressSnapshot``, a results table and a timeline."""

    def __init__(self, *, title: str = "rollouts", show_timeline: bool = True,
                 max_rows: int = 10) -> None:
        self.max_rows = max_rows
        self.show_timeline = show_timeline
        self.counts = widgets.HTML(value=ProgressSnapshot().summary())
        self.bar = widgets.IntProgress(value=0, min=0, max=1, description=title,
                                       bar_style="info")
        self.table = widgets.Output()
        self.timeline = widgets.Output()
        self.snapshot = ProgressSnapshot()
        self.last_table: pd.DataFrame = pd.DataFrame()
        self._drawn_key: tuple[int, int, int] | None = None
        children = [self.bar, self.counts, self.table]
        if show_timeline:
            children.append(self.timeline)
        self.box = widgets.VBox(children)

    def update(self, snapshot: ProgressSnapshot, table: pd.DataFrame,
               spans: pd.DataFrame | None = None, tasks: pd.DataFrame | None = None, *,
               draw: bool = True, server_metrics: pd.DataFrame | None = None,
               lanes: Sequence[str] = ()) -> None:
        """Render ``snapshot`` and ``table``; redraw the timeline (when ``draw``) if the data
        changed. Drawing costs tens of ms on the loop, so callbacks pass ``draw=False``.
        With ``server_metrics`` and ``lanes``, the timeline has lanes of the servers'
        state under it (``plot_timeline(..., server_metrics=, lanes=)``)."""
        self.snapshot = snapshot
        self.counts.value = snapshot.summary()
        self.bar.max = max(snapshot.submitted, 1)
        self.bar.value = snapshot.done
        self.bar.bar_style = ("danger" if snapshot.failed else
                              "success" if snapshot.done == snapshot.submitted else "info")
        shown = table.tail(self.max_rows)
        if not shown.equals(self.last_table):
            self.last_table = shown
            _replace_output(self.table, shown)
        if draw and self.show_timeline and spans is not None and tasks is not None:
            n_metrics = len(server_metrics) if server_metrics is not None and lanes else 0
            key = (snapshot.done, len(spans), n_metrics)
            if key != self._drawn_key and len(spans):
                self._drawn_key = key
                self._draw_timeline(spans, tasks, server_metrics if n_metrics else None,
                                    lanes)

    def _draw_timeline(self, spans: pd.DataFrame, tasks: pd.DataFrame,
                       server_metrics: pd.DataFrame | None = None,
                       lanes: Sequence[str] = ()) -> None:
        from IPython.display import Image

        from ..plotting import timeline_figure

        extra: dict[str, Any] = ({"server_metrics": server_metrics, "lanes": tuple(lanes)}
                                 if server_metrics is not None else {})
        # a PNG, not the Figure: IPython renders a Figure only when pyplot's inline backend
        # has registered its formatters, which a background refresh cannot count on
        buf = io.BytesIO()
        timeline_figure(spans, tasks=tasks, **extra).savefig(buf, format="png", dpi=80,
                                                             bbox_inches="tight")
        image = Image(data=buf.getvalue(), format="png")  # type: ignore[no-untyped-call]
        _replace_output(self.timeline, image)


def _replace_output(out: Any, obj: object) -> None:
    """Show ``obj`` as the only output of ``out``.

    ``clear_output`` sent from a background task (not a running cell) does not reach the
    frontend, so the outputs trait is reset directly; the new display then replaces the old.
    """
    out.outputs = ()
    out.append_display_data(obj)


class Refresher:
    """Calls ``callback`` every ``interval`` seconds on the running loop until stopped.

    The callback is a plain function; an exception in it is passed to ``on_error`` and the
    refresher keeps going.
    """

    def __init__(self, callback: Callable[[], Any], interval: float,
                 on_error: Callable[[BaseException], None]) -> None:
        self.callback = callback
        self.interval = interval
        self.on_error = on_error
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start refreshing on the running loop (no-op when none runs or already started)."""
        if self.running:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._task = loop.create_task(self._run(), name="rollout_kit-refresh")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        next_t = time.monotonic()
        while True:
            try:
                self.callback()
            except Exception as exc:  # shown in the panel, never kills the loop
                self.on_error(exc)
            next_t = max(next_t + self.interval, time.monotonic())
            await asyncio.sleep(next_t - time.monotonic())
