"""``RayWorker``: the body of one Ray actor that runs rollouts for a ``RayScheduler``.

Each actor process owns its event loop (Ray's async-actor loop), one engine, one
:class:`~rollout_kit.executor.WorkflowExecutor` and one in-memory
:class:`~rollout_kit.tracing.Tracer`. The controller passes every task id in; :meth:`run`
echoes it in the :class:`RemoteOutcome` together with the trace record of exactly that task
(drained from the worker tracer), so traces travel piggy-backed on results and a record is
never shipped twice nor for a task whose result was lost with its worker.

This module never imports Ray at import time: :mod:`rollout_kit.ray_scheduler` wraps
:class:`RayWorker` with ``ray.remote`` when it starts workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import ExecutorConfig
from .errors import WorkflowError
from .io import RolloutResult, Status

if TYPE_CHECKING:
    import pandas as pd

    from .engines import InferenceEngine
    from .executor import WorkflowExecutor
    from .io import ModelRequest, ModelResponse
    from .tracing import Tracer

__all__ = ["EngineFactory", "RayWorker", "RemoteOutcome", "worker_config"]

EngineFactory = Callable[[int], "InferenceEngine"]
_CACHE_SIZE = 256


@dataclass(slots=True)
class RemoteOutcome:
    """What a worker sends back for one task: the echoed id, the result and its trace.

    Attributes:
        task_id: the id the controller passed in (echoed).
        status, reason, error, traceback, trajectory: as in ``RolloutResult``.
        worker: the worker that ran the task.
        header: the worker tracer's header record (its clock anchor).
        record: the task's trace record (``Tracer.drain_records`` format) or ``None``.
    """

    task_id: int
    status: Status
    reason: str | None
    error: BaseException | None
    traceback: str | None
    trajectory: Any
    worker: str
    header: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None


class RayWorker:
    """One worker process: engine + executor + tracer buffer (wrapped by ``ray.remote``).

    Args:
        name: the worker name (``worker`` column of the traces).
        index: the worker's index, passed to ``engine_factory``.
        engine_factory: ``fn(index) -> InferenceEngine``, called inside the worker.
        executor_config: capacity of this worker's executor.
    """

    def __init__(self, name: str, index: int, engine_factory: EngineFactory,
                 executor_config: ExecutorConfig) -> None:
        self.name = name
        self.index = index
        self._factory = engine_factory
        self._config = executor_config
        self._start: asyncio.Task[None] | None = None
        self._engine: InferenceEngine | None = None
        self._executor: WorkflowExecutor | None = None
        self._tracer: Tracer | None = None
        self._futures: dict[int, asyncio.Future[RolloutResult]] = {}
        self._stash: dict[int, dict[str, Any]] = {}
        self._header: dict[str, Any] = {}
        self._specs: OrderedDict[str, tuple[Any, Any, Any]] = OrderedDict()
        self._seq = {"paused": -1, "version": -1}
        self._paused = False

    # -- start ----------------------------------------------------------------------------
    async def _ready(self) -> WorkflowExecutor:
        if self._start is None:
            self._start = asyncio.ensure_future(self._build())
        await asyncio.shield(self._start)
        assert self._executor is not None
        return self._executor

    async def _build(self) -> None:
        from .tracing import Tracer

        engine = self._factory(self.index)
        await engine.initialize_async()
        tracer = Tracer(worker=self.name)
        ex = engine.configure_executor(config=self._config, tracer=tracer, worker=self.name)
        ex.add_listener(self._on_result)
        if self._paused:
            ex.pause()
        self._engine, self._executor, self._tracer = engine, ex, tracer

    async def start(self) -> dict[str, Any]:
        """Build and initialize the engine (once); return ``pid`` and the wall clock."""
        await self._ready()
        return {"pid": os.getpid(), "wall": time.time(), "name": self.name}

    def clock(self) -> float:
        """This process's wall clock (``time.time()``), for the anchor exchange."""
        return time.time()

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    # -- tasks ----------------------------------------------------------------------------
    def _on_result(self, result: RolloutResult) -> None:
        fut = self._futures.pop(result.task_id, None)
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _spec(self, key: str, blob: bytes) -> tuple[Any, Any, Any]:
        spec = self._specs.get(key)
        if spec is None:
            spec = pickle.loads(blob)
            self._specs[key] = spec
            if len(self._specs) > _CACHE_SIZE:
                self._specs.popitem(last=False)
        else:
            self._specs.move_to_end(key)
        return spec

    async def run(self, task_id: int, key: str, blob: bytes, data: Any, attempt: int = 0,
                  lost: tuple[str, ...] = ()) -> RemoteOutcome:
        """Run one task with the controller's ``task_id``; return its outcome and trace.

        ``key``/``blob`` are the serialized ``(workflow, workflow_kwargs,
        should_accept_fn)``; a workflow instance is deserialized once per content key and
        then reused, so its state persists across the tasks of this worker. ``attempt`` > 0
        marks a task re-dispatched after ``lost`` workers died (``redispatched`` and
        ``lost_workers`` trace attributes).
        """
        ex = await self._ready()
        workflow, kwargs, accept = self._spec(key, blob)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RolloutResult] = loop.create_future()
        self._futures[task_id] = fut
        try:
            tid = ex.submit(data, workflow, workflow_kwargs=kwargs, should_accept_fn=accept,
                            task_id=task_id)
        except BaseException:
            self._futures.pop(task_id, None)
            raise
        if attempt:
            assert self._tracer is not None
            self._tracer.annotate_task(tid, redispatched=attempt, lost_workers=",".join(lost))
        result = await fut
        ex.take(tid)
        return self._outcome(result)

    def _outcome(self, result: RolloutResult) -> RemoteOutcome:
        tracer = self._tracer
        assert tracer is not None
        recs = tracer.drain_records()
        if recs:
            self._header = recs[0]
            for rec in recs[1:]:
                if rec.get("kind") == "task":
                    self._stash[int(rec["task_id"])] = rec
        record = self._stash.pop(result.task_id, None)
        return RemoteOutcome(
            task_id=result.task_id, status=result.status, reason=result.reason,
            error=_shippable(result.error), traceback=result.traceback,
            trajectory=result.trajectory, worker=self.name, header=dict(self._header),
            record=record,
        )

    def cancel(self, task_id: int) -> bool:
        """Cancel a task of this worker; ``False`` if unknown or already finished."""
        ex = self._executor
        if ex is None:
            return False
        try:
            return ex.cancel(task_id)
        except Exception:
            return False

    # -- control (sequence numbers keep the order of fan-out calls) -------------------------
    def set_paused(self, paused: bool, seq: int) -> None:
        """Pause or resume dispatch; ignored when older than the last applied call."""
        if seq <= self._seq["paused"]:
            return
        self._seq["paused"] = seq
        self._paused = paused
        if self._executor is not None:
            if paused:
                self._executor.pause()
            else:
                self._executor.resume()

    async def set_version(self, version: int, seq: int) -> None:
        """Set the weight version; ignored when older than the last applied call."""
        if seq <= self._seq["version"]:
            return
        self._seq["version"] = seq
        ex = await self._ready()
        ex.set_version(version)

    async def stats(self) -> dict[str, Any]:
        """The executor's counters plus ``name`` and ``pid``."""
        ex = await self._ready()
        return {**ex.stats(), "name": self.name, "pid": os.getpid()}

    async def pause_generation_async(self) -> None:
        """Server side pause on this worker's engine."""
        await self._ready()
        assert self._engine is not None
        await self._engine.pause_generation_async()

    async def continue_generation_async(self) -> None:
        """Undo :meth:`pause_generation`."""
        await self._ready()
        assert self._engine is not None
        await self._engine.continue_generation_async()

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """One generation on this worker's engine."""
        await self._ready()
        assert self._engine is not None
        return await self._engine.generate_async(req)

    async def health_async(self) -> dict[str, bool]:
        """The engine's server health."""
        await self._ready()
        assert self._engine is not None
        return await self._engine.health_async()

    async def server_metrics_async(self) -> pd.DataFrame:
        """The engine's server metrics."""
        await self._ready()
        assert self._engine is not None
        return await self._engine.server_metrics_async()

    async def close(self) -> None:
        """Cancel unfinished tasks and close the engine."""
        if self._executor is not None:
            await self._executor.close_async()
        if self._engine is not None:
            await self._engine.close_async()


def worker_config(config: ExecutorConfig | None) -> ExecutorConfig:
    """The worker-side config: the controller bounds the queue and checks staleness."""
    cfg = config or ExecutorConfig()
    return dataclasses.replace(cfg, queue_size=None, max_staleness=None)


def _shippable(error: BaseException | None) -> BaseException | None:
    """``error`` if it pickles, else a ``WorkflowError`` carrying its text."""
    if error is None:
        return None
    try:
        from ray import cloudpickle

        cloudpickle.dumps(error)  # type: ignore[no-untyped-call]
    except Exception:
        return WorkflowError(f"{type(error).__name__}: {error}")
    return error

