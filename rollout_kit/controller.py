"""``RolloutController``: the facade a notebook user holds.

It owns the one :class:`~rollout_kit.ids.TaskIdGenerator` (0, 1, 2, …) and the one
:class:`~rollout_kit.tracing.Tracer`. Each ``submit`` takes the next id (or claims the
caller's), picks a worker engine with the scheduler and calls
``engine.submit(..., task_id=tid)``; the worker must echo the same id
(``TaskIdMismatchError`` otherwise). Every worker's executor records into the controller's
tracer, so ``traces().index`` is exactly the ids ``submit`` returned.

Sync methods use the plain AReaL names (``wait``, ``rollout_batch``, …) and work in a script
(private ``asyncio.Runner``), in a notebook cell (re-entering the kernel loop via
nest-asyncio2) and fail clearly under uvloop; async twins end in ``_async`` (plus
``aclose``). Capacity settings (``executor_config``) apply per worker.

Usage::

    ctl = RolloutController(sglang=["127.0.0.1:30000"])
    tid = ctl.submit({"prompt": "What is 2+3?"}, workflow)
    [result] = ctl.wait(1)
    ctl.traces().loc[tid]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from .config import EngineConfig, ExecutorConfig
from .errors import (
    ConfigError,
    ControllerStateError,
    TaskIdMismatchError,
    UnknownTaskIdError,
)
from .executor import AcceptFnSpec, WorkflowExecutor, WorkflowSpec
from .executor.batching import BatchCalls
from .executor.resolve import WorkflowFactory, resolve_accept_fn, workflow_factory
from .executor.waiting import Waiters
from .ids import TaskIdGenerator
from .io import RolloutResult
from .scheduler import LocalScheduler, Scheduler
from .tracing import Tracer

if TYPE_CHECKING:
    import os

    import pandas as pd

    from .engines import InferenceEngine

__all__ = ["RolloutController"]

T = TypeVar("T")


class RolloutController(BatchCalls):
    """Submit rollouts to in-process worker engines with one id source and one tracer.

    Args:
        engines: worker engines (one or a sequence); the caller keeps ownership.
        sglang: SGLang server addresses; one ``RemoteSGLangEngine`` over all of them.
        vllm: vLLM server addresses; one ``RemotevLLMEngine`` over all of them.
        engine_config: settings for the engines created from addresses.
        executor_config: capacity settings of each worker's executor.
        tracer: the tracer to record into (default: a new one, writing ``trace_path``).
        trace_path: JSONL file for the default tracer.
        scheduler: picks the worker per task (default ``LocalScheduler()``: round robin). A
            scheduler with ``create_workers`` (``RayScheduler``) builds the workers itself
            from ``sglang=``/``vllm=`` and the configs; ``engines`` must then be empty.

    Raises:
        ConfigError: no engines at all, or two workers with the same name.
        ControllerStateError: an engine's executor still runs tasks of an older controller.
    """

    def __init__(
        self,
        engines: InferenceEngine | Sequence[InferenceEngine] | None = None,
        *,
        sglang: str | Sequence[str] = (),
        vllm: str | Sequence[str] = (),
        engine_config: EngineConfig | None = None,
        executor_config: ExecutorConfig | None = None,
        tracer: Tracer | None = None,
        trace_path: str | os.PathLike[str] | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        from .engines import InferenceEngine, RemoteSGLangEngine, RemotevLLMEngine

        given: list[InferenceEngine]
        if engines is None:
            given = []
        elif isinstance(engines, InferenceEngine):
            given = [engines]
        else:
            given = list(engines)
        for e in given:
            if not isinstance(e, InferenceEngine):
                raise ConfigError(f"engines must be InferenceEngine objects, got {e!r}")
        self.scheduler: Scheduler = scheduler or LocalScheduler()
        create_workers = getattr(self.scheduler, "create_workers", None)
        owned: list[InferenceEngine] = []
        if create_workers is not None:
            if given:
                raise ConfigError(f"{self.scheduler!r} creates its own workers; pass server "
                                  "addresses (sglang=/vllm=), not engines")
            owned = list(create_workers(sglang=sglang, vllm=vllm, engine_config=engine_config,
                                        executor_config=executor_config))
        else:
            if sglang:
                owned.append(RemoteSGLangEngine(sglang, config=engine_config, name="sglang"))
            if vllm:
                owned.append(RemotevLLMEngine(vllm, config=engine_config, name="vllm"))
        self.engines: list[InferenceEngine] = given + owned
        if not self.engines:
            raise ConfigError("RolloutController needs engines, or sglang=/vllm= addresses")
        names = [self._worker_name(e, i) for i, e in enumerate(self.engines)]
        if len(set(names)) != len(names):
            raise ConfigError(f"worker engines need distinct names, got {names}")
        self._owned = owned
        self.tracer = tracer if tracer is not None else Tracer(path=trace_path)
        self.ids = TaskIdGenerator()
        self.waiters = Waiters()
        self._where: dict[int, InferenceEngine] = {}
        self._reserved: dict[int, Callable[[int], None]] = {}
        self._ready: dict[int, None] = {}
        self._closed = False
        self.executors: list[WorkflowExecutor] = []
        for engine, name in zip(self.engines, names, strict=True):
            ex = engine.configure_executor(config=executor_config, tracer=self.tracer,
                                           worker=name)
            ex.add_listener(self._on_result)
            self.executors.append(ex)

    @staticmethod
    def _worker_name(engine: InferenceEngine, index: int) -> str:
        name = getattr(engine, "name", None)
        return name if isinstance(name, str) and name else f"worker{index}"

    # -- lifecycle ---------------------------------------------------------------------
    async def initialize_async(self) -> None:
        """Initialize every engine (health checks); ``async with`` calls it."""
        await asyncio.gather(*(e.initialize() for e in self.engines))

    def initialize(self) -> None:
        """Blocking twin of :meth:`initialize_async`."""
        self._blocking(self.initialize_async(), "initialize()")

    async def aclose(self, *, drain: bool = False) -> None:
        """Cancel (or, with ``drain``, finish) every task, close owned engines, flush traces.

        Idempotent; leaves no asyncio task behind. Finished results stay available from
        ``wait()`` and traces from ``traces()``.
        """
        self._closed = True
        await asyncio.gather(*(ex.aclose(drain=drain) for ex in self.executors))
        await asyncio.gather(*(e.aclose() for e in self._owned))
        self.tracer.flush()
        self.waiters.wake()

    def close(self, *, drain: bool = False) -> None:
        """Blocking twin of :meth:`aclose`."""
        self._blocking(self.aclose(drain=drain), "close()")

    async def __aenter__(self) -> Self:
        await self.initialize_async()
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        self.initialize()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ControllerStateError(f"{what} after aclose(): this controller is closed")

    def _blocking(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        return self.executors[0]._blocking(coro, what)

    def _bind(self) -> None:
        for ex in self.executors:
            ex._bind()

    # -- submit ------------------------------------------------------------------------
    @property
    def queue_size(self) -> int | None:
        """The per-worker queue bound."""
        return self.executors[0].queue_size

    def check_specs(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                    should_accept_fn: object) -> WorkflowFactory:
        """Validate a workflow / ``should_accept_fn`` spec (raises ``ConfigError``).

        A scheduler with its own ``check_specs`` (e.g. one that serializes workflows for
        remote workers) checks too, before any task id is taken. Returns the workflow's
        factory; its ``validate(data)`` checks data items.
        """
        factory = workflow_factory(workflow, workflow_kwargs)
        resolve_accept_fn(should_accept_fn)
        check = getattr(self.scheduler, "check_specs", None)
        if check is not None:
            check(workflow, workflow_kwargs, should_accept_fn)
        return factory

    def submit(
        self,
        data: Any,
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        task_id: int | None = None,
        *,
        worker: str | None = None,
    ) -> int:
        """Queue one rollout on a worker; return its task id at once (non-blocking).

        Args:
            data: the item handed to the workflow.
            workflow: instance, class (+ ``workflow_kwargs``) or import path.
            workflow_kwargs: constructor arguments for a class / import path.
            should_accept_fn: ``fn(trajectory) -> bool`` or import path.
            task_id: an explicit id (must be unused in this controller) or ``None``.
            worker: run on the worker of this name (see ``worker_names()``) instead of the
                scheduler's choice.

        Raises:
            ConfigError: bad workflow spec, or data the workflow's ``validate(data)``
                refuses (no task id is taken then). DuplicateTaskIdError: explicit id reused.
            TaskIdMismatchError: the worker echoed another id.
            ControllerStateError: closed, or the worker's queue is full.
        """
        self._check_open("submit()")
        factory = self.check_specs(workflow, workflow_kwargs, should_accept_fn)
        engine = self._engine_named(worker) if worker is not None else None
        factory.validate(data)
        tid = self.ids.next() if task_id is None else self.ids.claim(task_id)
        return self._submit_to_worker(tid, data, workflow, workflow_kwargs, should_accept_fn,
                                      engine or self.scheduler.choose(self.engines))

    def worker_names(self) -> list[str]:
        """Names of the worker engines, in order (usable as ``submit(..., worker=name)``)."""
        return [self._worker_name(e, i) for i, e in enumerate(self.engines)]

    def _engine_named(self, name: str) -> InferenceEngine:
        names = self.worker_names()
        if name not in names:
            raise ConfigError(f"no worker named {name!r}; workers are {names}")
        return self.engines[names.index(name)]

    def _submit_to_worker(self, tid: int, data: Any, workflow: Any,
                          workflow_kwargs: dict[str, Any] | None, should_accept_fn: Any,
                          engine: InferenceEngine) -> int:
        self._where[tid] = engine
        try:
            echoed = engine.submit(data, workflow, workflow_kwargs=workflow_kwargs,
                                   should_accept_fn=should_accept_fn, task_id=tid)
        except BaseException:
            self._where.pop(tid, None)
            self._reserved.pop(tid, None)
            raise
        if echoed != tid:
            self._where.pop(tid, None)
            self._reserved.pop(tid, None)
            try:
                engine.workflow_executor.cancel(echoed)
            except Exception:  # the worker may not know that id at all
                pass
            raise TaskIdMismatchError(
                f"worker {self._worker_name(engine, 0)!r} echoed task_id {echoed!r} for task "
                f"{tid}; the task was cancelled"
            )
        return tid

    async def submit_reserved(self, data: Any, workflow: Any,
                              workflow_kwargs: dict[str, Any] | None, should_accept_fn: Any,
                              on_done: Callable[[int], None]) -> int:
        """Submit for a batch call: waits for queue room; the result goes to ``on_done``.

        The batch call has already run the workflow's ``validate`` on ``data``.
        """
        self._check_open("submit()")
        engine = self.scheduler.choose(self.engines)
        await engine.workflow_executor.wait_room()
        self._check_open("submit()")
        tid = self.ids.next()
        self._reserved[tid] = on_done
        return self._submit_to_worker(tid, data, workflow, workflow_kwargs, should_accept_fn,
                                      engine)

    # -- results -----------------------------------------------------------------------
    def _on_result(self, result: RolloutResult) -> None:
        tid = result.task_id
        if tid not in self._where:
            return
        cb = self._reserved.get(tid)
        if cb is not None:
            cb(tid)
        else:
            self._ready[tid] = None
        self.waiters.wake()

    def _executor_of(self, task_id: int) -> WorkflowExecutor:
        engine = self._where.get(task_id)
        if engine is None:
            if isinstance(task_id, int) and self.ids.is_used(task_id):
                raise UnknownTaskIdError(f"task {task_id} was already consumed")
            raise UnknownTaskIdError(f"task {task_id!r} was never submitted to this controller")
        return engine.workflow_executor

    def peek(self, task_id: int) -> RolloutResult | None:
        """The result of ``task_id`` if finished and not consumed, else ``None``."""
        return self._executor_of(task_id).peek(task_id)

    def take(self, task_id: int) -> RolloutResult:
        """Consume a finished result (marks ``consume`` in the trace)."""
        result = self._executor_of(task_id).take(task_id)
        del self._where[task_id]
        self._reserved.pop(task_id, None)
        self._ready.pop(task_id, None)
        return result

    def release(self, task_id: int) -> None:
        """End a batch reservation: the result goes to ``wait()``."""
        if self._reserved.pop(task_id, None) is None or task_id not in self._where:
            return
        if self._executor_of(task_id).peek(task_id) is not None:
            self._ready[task_id] = None
            self.waiters.wake()

    def _outstanding(self) -> int:
        return len(self._where) - len(self._reserved)

    def stall_reason(self) -> str | None:
        """Why no worker can progress without outside action, or ``None``."""
        if any(ex.is_running_any() for ex in self.executors):
            return None
        reasons = [f"{ex.worker}: {r}" for ex in self.executors
                   if (r := ex.stall_reason()) is not None]
        return "; ".join(reasons) or None



    # -- control -----------------------------------------------------------------------
    def pause(self) -> None:
        """Stop dispatching new rollouts on every worker (running ones continue)."""
        for ex in self.executors:
            ex.pause()

    def resume(self) -> None:
        """Restart dispatching on every worker."""
        for ex in self.executors:
            ex.resume()
        self.waiters.wake()

    def cancel(self, task_id: int) -> bool:
        """Cancel one task; ``False`` if it already finished."""
        return self._executor_of(task_id).cancel(task_id)

    def cancel_all(self) -> int:
        """Cancel every unfinished task of this controller; returns how many."""
        return sum(1 for tid in list(self._where) if self._where[tid].workflow_executor
                   .peek(tid) is None and self.cancel(tid))

    def set_version(self, version: int) -> None:
        """Set the weight version on every worker and re-check staleness capacity."""
        for ex in self.executors:
            ex.set_version(version)
        self.waiters.wake()

    def get_version(self) -> int:
        """The weight version (of the first worker; all are set together)."""
        return self.engines[0].get_version()

    async def pause_generation_async(self) -> None:
        """Server side: abort in-flight generations and hold new ones on every server."""
        await asyncio.gather(*(e.pause_generation() for e in self.engines))

    async def continue_generation_async(self) -> None:
        """Server side: undo :meth:`pause_generation_async`."""
        await asyncio.gather(*(e.continue_generation() for e in self.engines))

    def pause_generation(self) -> None:
        """Blocking twin of :meth:`pause_generation_async`."""
        self._blocking(self.pause_generation_async(), "pause_generation()")

    def continue_generation(self) -> None:
        """Blocking twin of :meth:`continue_generation_async`."""
        self._blocking(self.continue_generation_async(), "continue_generation()")

    def stats(self) -> dict[str, Any]:
        """Totals over workers (enqueued, running, accepted, …) plus ``workers`` detail."""
        per = {ex.worker or f"worker{i}": ex.stats() for i, ex in enumerate(self.executors)}
        total: dict[str, Any] = {}
        for key in ("enqueued", "running", "accepted", "rejected", "failed", "cancelled",
                    "submitted", "consumed", "capacity"):
            total[key] = sum(int(s[key]) for s in per.values())
        total.update(ready=len(self._ready), outstanding=len(self._where),
                     version=self.get_version(),
                     paused=all(bool(s["paused"]) for s in per.values()),
                     closed=self._closed, next_task_id=self.ids.peek, workers=per)
        return total

    # -- traces ------------------------------------------------------------------------
    def traces(self) -> pd.DataFrame:
        """The tasks DataFrame, indexed by ``task_id``."""
        return self.tracer.tasks_df()

    def sessions(self) -> pd.DataFrame:
        """The sessions DataFrame, indexed by ``(task_id, session_id)``."""
        return self.tracer.sessions_df()

    def spans(self) -> pd.DataFrame:
        """The spans DataFrame (one row per phase span)."""
        return self.tracer.spans_df()

    def __repr__(self) -> str:
        s = self.stats()
        return (f"RolloutController(workers={[ex.worker for ex in self.executors]}, "
                f"outstanding={s['outstanding']}, running={s['running']}, "
                f"accepted={s['accepted']}, closed={s['closed']})")
