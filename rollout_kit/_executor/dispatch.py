"""``Dispatcher``: queued tasks and the capacity rule, shared by every kind of worker.

A worker (the in-process :class:`~rollout_kit.WorkflowExecutor`, or the
controller-side handle of a Ray worker) is *given* a dispatcher's decisions: the dispatcher
holds the queue, counts running and accepted tasks, applies the capacity formula
(:mod:`~rollout_kit._executor.staleness`) and the pause flag, and calls the worker's
``start(job)`` for each task it lets run, at most :data:`DISPATCH_SLICE` per event-loop turn
so that a big submit never freezes a notebook. It knows nothing of workflows or engines.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._config import ExecutorConfig
from .._errors import ControllerStateError
from .resolve import Recipe
from .staleness import capacity, stall_message

#: Most tasks started per event-loop turn (keeps the loop responsive under big submits).
DISPATCH_SLICE = 16


def _closed_start(job: Job) -> None:
    raise ControllerStateError(f"task {job.task_id}: dispatch after the worker was closed")


@dataclass(slots=True, eq=False)
class Job:
    """One task on its way through a worker: its id (given from above), data and recipe."""

    task_id: int
    data: Any
    recipe: Recipe
    handle: asyncio.Task[None] | None = None  # set once started
    cancelling: bool = False


class Dispatcher:
    """The queue and capacity of one worker, on one event loop.

    Args:
        config: concurrency bound, queue bound and staleness control.
        version: the current weight version (for staleness control).
        start: called with each job that may run now; it must create the job's asyncio
            task (``job.handle``) and later call :meth:`done`.
    """

    __slots__ = ("_counted", "_idle", "_start", "_turn", "_version", "accepted", "config",
                 "draining", "paused", "pending", "running")

    def __init__(self, config: ExecutorConfig, *, version: Callable[[], int],
                 start: Callable[[Job], None]) -> None:
        self.config = config
        self._version = version
        self._start = start
        self.pending: deque[Job] = deque()
        self.running: dict[int, Job] = {}
        self.accepted = 0
        self.paused = False
        self._turn = 0  # jobs started in the current loop turn
        self._counted = False  # a reset of _turn is scheduled for the next turn
        self.draining = False  # close_async(drain=True) runs: queued jobs still start
        self._idle: asyncio.Event | None = None  # set when a job ends, while draining

    # -- queue -----------------------------------------------------------------------------
    def check_room(self) -> None:
        """Raise ``ControllerStateError`` when the queue bound is reached."""
        qs = self.config.queue_size
        if qs is not None and len(self.pending) >= qs:
            raise ControllerStateError(
                f"the queue is full ({len(self.pending)} task(s) waiting for dispatch, "
                f"queue_size={qs}); wait() for results, resume() if paused, or raise queue_size"
            )

    def has_room(self) -> bool:
        """Whether the queue bound allows one more task."""
        qs = self.config.queue_size
        return qs is None or len(self.pending) < qs

    def enqueue(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        """Queue ``job`` and start what capacity allows."""
        self.pending.append(job)
        self.dispatch(loop)

    def cancel(self, task_id: int, drop: Callable[[Job], None]) -> bool:
        """Cancel a job; whether this call requested it (``False``: unknown, or requested
        before). A running job's asyncio task is cancelled (it ends when it next awaits); a
        queued job leaves the queue and is handed to ``drop`` to be finished at once."""
        job = self.running.get(task_id)
        if job is not None:
            if job.cancelling:
                return False
            job.cancelling = True
            if job.handle is not None:
                job.handle.cancel()
            return True
        for job in self.pending:
            if job.task_id == task_id:
                self.pending.remove(job)
                drop(job)
                return True
        return False

    def drain(self) -> list[Job]:
        """Take every queued job out of the queue."""
        jobs = list(self.pending)
        self.pending.clear()
        return jobs

    # -- capacity --------------------------------------------------------------------------
    def capacity(self) -> int:
        """How many more tasks may start now (negative when over budget)."""
        return capacity(self.config, running=len(self.running), accepted=self.accepted,
                        version=self._version())

    def dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start queued jobs while capacity allows, at most ``DISPATCH_SLICE`` per turn.

        Each start runs its first step (request building, connecting) in the next loop turn;
        starting 1,000 at once would stall the loop for a few hundred ms, so the rest is
        dispatched in later turns.
        """
        if self.paused or not self.pending or self._turn >= DISPATCH_SLICE:
            return  # (a big submit loop lands here: its tasks start in the next turns)
        n = min(self.capacity(), DISPATCH_SLICE - self._turn)
        while n > 0 and self.pending:
            if not self._counted:
                self._counted = True
                loop.call_soon(self._next_turn, loop)
            self._turn += 1
            job = self.pending.popleft()
            self.running[job.task_id] = job
            self._start(job)
            n -= 1

    def _next_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        self._turn = 0
        self._counted = False
        self.dispatch(loop)

    def done(self, job: Job, accepted: bool) -> None:
        """A started job ended (call :meth:`dispatch` afterwards to fill its place)."""
        self.running.pop(job.task_id, None)
        if accepted:
            self.accepted += 1
        if self._idle is not None:
            self._idle.set()

    async def close_async(self, loop: asyncio.AbstractEventLoop, *, drain: bool,
                          drop: Callable[[Job], None]) -> None:
        """Stop for good: with ``drain`` run every queued and running job to its end
        (``draining`` is set meanwhile), else hand each queued job to ``drop``; then cancel
        the jobs still running and wait for them.

        Raises:
            ControllerStateError: ``drain`` would wait forever (see :meth:`stall_reason`).
        """
        if drain:
            self.draining = True
            self.paused = False
            self.dispatch(loop)
            while self.pending or self.running:
                reason = self.stall_reason()
                if reason is not None:
                    raise ControllerStateError(f"close_async(drain=True) would wait forever: "
                                               f"{reason}")
                self._idle = asyncio.Event()
                await self._idle.wait()
            self._idle = None
        else:
            for job in self.drain():
                drop(job)
        handles = [j.handle for j in self.running.values() if j.handle is not None]
        for h in handles:
            h.cancel()
        if handles:
            await asyncio.gather(*handles, return_exceptions=True)

    def release(self) -> None:
        """Drop the reference to the worker's ``start`` (call once the worker is closed).

        The worker holds its dispatcher and the dispatcher its worker's bound ``start``:
        without this the pair, with the engine and tracer the worker holds, outlives the
        last reference until a full collection (and :class:`~rollout_kit._gc.GcHold`
        freezes such garbage when a new controller starts)."""
        self._start = _closed_start

    def stall_reason(self) -> str | None:
        """Why nothing can progress without outside action, or ``None`` when it can."""
        if self.running or not self.pending:
            return None
        if self.paused:
            return (f"the worker is paused with {len(self.pending)} task(s) queued and none "
                    "running; call resume()")
        if self.capacity() <= 0:
            return stall_message(self.config, accepted=self.accepted,
                                 version=self._version(), queued=len(self.pending))
        return None

    def counts(self) -> dict[str, Any]:
        """``enqueued``, ``running``, ``capacity`` and the config's bounds."""
        cfg = self.config
        return {
            "enqueued": len(self.pending),
            "running": len(self.running),
            "capacity": self.capacity(),
            "paused": self.paused,
            "max_concurrent_rollouts": cfg.max_concurrent_rollouts,
            "queue_size": cfg.queue_size,
            "max_staleness": cfg.max_staleness,
            "consumer_batch_size": cfg.consumer_batch_size,
        }
