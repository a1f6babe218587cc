"""In-process workers: one engine paired with one executor, on the controller's loop.

:class:`LocalScheduler` is the default :class:`~rollout_kit.workers.WorkerPool`: it
wraps the engines the caller gives (the caller keeps them) and builds one remote engine per
server flavour from ``servers=`` addresses (the pool's workers own those), then
picks a worker per task round robin or by least load.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigError
from .._executor import Job, Recipe, WorkflowExecutor, make_recipe

if TYPE_CHECKING:
    from ..engines import InferenceEngine
    from ._base import Worker, WorkerSpec

SchedulePolicy = Literal["round_robin", "least_loaded"]


class LocalWorker:
    """A worker in this process: ``executor`` runs tasks on ``engine``.

    Args:
        engine: the engine the tasks run on.
        executor: the executor that was given ``engine``.
        owns_engine: close the engine with the worker (engines built from addresses).
    """

    def __init__(self, engine: InferenceEngine, executor: WorkflowExecutor, *,
                 owns_engine: bool = False) -> None:
        if executor.engine is not engine:
            raise ConfigError("the executor was given a different engine")
        self._engine = engine
        self.executor = executor
        self.owns_engine = owns_engine

    @property
    def name(self) -> str:
        """The worker's name (``worker`` column of the traces)."""
        return self.executor.worker or self._engine.name

    @property
    def engine(self) -> InferenceEngine:
        """The engine tasks run on."""
        return self._engine

    def check_room(self) -> None:
        """Raise ``ControllerStateError`` when closed or the queue bound is reached."""
        self.executor.check_room()

    def has_room(self) -> bool:
        """Whether the queue bound allows one more task now."""
        return self.executor.has_room()

    def submit(self, job: Job) -> None:
        """Queue ``job`` in the executor."""
        self.executor.submit(job)

    def cancel(self, task_id: int) -> bool:
        """Cancel a queued or running task."""
        return self.executor.cancel(task_id)

    def pause(self) -> None:
        """Stop dispatching queued tasks."""
        self.executor.pause()

    def resume(self) -> None:
        """Restart dispatching."""
        self.executor.resume()

    def set_version(self, version: int) -> None:
        """Set the engine's weight version."""
        self.executor.set_version(version)

    def load(self) -> int:
        """Queued plus running tasks."""
        return self.executor.load()

    def is_running_any(self) -> bool:
        """Whether any task runs now."""
        return self.executor.is_running_any()

    def stall_reason(self) -> str | None:
        """Why nothing can progress without outside action, or ``None``."""
        return self.executor.stall_reason()

    def stats(self) -> dict[str, Any]:
        """The executor's counters."""
        return self.executor.stats()

    async def initialize_async(self) -> None:
        """Initialize the engine (health checks)."""
        await self._engine.initialize_async()

    async def close_async(self, *, drain: bool = False) -> None:
        """Close the executor, then the engine if this worker owns it."""
        try:
            await self.executor.close_async(drain=drain)
        finally:
            if self.owns_engine:
                await self._engine.close_async()

    def __repr__(self) -> str:
        return f"LocalWorker({self.name!r}, {self.executor!r})"


class LocalScheduler:
    """The default worker pool: in-process workers, one choice per task.

    Args:
        policy: ``"round_robin"`` (default) or ``"least_loaded"`` (fewest queued + running
            tasks; ties go round robin).
    """

    def __init__(self, policy: SchedulePolicy = "round_robin") -> None:
        if policy not in ("round_robin", "least_loaded"):
            raise ConfigError(f"policy must be 'round_robin' or 'least_loaded', got {policy!r}")
        self.policy = policy
        self._rr = itertools.count()

    def create_workers(self, spec: WorkerSpec) -> list[Worker]:
        """One worker per given engine, plus one per server flavour with addresses."""
        from ..engines import InferenceEngine, make_engine

        for e in spec.engines:
            if not isinstance(e, InferenceEngine):
                raise ConfigError(f"engines must be InferenceEngine objects, got {e!r}")
        pairs: list[tuple[InferenceEngine, bool]] = [(e, False) for e in spec.engines]
        pairs += [(make_engine(flavour, addrs, config=spec.engine_config, name=flavour), True)
                  for flavour, addrs in spec.servers.items() if addrs]
        names = [e.name or f"worker{i}" for i, (e, _) in enumerate(pairs)]
        if len(set(names)) != len(names):
            raise ConfigError(f"worker engines need distinct names, got {names}")
        workers: list[Worker] = []
        for (engine, owned), name in zip(pairs, names, strict=True):
            ex = WorkflowExecutor(engine, sink=spec.sink, config=spec.executor_config,
                                  tracer=spec.tracer, worker=name, binding=spec.binding)
            workers.append(LocalWorker(engine, ex, owns_engine=owned))
        return workers

    def prepare(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                should_accept_fn: object) -> Recipe:
        """Check the specs (raises ``ConfigError``)."""
        return make_recipe(workflow, workflow_kwargs, should_accept_fn)

    def choose(self, workers: Sequence[Worker]) -> Worker:
        """The worker for the next task."""
        if len(workers) == 1:
            return workers[0]
        if not workers:
            raise ConfigError("no workers to schedule on")
        start = next(self._rr) % len(workers)
        if self.policy == "round_robin" or len(workers) == 1:
            return workers[start]
        order = [workers[(start + i) % len(workers)] for i in range(len(workers))]
        return min(order, key=lambda w: w.load())

    def __repr__(self) -> str:
        return f"LocalScheduler(policy={self.policy!r})"
