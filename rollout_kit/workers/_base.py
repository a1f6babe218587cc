"""What a controller needs from its workers and from the pool that makes them.

A *worker* runs tasks whose ids it is given and hands every result to the sink it was
built with; it pairs one engine with one executor (in-process, :mod:`._local`) or stands for
a process elsewhere (:mod:`rollout_kit.workers._ray`). A *worker pool* builds the workers of
a controller, checks workflow specs once per call (:meth:`WorkerPool.prepare`) and picks
the worker of each task. Both are protocols: the controller calls only the methods below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._config import EngineConfig, ExecutorConfig
    from .._executor import Job, Recipe, ResultSink
    from .._loop import LoopBinding
    from ..engines import InferenceEngine
    from ..tracing import Tracer


class Worker(Protocol):
    """One worker of a controller: runs the tasks it is given, reports to its sink."""

    @property
    def name(self) -> str:
        """The worker's name (``worker`` column of the traces)."""
        ...

    @property
    def engine(self) -> InferenceEngine:
        """The engine tasks run on (a proxy for a remote worker's engine)."""
        ...

    def check_room(self) -> None:
        """Raise ``ControllerStateError`` when closed or the queue bound is reached."""
        ...

    def has_room(self) -> bool:
        """Whether the queue bound allows one more task now."""
        ...

    def submit(self, job: Job) -> None:
        """Queue ``job`` (its id was given by the controller); the result goes to the sink."""
        ...

    def cancel(self, task_id: int) -> bool:
        """Cancel a queued or running task; whether this call requested it."""
        ...

    def pause(self) -> None:
        """Stop dispatching queued tasks."""
        ...

    def resume(self) -> None:
        """Restart dispatching."""
        ...

    def set_version(self, version: int) -> None:
        """Set the weight version and re-check staleness capacity."""
        ...

    def load(self) -> int:
        """Queued plus running tasks."""
        ...

    def is_running_any(self) -> bool:
        """Whether any task runs now."""
        ...

    def stall_reason(self) -> str | None:
        """Why nothing can progress without outside action, or ``None``."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters (enqueued, running, accepted, …)."""
        ...

    async def initialize_async(self) -> None:
        """Get ready (engine health checks, process start)."""
        ...

    async def close_async(self, *, drain: bool = False) -> None:
        """Cancel (or, with ``drain``, finish) every task; release what the worker owns."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSpec:
    """What a pool needs to build a controller's workers.

    Attributes:
        engines: engines the caller built (the caller keeps ownership).
        servers: server addresses by flavour name
            (:data:`rollout_kit.engines.FLAVOURS`), for engines the pool builds
            (and owns): one engine per flavour, named after it.
        engine_config, executor_config: settings of those engines and of every executor.
        tracer: where every worker records.
        sink: where every result goes (the controller's results).
        binding: the controller's event loop.
    """

    engines: Sequence[InferenceEngine] = ()
    servers: Mapping[str, Sequence[str]] = field(default_factory=dict)
    engine_config: EngineConfig | None = None
    executor_config: ExecutorConfig | None = None
    tracer: Tracer
    sink: ResultSink
    binding: LoopBinding


class WorkerPool(Protocol):
    """Builds a controller's workers and picks one per task (``RolloutController(scheduler=)``)."""

    def create_workers(self, spec: WorkerSpec) -> list[Worker]:
        """The workers for ``spec`` (raises ``ConfigError`` when it cannot build them)."""
        ...

    def prepare(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                should_accept_fn: object) -> Recipe:
        """Check the specs of one submit or batch call (raises ``ConfigError``)."""
        ...

    def choose(self, workers: Sequence[Worker]) -> Worker:
        """The worker for the next task."""
        ...
