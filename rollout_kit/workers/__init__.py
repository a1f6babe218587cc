"""Workers run tasks for a controller; a worker pool builds them and picks one per task.

:class:`LocalWorker` pairs one engine with one executor in this process
(:class:`LocalScheduler` is the default pool); ``rollout_kit.workers.ray`` runs workers as
Ray actors behind the same :class:`Worker` protocol.
"""

from __future__ import annotations

from .base import Worker, WorkerPool, WorkerSpec
from .local import LocalScheduler, LocalWorker, SchedulePolicy

__all__ = ["LocalScheduler", "LocalWorker", "SchedulePolicy", "Worker", "WorkerPool",
           "WorkerSpec"]
