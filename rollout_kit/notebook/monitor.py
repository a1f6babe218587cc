"""``LiveMonitor``: live progress and latency timeline of everything a controller runs,
for work submitted from code (no form).

Usage::

    mon = LiveMonitor(ctl)
    mon                  # display it; it refreshes about once a second while tasks run
    ids = [ctl.submit(d, wf) for d in data]
"""

from __future__ import annotations

from typing import Any

from ..tracing import schema as S
from ._widgets import widgets
from .progress import ProgressSnapshot, ProgressView, Refresher

__all__ = ["LiveMonitor"]


class LiveMonitor:
    """Counts, progress bar, latest tasks and timeline of all of a controller's tasks.

    Args:
        controller: a ``RolloutController`` (anything with ``traces()`` and ``spans()``).
        refresh_interval: seconds between refreshes.
        show_timeline: draw the live latency timeline.
        autostart: start refreshing at once when a loop is running.
    """

    def __init__(self, controller: Any, *, refresh_interval: float = 1.0,
                 show_timeline: bool = True, autostart: bool = True) -> None:
        self.controller = controller
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
        self.view.update(snapshot, tasks[cols], self.controller.spans(), tasks)
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
