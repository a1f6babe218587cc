"""``WorkflowExecutor``: runs workflows as asyncio tasks on the caller's event loop.

No thread, no private loop of its own, no polling: ``submit`` enqueues and dispatches at once
when capacity allows; every state change (a task finishing, ``resume``, ``set_version``,
``cancel``) re-runs dispatch and wakes waiters. The executor binds to the loop of its first
use: the running loop (a notebook kernel, an ``async def``), or, from sync code with no
running loop, the private per-thread loop of :func:`rollout_kit._loop.private_loop` — tasks
created there progress whenever a blocking call (``wait``, ``rollout_batch`` …) runs it.

Lifecycle marks recorded in the tracer: ``submit`` (``register_task``), ``dispatch``
(capacity granted), ``start``, ``end``, ``consume`` (handed back by ``wait``/``wait_for``/a
batch call). Every submitted task reaches exactly one terminal status (accepted, rejected,
failed, cancelled), recorded with ``tracer.finalize`` with a ``reason``: ``returned_none`` and
``should_accept_fn`` (rejected), ``cancelled`` / ``closed`` (cancelled), and for a failure the
``failure_reason`` of the engine error that ended it (``no_healthy_server``, ``timeout``,
``server_error`` …, see :mod:`rollout_kit.errors`) or ``workflow_exception`` for any other.

Queue bound: ``ExecutorConfig.queue_size`` bounds tasks waiting for dispatch. ``submit`` is
non-blocking, so on a full queue it raises ``ControllerStateError``; ``rollout_batch`` and
``prepare_batch`` wait for room instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
import traceback
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .._loop import private_loop, run_sync, running_loop
from ..config import ExecutorConfig
from ..errors import (
    ConfigError,
    ControllerStateError,
    EngineError,
    UnknownTaskIdError,
)
from ..ids import TaskIdGenerator
from ..io import RolloutResult, Status
from .batching import BatchCalls
from .resolve import AcceptFn, WorkflowFactory, resolve_accept_fn, workflow_factory
from .staleness import capacity, stall_message
from .waiting import Waiters

if TYPE_CHECKING:
    from ..engines import InferenceEngine
    from ..tracing import Tracer
    from .resolve import AcceptFnSpec, WorkflowSpec

__all__ = ["WorkflowExecutor"]

T = TypeVar("T")
Listener = Callable[[RolloutResult], None]


@dataclass(slots=True, eq=False)
class _Task:
    task_id: int
    data: Any
    factory: WorkflowFactory
    accept_fn: AcceptFn | None
    on_done: Callable[[int], None] | None = None  # set while reserved by a batch call
    handle: asyncio.Task[None] | None = None
    result: RolloutResult | None = None
    consumed: bool = False
    cancelling: bool = False


def error_text(error: BaseException) -> str:
    """The ``error`` text of a failed task: ``Type: message``, after the short label of an
    engine error (``no healthy server (127.0.0.1:1) — NoHealthyServerError: …``)."""
    text = f"{type(error).__name__}: {error}"
    return f"{error.brief} — {text}" if isinstance(error, EngineError) else text


#: Most tasks started per event-loop turn (keeps the loop responsive under big submits).
DISPATCH_SLICE = 32


class WorkflowExecutor(BatchCalls):
    """Runs ``workflow.arun_episode(engine, data)`` per submitted task with capacity control.

    Args:
        engine: the engine handed to every workflow.
        config: capacity, queue bound, staleness control.
        tracer: where lifecycles are recorded; a fresh in-memory ``Tracer()`` when ``None``.
        id_generator: the id source for ``submit(task_id=None)``; a fresh one when ``None``.
        worker: written into every task record (``worker`` column).
    """

    def __init__(
        self,
        engine: InferenceEngine,
        *,
        config: ExecutorConfig | None = None,
        tracer: Tracer | None = None,
        id_generator: TaskIdGenerator | None = None,
        worker: str | None = None,
    ) -> None:
        if config is not None and not isinstance(config, ExecutorConfig):
            raise ConfigError(f"config must be an ExecutorConfig, got {type(config).__name__}")
        if tracer is None:
            from ..tracing import Tracer

            tracer = Tracer()
        self.engine = engine
        self.config = config or ExecutorConfig()
        self.tracer: Tracer = tracer
        self.worker = worker
        self.ids = id_generator or TaskIdGenerator()
        self.waiters = Waiters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._tasks: dict[int, _Task] = {}  # submitted and not consumed
        self._n_reserved = 0  # tasks in _tasks whose result belongs to a batch call
        self._pending: deque[_Task] = deque()
        self._running: dict[int, _Task] = {}
        self._ready: dict[int, None] = {}  # unreserved finished results, completion order
        self._counts = {"accepted": 0, "rejected": 0, "failed": 0, "cancelled": 0,
                        "submitted": 0, "consumed": 0}
        self._listeners: list[Listener] = []
        self._paused = False
        self._closed = False
        self._draining = False
        self._turn_started = 0  # tasks started in the current loop turn
        loop = running_loop()
        if loop is not None:
            self._bind_to(loop)

    # -- loop binding ----------------------------------------------------------------------
    def _bind_to(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The executor's loop, binding now if unbound; checks we are on its thread."""
        cur = running_loop()
        if self._loop is None:
            self._bind_to(cur if cur is not None else private_loop())
        loop = self._loop
        assert loop is not None
        if cur is not None and cur is not loop:
            raise ControllerStateError(
                "this executor is bound to another event loop (it was first used there); "
                "create a new controller/executor for this loop"
            )
        return loop

    def _on_owner_thread(self) -> bool:
        return self._thread is None or self._thread == threading.get_ident()

    def _blocking(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run an async twin to completion from sync code."""
        loop = self._loop
        if loop is not None and not self._on_owner_thread():
            if loop.is_running():
                return asyncio.run_coroutine_threadsafe(coro, loop).result()
            coro.close()
            raise ControllerStateError(
                f"{what} was called from another thread while the executor's loop is idle"
            )
        cur = running_loop()
        if loop is not None and cur is None and loop is not private_loop():
            coro.close()
            raise ControllerStateError(
                f"{what}: the executor's event loop is not running; use the async twin there"
            )
        return run_sync(coro, what=what)

    # -- submit ----------------------------------------------------------------------------
    @property
    def queue_size(self) -> int | None:
        """The queue bound (tasks waiting for dispatch), ``None`` when unbounded."""
        return self.config.queue_size

    def check_specs(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                    should_accept_fn: object) -> WorkflowFactory:
        """Validate a workflow / ``should_accept_fn`` spec now (raises ``ConfigError``).

        Returns the workflow's factory; its ``validate(data)`` checks data items.
        """
        factory = workflow_factory(workflow, workflow_kwargs)
        resolve_accept_fn(should_accept_fn)
        return factory

    def submit(
        self,
        data: Any,
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        task_id: int | None = None,
    ) -> int:
        """Queue one rollout and return its task id at once (non-blocking).

        Callable from async code, from sync code while the loop runs (widget callbacks), from
        sync code with no running loop (the task runs when a blocking call runs the private
        loop) and from other threads (thread-safe id allocation, scheduled onto the loop).

        Args:
            data: the item handed to ``arun_episode``.
            workflow: a workflow instance, a class (with ``workflow_kwargs``) or an import
                path ``"pkg.mod:Name"``.
            workflow_kwargs: constructor arguments for a class / import path.
            should_accept_fn: ``fn(trajectory) -> bool`` (or awaitable, or import path);
                false rejects the result with reason ``"should_accept_fn"``.
            task_id: an explicit id (claimed; reuse raises ``DuplicateTaskIdError``), or
                ``None`` for the next id of this executor's generator.

        Raises:
            ConfigError: bad workflow / should_accept_fn spec, or data the workflow's
                ``validate(data)`` refuses; no task id is taken then.
            DuplicateTaskIdError, InvalidTaskIdError: bad explicit id.
            ControllerStateError: closed, or the queue bound is reached.
        """
        self._check_open("submit()")
        factory = workflow_factory(workflow, workflow_kwargs)
        accept = resolve_accept_fn(should_accept_fn)
        factory.validate(data)
        on_thread = self._on_owner_thread()
        loop = self._bind() if on_thread else self._loop
        assert loop is not None
        qs = self.config.queue_size
        if qs is not None and len(self._pending) >= qs:
            raise ControllerStateError(
                f"the queue is full ({len(self._pending)} task(s) waiting for dispatch, "
                f"queue_size={qs}); wait() for results, resume() if paused, or raise queue_size"
            )
        tid = self.ids.next() if task_id is None else self.ids.claim(task_id)
        task = _Task(tid, data, factory, accept)
        if on_thread:
            self._enqueue(task)
        else:
            loop.call_soon_threadsafe(self._enqueue, task)
        return tid

    async def submit_reserved(self, data: Any, workflow: Any,
                              workflow_kwargs: dict[str, Any] | None, should_accept_fn: Any,
                              on_done: Callable[[int], None],
                              task_id: int | None = None) -> int:
        """Submit a task whose result goes to ``on_done`` (batch calls); waits for room.

        The batch call has already run the workflow's ``validate`` on ``data``.
        """
        self._check_open("submit()")
        factory = workflow_factory(workflow, workflow_kwargs)
        accept = resolve_accept_fn(should_accept_fn)
        self._bind()
        await self.wait_room()
        self._check_open("submit()")
        tid = self.ids.next() if task_id is None else self.ids.claim(task_id)
        task = _Task(tid, data, factory, accept, on_done=on_done)
        self._enqueue(task)
        return tid

    async def wait_room(self) -> None:
        """Return once the queue bound allows one more task (at once when unbounded)."""
        qs = self.config.queue_size
        if qs is not None:
            self._bind()
            await self.waiters.until(lambda: len(self._pending) < qs, timeout=None,
                                     what="waiting for queue room",
                                     stall_reason=self.stall_reason)

    def _enqueue(self, task: _Task) -> None:
        tid = task.task_id
        self.tracer.register_task(tid, worker=self.worker)
        self._tasks[tid] = task
        if task.on_done is not None:
            self._n_reserved += 1
        self._counts["submitted"] += 1
        if self._closed:
            self._finish(task, "cancelled", "closed")
            return
        self._pending.append(task)
        self._dispatch()

    # -- dispatch & run --------------------------------------------------------------------
    def capacity(self) -> int:
        """How many more tasks may start now (negative when over budget)."""
        return capacity(self.config, running=len(self._running),
                        accepted=self._counts["accepted"], version=self.engine.get_version())

    def _dispatch(self) -> None:
        """Start queued tasks while capacity allows, at most ``DISPATCH_SLICE`` per loop turn.

        Each start runs its first step (request building, connecting) in the next loop turn;
        starting 1,000 at once would stall the loop for a few hundred ms (a frozen notebook),
        so the rest is dispatched in later turns.
        """
        if self._paused or not self._pending or (self._closed and not self._draining):
            return
        loop = self._loop
        assert loop is not None
        n = min(self.capacity(), DISPATCH_SLICE - self._turn_started)
        started = False
        while n > 0 and self._pending:
            if self._turn_started == 0:  # first start this turn: the budget resets next turn
                loop.call_soon(self._next_turn)
            self._turn_started += 1
            task = self._pending.popleft()
            self.tracer.mark(task.task_id, "dispatch")
            self._running[task.task_id] = task
            task.handle = loop.create_task(self._run(task), name=f"rollout-{task.task_id}",
                                           context=contextvars.Context())
            task.handle.add_done_callback(functools.partial(self._on_handle_done, task))
            n -= 1
            started = True
        if started and self.config.queue_size is not None:
            self.waiters.wake()  # queue room

    def _next_turn(self) -> None:
        self._turn_started = 0
        self._dispatch()

    async def _run(self, task: _Task) -> None:
        tid = task.task_id
        tracer = self.tracer
        status: Status = "accepted"
        reason: str | None = None
        error: BaseException | None = None
        tb: str | None = None
        traj: Any = None
        with tracer.task_scope(tid):
            tracer.mark(tid, "start")
            try:
                traj = await task.factory().arun_episode(self.engine, task.data)
                if traj is None:
                    status, reason = "rejected", "returned_none"
                elif task.accept_fn is not None:
                    ok = task.accept_fn(traj)
                    if inspect.isawaitable(ok):
                        ok = await ok
                    if not ok:
                        status, reason = "rejected", "should_accept_fn"
            except asyncio.CancelledError:
                status, reason, traj = "cancelled", "cancelled", None
            except EngineError as exc:  # the server's side: no_healthy_server, timeout, …
                status, reason, error, traj = "failed", exc.failure_reason, exc, None
                tb = traceback.format_exc()
            except Exception as exc:
                status, reason, error, traj = "failed", "workflow_exception", exc, None
                tb = traceback.format_exc()
            tracer.mark(tid, "end")
        self._finish(task, status, reason, error=error, tb=tb, trajectory=traj)

    def _on_handle_done(self, task: _Task, _handle: asyncio.Task[None]) -> None:
        if task.result is None:  # cancelled before its first step: _run never ran
            self._finish(task, "cancelled", "cancelled")

    def _finish(self, task: _Task, status: Status, reason: str | None, *,
                error: BaseException | None = None, tb: str | None = None,
                trajectory: Any = None) -> None:
        tid = task.task_id
        self._running.pop(tid, None)
        self._counts[status] += 1
        result = RolloutResult(task_id=tid, status=status, reason=reason, error=error,
                               traceback=tb, trajectory=trajectory, worker=self.worker)
        task.result = result
        err_text = None if error is None else error_text(error)
        self.tracer.finalize(tid, status, reason=reason, error=err_text)
        if task.on_done is not None:
            task.on_done(tid)
        else:
            self._ready[tid] = None
        for listener in self._listeners:
            listener(result)
        self.waiters.wake()
        self._dispatch()

    # -- results ---------------------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(result)`` whenever a task reaches its terminal status."""
        self._listeners.append(fn)

    def peek(self, task_id: int) -> RolloutResult | None:
        """The result of ``task_id`` if finished (not consumed), else ``None``."""
        return self._get(task_id).result

    def is_done(self, task_id: int) -> bool:
        """Whether ``task_id`` has reached a terminal status (raises if unknown/consumed)."""
        return self._get(task_id).result is not None

    def take(self, task_id: int) -> RolloutResult:
        """Consume a finished result (marks ``consume``); it leaves the executor."""
        task = self._get(task_id)
        result = task.result
        if result is None:
            raise ControllerStateError(f"task {task_id} has not finished yet")
        del self._tasks[task_id]
        if task.on_done is not None:
            self._n_reserved -= 1
        self._ready.pop(task_id, None)
        if not task.consumed:
            task.consumed = True
            self._counts["consumed"] += 1
            self.tracer.mark(task_id, "consume")
        return result

    def release(self, task_id: int) -> None:
        """End a batch reservation: the result (now or later) goes to ``wait()``."""
        task = self._tasks.get(task_id)
        if task is None or task.on_done is None:
            return
        task.on_done = None
        self._n_reserved -= 1
        if task.result is not None:
            self._ready[task_id] = None
            self.waiters.wake()

    def _get(self, task_id: int) -> _Task:
        task = self._tasks.get(task_id)
        if task is None:
            if isinstance(task_id, int) and self.ids.is_used(task_id):
                raise UnknownTaskIdError(f"task {task_id} was already consumed (or is "
                                         "still being scheduled from another thread)")
            raise UnknownTaskIdError(f"task {task_id!r} was never submitted here")
        return task

    def stall_reason(self) -> str | None:
        """Why nothing can progress without outside action, or ``None`` when it can."""
        if self._running:
            return None
        if self._pending and self._paused:
            return (f"the executor is paused with {len(self._pending)} task(s) queued and none "
                    "running; call resume()")
        if self._pending and self.capacity() <= 0:
            return stall_message(self.config, accepted=self._counts["accepted"],
                                 version=self.engine.get_version(), queued=len(self._pending))
        return None

    def _outstanding(self) -> int:
        return len(self._tasks) - self._n_reserved



    # -- control ---------------------------------------------------------------------------
    def pause(self) -> None:
        """Stop dispatching queued tasks; running ones continue."""
        self._paused = True

    def resume(self) -> None:
        """Restart dispatching."""
        self._paused = False
        if self._loop is not None:
            self._dispatch()
        self.waiters.wake()

    def is_paused(self) -> bool:
        """Whether dispatch is paused."""
        return self._paused

    def set_version(self, version: int) -> None:
        """Set the engine's weight version and re-check staleness capacity."""
        self.engine.set_version(version)
        if self._loop is not None:
            self._dispatch()
        self.waiters.wake()

    def get_version(self) -> int:
        """The engine's weight version."""
        return self.engine.get_version()

    def cancel(self, task_id: int) -> bool:
        """Cancel one task; ``False`` if it already finished.

        A queued task is cancelled at once; a running one when it next awaits.
        """
        task = self._get(task_id)
        if task.result is not None:
            return False
        if task.cancelling:
            return True
        task.cancelling = True
        if task.handle is None:
            self._pending.remove(task)
            self._finish(task, "cancelled", "cancelled")
        else:
            task.handle.cancel()
        return True

    def cancel_all(self) -> int:
        """Cancel every unfinished task; returns how many were cancelled."""
        n = 0
        for task in list(self._tasks.values()):
            if task.result is None and not task.cancelling and self.cancel(task.task_id):
                n += 1
        return n

    def is_running_any(self) -> bool:
        """Whether any task is running now."""
        return bool(self._running)

    def has_tasks(self) -> bool:
        """Whether any task is queued or running."""
        return bool(self._pending or self._running)

    def stats(self) -> dict[str, Any]:
        """Counters: enqueued, running, accepted, rejected, failed, cancelled, capacity, …"""
        cfg = self.config
        return {
            "enqueued": len(self._pending),
            "running": len(self._running),
            "accepted": self._counts["accepted"],
            "rejected": self._counts["rejected"],
            "failed": self._counts["failed"],
            "cancelled": self._counts["cancelled"],
            "submitted": self._counts["submitted"],
            "consumed": self._counts["consumed"],
            "ready": len(self._ready),
            "capacity": self.capacity(),
            "version": self.engine.get_version(),
            "paused": self._paused,
            "closed": self._closed,
            "max_concurrent_rollouts": cfg.max_concurrent_rollouts,
            "queue_size": cfg.queue_size,
            "max_staleness": cfg.max_staleness,
            "consumer_batch_size": cfg.consumer_batch_size,
        }

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ControllerStateError(f"{what} after aclose(): this executor is closed")

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    async def aclose(self, *, drain: bool = False) -> None:
        """Stop accepting tasks; cancel unfinished ones (or, with ``drain``, let them finish).

        Leaves no asyncio task behind. Finished results stay available from ``wait()``.
        Idempotent.
        """
        self._closed = True
        if self._loop is None:
            return
        self._bind()
        if drain:
            self._draining = True
            self._paused = False
            self._dispatch()
            await self.waiters.until(lambda: not self.has_tasks(), timeout=None,
                                     what="aclose(drain=True)", stall_reason=self.stall_reason)
        else:
            for task in list(self._pending):
                self._pending.remove(task)
                self._finish(task, "cancelled", "closed")
        handles = [t.handle for t in self._running.values() if t.handle is not None]
        for h in handles:
            h.cancel()
        if handles:
            await asyncio.gather(*handles, return_exceptions=True)

    def close(self, *, drain: bool = False) -> None:
        """Blocking twin of :meth:`aclose`."""
        self._blocking(self.aclose(drain=drain), "close()")

    def __repr__(self) -> str:
        s = self.stats()
        return (f"WorkflowExecutor(worker={self.worker!r}, running={s['running']}, "
                f"enqueued={s['enqueued']}, ready={s['ready']}, paused={s['paused']}, "
                f"closed={s['closed']})")
