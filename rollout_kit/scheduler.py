"""Schedulers: pick the worker engine for each submitted task.

:class:`LocalScheduler` chooses among in-process engines. A scheduler that runs workers
elsewhere (e.g. :class:`rollout_kit.ray_scheduler.RayScheduler`) additionally has
``create_workers(*, sglang, vllm, engine_config, executor_config) -> list[InferenceEngine]``,
which the controller calls instead of building engines from the addresses itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from .errors import ConfigError

if TYPE_CHECKING:
    from .engines import InferenceEngine

__all__ = ["LocalScheduler", "SchedulePolicy", "Scheduler"]

SchedulePolicy = Literal["round_robin", "least_loaded"]


class Scheduler(Protocol):
    """What ``RolloutController(scheduler=...)`` needs: a worker choice per task."""

    def choose(self, workers: Sequence[InferenceEngine]) -> InferenceEngine:
        """The worker for the next task."""
        ...


class LocalScheduler:
    """Chooses among engines living in this process.

    Args:
        policy: ``"round_robin"`` (default) or ``"least_loaded"`` (fewest queued + running
            tasks in the worker's executor; ties go round robin).
    """

    def __init__(self, policy: SchedulePolicy = "round_robin") -> None:
        if policy not in ("round_robin", "least_loaded"):
            raise ConfigError(f"policy must be 'round_robin' or 'least_loaded', got {policy!r}")
        self.policy = policy
        self._rr = itertools.count()

    def choose(self, workers: Sequence[InferenceEngine]) -> InferenceEngine:
        """The worker for the next task."""
        if not workers:
            raise ConfigError("no worker engines to schedule on")
        start = next(self._rr) % len(workers)
        if self.policy == "round_robin" or len(workers) == 1:
            return workers[start]
        order = [workers[(start + i) % len(workers)] for i in range(len(workers))]
        return min(order, key=_load)

    def __repr__(self) -> str:
        return f"LocalScheduler(policy={self.policy!r})"


def _load(engine: InferenceEngine) -> int:
    st = engine.workflow_executor.stats()
    return int(st["running"]) + int(st["enqueued"])
