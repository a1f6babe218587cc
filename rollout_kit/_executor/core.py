"""``WorkflowExecutor``: runs workflows on the engine it is given, on the caller's loop.

The executor is *given* its engine (as an httpx client is given its transport), its tracer,
the id of every task (ids come from the controller's one counter) and a ``sink`` that
receives each result: it does not keep results, create ids or know who holds it. No thread,
no loop of its own, no polling: :meth:`submit` queues and starts at once when capacity
allows (:class:`~rollout_kit._executor.dispatch.Dispatcher`); every task ending re-runs
dispatch.

Lifecycle marks recorded in the tracer: ``submit`` (``register_task``), ``dispatch``
(capacity granted), ``start``, ``end`` (``tracer.finalize``, right after the workflow and
``should_accept_fn`` returned); the result's owner marks ``consume``. Every
submitted task reaches exactly one terminal status (accepted, rejected, failed, cancelled),
recorded with ``tracer.finalize`` before the sink sees the result.

Reasons: ``returned_none`` and ``should_accept_fn`` (rejected), ``cancelled`` / ``closed``
(cancelled), and for a failure the ``failure_reason`` of the engine error that ended it
(``no_healthy_server``, ``timeout``, ``server_error`` …, see :mod:`rollout_kit._errors`) or
``workflow_exception`` for any other.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._config import ExecutorConfig
from .._errors import AgentError, ConfigError, ControllerStateError, EngineError
from .._io import RolloutResult, Status
from .._loop import LoopBinding
from .dispatch import Dispatcher, Job

if TYPE_CHECKING:
    from ..engines import InferenceEngine
    from ..tracing import Tracer

ResultSink = Callable[[RolloutResult], None]


def error_text(error: BaseException) -> str:
    """The ``error`` text of a failed task: ``Type: message``, after the short label of an
    engine error (``no healthy server (127.0.0.1:1) — NoHealthyServerError: …``)."""
    text = f"{type(error).__name__}: {error}"
    return f"{error.brief} — {text}" if isinstance(error, EngineError) else text


class RolloutTask(asyncio.Task[None]):
    """A workflow's asyncio task: tells its executor when it is asked to cancel.

    An asyncio task cancelled before its first step never runs its coroutine, so the
    executor must then finish the job itself. A done callback on every task would see it,
    but every task would pay for it on the hot path (see ``bench/bench_task_cost.py``); this
    task calls ``on_cancel(task_id)`` once, at the first ``cancel()`` by anyone (the
    executor, ``asyncio.run``'s shutdown, user code), and only then is a callback attached.
    It holds the task's id, not its job: the job holds the task.

    Made by :meth:`WorkflowExecutor._start`, which sets ``task_id`` and ``on_cancel`` right
    after construction, before anything can cancel it: no ``__init__`` of its own, so that
    making a task costs no extra Python call (see ``bench/bench_task_cost.py``). Made
    directly, so a task factory set on the loop is not used for workflow tasks.
    """

    __slots__ = ("on_cancel", "task_id")

    task_id: int
    on_cancel: Callable[[int], None] | None

    def cancel(self, msg: Any | None = None) -> bool:
        """Request cancellation (as ``asyncio.Task.cancel``); the first request of a task
        not done yet is reported to the executor."""
        watch, self.on_cancel = self.on_cancel, None
        if watch is not None and not self.done():
            watch(self.task_id)
        return super().cancel(msg)


class WorkflowExecutor:
    """Runs ``workflow.arun_episode(engine, data)`` per submitted task with capacity control.

    Args:
        engine: the engine handed to every workflow.
        sink: receives every task's :class:`RolloutResult` once, when it ends.
        config: capacity, queue bound, staleness control.
        tracer: where lifecycles are recorded; a fresh in-memory ``Tracer()`` when ``None``.
        worker: written into every task record (``worker`` column).
        binding: the event loop this executor lives on (shared with its controller).
    """

    def __init__(
        self,
        engine: InferenceEngine,
        *,
        sink: ResultSink,
        config: ExecutorConfig | None = None,
        tracer: Tracer | None = None,
        worker: str | None = None,
        binding: LoopBinding | None = None,
    ) -> None:
        if config is not None and not isinstance(config, ExecutorConfig):
            raise ConfigError(f"config must be an ExecutorConfig, got {type(config).__name__}")
        if tracer is None:
            from ..tracing import Tracer

            tracer = Tracer()
        self.engine = engine
        self.config = config or ExecutorConfig()
        self.tracer: Tracer = tracer
        self._starts = tracer.task_starts()
        self.worker = worker
        self.binding = binding or LoopBinding()
        self._sink = sink
        self._queue = Dispatcher(self.config, version=engine.get_version, start=self._start)
        self._counts = {"accepted": 0, "rejected": 0, "failed": 0, "cancelled": 0,
                        "submitted": 0}
        self._closed = False

    # -- submit ----------------------------------------------------------------------------
    def check_room(self) -> None:
        """Raise ``ControllerStateError`` when closed or the queue bound is reached."""
        if self._closed:
            raise ControllerStateError("submit() after close_async(): this worker is closed")
        self._queue.check_room()

    def has_room(self) -> bool:
        """Whether the queue bound allows one more task now."""
        return self._queue.has_room()

    def submit(self, job: Job) -> None:
        """Register ``job`` in the tracer and queue it (on the executor's loop thread)."""
        tid = job.task_id
        self.tracer.register_task(tid, worker=self.worker)
        self._counts["submitted"] += 1
        if self._closed:
            self._closed_out(job)
            return
        loop = self.binding.loop  # bound (and checked) by the controller's submit
        self._queue.enqueue(job, loop if loop is not None else self.binding.bind())

    # -- run -------------------------------------------------------------------------------
    def _start(self, job: Job) -> None:
        if self._closed and not self._queue.draining:
            self._queue.running.pop(job.task_id, None)
            self._closed_out(job)
            return
        loop = self.binding.loop  # dispatch runs on the bound loop
        assert loop is not None
        tid = job.task_id
        context = self._starts.dispatch(tid)  # marks dispatch
        task = RolloutTask(self._run(job), loop=loop, name=f"rollout-{tid}", context=context)
        task.task_id, task.on_cancel = tid, self._watch
        job.handle = task

    async def _run(self, job: Job) -> None:
        tid = job.task_id
        recipe = job.recipe
        status: Status = "accepted"
        reason: str | None = None
        error: BaseException | None = None
        tb: str | None = None
        traj: Any = None
        self._starts.start(tid)
        try:
            traj = await recipe.factory().arun_episode(self.engine, job.data)
            if traj is None:
                status, reason = "rejected", "returned_none"
            elif recipe.accept_fn is not None:
                ok = recipe.accept_fn(traj)
                if inspect.isawaitable(ok):
                    ok = await ok
                if not ok:
                    status, reason = "rejected", "should_accept_fn"
        except asyncio.CancelledError:
            status, reason, traj = "cancelled", "cancelled", None
        except (EngineError, AgentError) as exc:  # no_healthy_server, turn_timeout, …
            status, reason, error, traj = "failed", exc.failure_reason, exc, None
            tb = traceback.format_exc()
        except Exception as exc:
            status, reason, error, traj = "failed", "workflow_exception", exc, None
            tb = traceback.format_exc()
        self._finish(job, status, reason, error=error, tb=tb, trajectory=traj)  # marks end

    def _watch(self, task_id: int) -> None:
        """The asyncio task of running task ``task_id`` is asked to cancel: finish the job
        if that task ends without having run ``_run`` (cancelled before its first step)."""
        job = self._queue.running.get(task_id)
        if job is not None and job.handle is not None:
            job.handle.add_done_callback(functools.partial(self._on_handle_done, job))

    def _on_handle_done(self, job: Job, _handle: asyncio.Task[None]) -> None:
        if job.task_id in self._queue.running:  # cancelled before its first step
            self._finish(job, "cancelled", "cancelled")

    def _finish(self, job: Job, status: Status, reason: str | None, *,
                error: BaseException | None = None, tb: str | None = None,
                trajectory: Any = None) -> None:
        tid = job.task_id
        self._queue.done(job, status == "accepted")
        self._counts[status] += 1
        err_text = None if error is None else error_text(error)
        self.tracer.finalize(tid, status, reason=reason, error=err_text)
        self._sink(RolloutResult(task_id=tid, status=status, reason=reason, error=error,
                                 traceback=tb, trajectory=trajectory, worker=self.worker))
        loop = self.binding.loop
        if loop is not None:
            self._queue.dispatch(loop)

    # -- control ---------------------------------------------------------------------------
    def pause(self) -> None:
        """Stop dispatching queued tasks; running ones continue."""
        self._queue.paused = True

    def resume(self) -> None:
        """Restart dispatching."""
        self._queue.paused = False
        self._redispatch()

    def is_paused(self) -> bool:
        """Whether dispatch is paused."""
        return self._queue.paused

    def set_version(self, version: int) -> None:
        """Set the engine's weight version and re-check staleness capacity."""
        self.engine.set_version(version)
        self._redispatch()

    def get_version(self) -> int:
        """The engine's weight version."""
        return self.engine.get_version()

    def _redispatch(self) -> None:
        loop = self.binding.loop
        if loop is not None:
            self._queue.dispatch(loop)

    def cancel(self, task_id: int) -> bool:
        """Cancel a queued or running task; whether this call requested it (``False`` when
        the task is not here or its cancel was requested before).

        A queued task ends at once; a running one when it next awaits.
        """
        return self._queue.cancel(task_id, self._drop)

    def _drop(self, job: Job) -> None:
        self._finish(job, "cancelled", "cancelled")

    def _closed_out(self, job: Job) -> None:
        self._finish(job, "cancelled", "closed")

    # -- state -----------------------------------------------------------------------------
    def capacity(self) -> int:
        """How many more tasks may start now (negative when over budget)."""
        return self._queue.capacity()

    def stall_reason(self) -> str | None:
        """Why nothing can progress without outside action, or ``None`` when it can."""
        return self._queue.stall_reason()

    def is_running_any(self) -> bool:
        """Whether any task is running now."""
        return bool(self._queue.running)

    def has_tasks(self) -> bool:
        """Whether any task is queued or running."""
        return bool(self._queue.pending or self._queue.running)

    def load(self) -> int:
        """Queued plus running tasks (for least-loaded scheduling)."""
        return len(self._queue.pending) + len(self._queue.running)

    def stats(self) -> dict[str, Any]:
        """Counters: enqueued, running, accepted, rejected, failed, cancelled, capacity, …"""
        return {**self._counts, **self._queue.counts(), "version": self.engine.get_version(),
                "closed": self._closed}

    @property
    def closed(self) -> bool:
        """Whether :meth:`close_async` was called."""
        return self._closed

    async def close_async(self, *, drain: bool = False) -> None:
        """Stop accepting tasks; cancel unfinished ones (or, with ``drain``, let them finish).

        Leaves no asyncio task behind. Idempotent.
        """
        self._closed = True
        if self.binding.loop is not None:
            await self._queue.close_async(self.binding.bind(), drain=drain,
                                          drop=self._closed_out)
        self._queue.release()  # closed for good: no executor <-> dispatcher cycle left

    def __repr__(self) -> str:
        s = self.stats()
        return (f"WorkflowExecutor(worker={self.worker!r}, running={s['running']}, "
                f"enqueued={s['enqueued']}, paused={s['paused']}, closed={s['closed']})")
