"""``RayWorker``: the body of one Ray actor that runs rollouts for a ``RayScheduler``.

Each actor process builds the pieces of an in-process worker on its own event loop (Ray's
async-actor loop): one engine (from the engine factory), one
:class:`~rollout_kit.WorkflowExecutor` *given* that engine, one in-memory
:class:`~rollout_kit.tracing.Tracer`, paired in a :class:`~rollout_kit.workers.LocalWorker`.
The executor's sink resolves the future of each :meth:`RayWorker.run` call, which echoes
the controller's task id in a :class:`~.wire.RemoteOutcome` together with the trace record
of exactly that task (drained from the worker's tracer): traces travel piggy-backed on
results, and a record is never shipped twice nor for a task lost with its worker.

This module never imports Ray: :mod:`.pool` wraps :class:`RayWorker` with ``ray.remote``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._config import ExecutorConfig
from ..._executor import Job, Recipe, WorkflowExecutor, make_recipe
from ..._loop import LoopBinding
from ...tracing import Tracer
from .._local import LocalWorker
from .wire import RemoteOutcome, shippable

if TYPE_CHECKING:
    import pandas as pd

    from ..._io import ModelRequest, ModelResponse, RolloutResult
    from ...engines import InferenceEngine

EngineFactory = Callable[[int], "InferenceEngine"]
_CACHE_SIZE = 256


def worker_config(config: ExecutorConfig | None) -> ExecutorConfig:
    """The worker-side config: the controller bounds the queue and checks staleness."""
    cfg = config or ExecutorConfig()
    return dataclasses.replace(cfg, queue_size=None, max_staleness=None)


class RayWorker:
    """One worker process: engine + executor + tracer (wrapped by ``ray.remote``).

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
        self._build_task: asyncio.Task[LocalWorker] | None = None
        self._worker: LocalWorker | None = None
        self._tracer = Tracer(worker=name)
        self._futures: dict[int, asyncio.Future[RolloutResult]] = {}
        self._stash: dict[int, dict[str, Any]] = {}
        self._header: dict[str, Any] = {}
        self._recipes: OrderedDict[str, Recipe] = OrderedDict()
        self._seq = {"paused": -1, "version": -1}
        self._paused = False

    # -- start ----------------------------------------------------------------------------
    async def _ready(self) -> LocalWorker:
        if self._build_task is None:
            self._build_task = asyncio.ensure_future(self._build())
        return await asyncio.shield(self._build_task)

    async def _build(self) -> LocalWorker:
        engine = self._factory(self.index)
        await engine.initialize_async()
        ex = WorkflowExecutor(engine, sink=self._on_result, config=self._config,
                              tracer=self._tracer, worker=self.name, binding=LoopBinding())
        worker = LocalWorker(engine, ex, owns_engine=True)
        if self._paused:
            worker.pause()
        self._worker = worker
        return worker

    async def start(self) -> dict[str, Any]:
        """Build and initialize the engine (once); return ``pid`` and the wall clock."""
        await self._ready()
        return {"pid": os.getpid(), "wall": time.time(), "name": self.name}

    def clock(self) -> float:
        """Now on this worker's trace time axis (:meth:`Tracer.trace_clock`), for the anchor
        exchange."""
        return self._tracer.trace_clock()

    # -- tasks ----------------------------------------------------------------------------
    def _on_result(self, result: RolloutResult) -> None:
        fut = self._futures.pop(result.task_id, None)
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _recipe(self, key: str, blob: bytes) -> Recipe:
        recipe = self._recipes.get(key)
        if recipe is None:
            workflow, kwargs, accept = pickle.loads(blob)
            recipe = make_recipe(workflow, kwargs, accept)
            self._recipes[key] = recipe
            if len(self._recipes) > _CACHE_SIZE:
                self._recipes.popitem(last=False)
        else:
            self._recipes.move_to_end(key)
        return recipe

    async def run(self, task_id: int, key: str, blob: bytes, data: Any, attempt: int = 0,
                  lost: tuple[str, ...] = ()) -> RemoteOutcome:
        """Run one task with the controller's ``task_id``; return its outcome and trace.

        ``key``/``blob`` are the serialized ``(workflow, workflow_kwargs,
        should_accept_fn)``; a workflow instance is deserialized once per content key and
        then reused, so its state persists across the tasks of this worker. ``attempt`` > 0
        marks a task re-dispatched after ``lost`` workers died (``redispatched`` and
        ``lost_workers`` trace attributes).
        """
        worker = await self._ready()
        recipe = self._recipe(key, blob)
        fut: asyncio.Future[RolloutResult] = asyncio.get_running_loop().create_future()
        self._futures[task_id] = fut
        try:
            worker.submit(Job(task_id, data, recipe))
        except BaseException:
            self._futures.pop(task_id, None)
            raise
        if attempt and not fut.done():
            self._tracer.annotate_task(task_id, redispatched=attempt, lost_workers=",".join(lost))
        return self._outcome(await fut)

    def _outcome(self, result: RolloutResult) -> RemoteOutcome:
        recs = self._tracer.drain_records()
        if recs:
            self._header = recs[0]
            for rec in recs[1:]:
                if rec.get("kind") == "task":
                    self._stash[int(rec["task_id"])] = rec
        return RemoteOutcome(
            task_id=result.task_id, status=result.status, reason=result.reason,
            error=shippable(result.error), traceback=result.traceback,
            trajectory=result.trajectory, worker=self.name, header=dict(self._header),
            record=self._stash.pop(result.task_id, None),
        )

    def cancel(self, task_id: int) -> bool:
        """Cancel a task of this worker; ``False`` if unknown or already finished."""
        if self._worker is None:
            return False
        try:
            return self._worker.cancel(task_id)
        except Exception:
            return False

    # -- control (sequence numbers keep the order of fan-out calls) -------------------------
    def set_paused(self, paused: bool, seq: int) -> None:
        """Pause or resume dispatch; ignored when older than the last applied call."""
        if seq <= self._seq["paused"]:
            return
        self._seq["paused"] = seq
        self._paused = paused
        if self._worker is not None:
            if paused:
                self._worker.pause()
            else:
                self._worker.resume()

    async def set_version(self, version: int, seq: int) -> None:
        """Set the weight version; ignored when older than the last applied call."""
        if seq <= self._seq["version"]:
            return
        self._seq["version"] = seq
        (await self._ready()).set_version(version)

    async def stats(self) -> dict[str, Any]:
        """The executor's counters plus ``name`` and ``pid``."""
        return {**(await self._ready()).stats(), "name": self.name, "pid": os.getpid()}

    async def pause_generation_async(self) -> None:
        """Server side pause on this worker's engine."""
        await (await self._ready()).engine.pause_generation_async()

    async def continue_generation_async(self) -> None:
        """Undo :meth:`pause_generation_async`."""
        await (await self._ready()).engine.continue_generation_async()

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """One generation on this worker's engine."""
        return await (await self._ready()).engine.generate_async(req)

    async def health_async(self) -> dict[str, bool]:
        """The engine's server health."""
        return await (await self._ready()).engine.health_async()

    async def server_metrics_async(self) -> pd.DataFrame:
        """The engine's server metrics."""
        return await (await self._ready()).engine.server_metrics_async()

    async def close(self) -> None:
        """Cancel unfinished tasks and close the engine."""
        if self._worker is not None:
            await self._worker.close_async()
