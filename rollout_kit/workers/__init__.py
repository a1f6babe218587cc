"""Workers run tasks for a controller; a worker pool builds them and picks one per task.

:class:`LocalWorker` pairs one engine with one executor in this process
(:class:`LocalScheduler` is the default pool); a :class:`RayScheduler` runs workers as Ray
actors behind the same :class:`Worker` protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import Worker, WorkerPool, WorkerSpec
from ._local import LocalScheduler, LocalWorker, SchedulePolicy

if TYPE_CHECKING:
    from ._ray import RayScheduler

__all__ = ["LocalScheduler", "LocalWorker", "RayScheduler", "SchedulePolicy", "Worker",
           "WorkerPool", "WorkerSpec"]


def __getattr__(name: str) -> Any:
    # the Ray layer on first use only: a controller of local workers does not import it
    if name == "RayScheduler":
        from ._ray import RayScheduler

        return RayScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
