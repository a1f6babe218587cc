"""``ResultBook``: the one owner of a controller's results.

Workers hand every finished :class:`~rollout_kit.RolloutResult` to :meth:`deliver`
(their sink); the book keeps it until the user consumes it with :meth:`take` (through
``wait``, ``wait_for`` or a batch call), which marks ``consume`` in the trace. A result
*reserved* by a batch call goes to that call, never to a concurrent ``wait()``; releasing
the reservation (a batch call that ends early) sends it to ``wait()``: nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import ConfigError, ControllerStateError, UnknownTaskIdError
from .batching import workflow_error
from .waiting import Waiters

if TYPE_CHECKING:
    from .._ids import TaskIdGenerator
    from .._io import RolloutResult
    from ..tracing import Tracer
    from ..workers import Worker

OnDone = Callable[[int], None]
StallReason = Callable[[], "str | None"]


class ResultBook:
    """Submitted tasks, their workers and their finished results, until consumed.

    Args:
        tracer: where ``consume`` is marked.
        ids: the id counter (to tell "consumed" from "never submitted" in errors).
    """

    __slots__ = ("_ids", "_ready", "_reserved", "_results", "_tracer", "_where", "waiters")

    def __init__(self, tracer: Tracer, ids: TaskIdGenerator) -> None:
        self._tracer = tracer
        self._ids = ids
        self.waiters = Waiters()
        self._where: dict[int, Worker] = {}  # submitted and not consumed
        self._results: dict[int, RolloutResult] = {}  # finished and not consumed
        self._reserved: dict[int, OnDone] = {}  # result goes to a batch call
        self._ready: dict[int, None] = {}  # unreserved finished results, completion order

    # -- submit side -----------------------------------------------------------------------
    def add(self, task_id: int, worker: Worker, on_done: OnDone | None = None) -> None:
        """Track a task about to be submitted to ``worker`` (reserved when ``on_done``)."""
        self._where[task_id] = worker
        if on_done is not None:
            self._reserved[task_id] = on_done

    def forget(self, task_id: int) -> None:
        """Drop a task whose submission failed before its worker took it."""
        self._where.pop(task_id, None)
        self._reserved.pop(task_id, None)

    def deliver(self, result: RolloutResult) -> None:
        """A worker's sink: file the finished result and wake whoever waits for it."""
        tid = result.task_id
        if tid not in self._where:
            return
        self._results[tid] = result
        cb = self._reserved.get(tid)
        if cb is not None:
            cb(tid)
        else:
            self._ready[tid] = None
        self.waiters.wake()

    # -- lookups ---------------------------------------------------------------------------
    def worker_of(self, task_id: int) -> Worker:
        """The worker of a submitted, unconsumed task.

        Raises:
            UnknownTaskIdError: never submitted here, or already consumed.
        """
        worker = self._where.get(task_id)
        if worker is None:
            if isinstance(task_id, int) and self._ids.is_used(task_id):
                raise UnknownTaskIdError(f"task {task_id} was already consumed")
            raise UnknownTaskIdError(f"task {task_id!r} was never submitted to this controller")
        return worker

    def peek(self, task_id: int) -> RolloutResult | None:
        """The result of ``task_id`` if finished and not consumed, else ``None``."""
        self.worker_of(task_id)
        return self._results.get(task_id)

    def is_unfinished(self, task_id: int) -> bool:
        """Whether a tracked task has no result yet."""
        return task_id in self._where and task_id not in self._results

    def unfinished(self) -> list[int]:
        """Ids of tracked tasks without a result, in submission order."""
        return [tid for tid in self._where if tid not in self._results]

    def outstanding(self) -> int:
        """Submitted, unreserved tasks whose results were not consumed yet."""
        return len(self._where) - len(self._reserved)

    def ready(self, count: int) -> list[int]:
        """The first ``count`` unreserved finished results' ids, in completion order."""
        ids: list[int] = []
        for tid in self._ready:
            if len(ids) == count:
                break
            ids.append(tid)
        return ids

    def n_ready(self) -> int:
        """How many unreserved results are finished and waiting."""
        return len(self._ready)

    def n_tracked(self) -> int:
        """How many tasks were submitted and not consumed."""
        return len(self._where)

    # -- consume ---------------------------------------------------------------------------
    def take(self, task_id: int) -> RolloutResult:
        """Consume a finished result (marks ``consume`` in the trace).

        Raises:
            UnknownTaskIdError: never submitted here, or already consumed.
            ControllerStateError: the task has not finished yet.
        """
        result = self._pop(task_id)
        self._tracer.mark(task_id, "consume")
        return result

    def take_all(self, task_ids: list[int]) -> list[RolloutResult]:
        """Consume finished results, in order (``consume`` marked for all at one instant,
        under one tracer lock: the path of every ``wait``).

        Raises:
            UnknownTaskIdError, ControllerStateError: as :meth:`take`; the results of the
                ids before the bad one are consumed (and marked) all the same.
        """
        out: list[RolloutResult] = []
        try:
            for tid in task_ids:
                out.append(self._pop(tid))
        finally:
            self._tracer.mark_all(task_ids[:len(out)], "consume")
        return out

    def _pop(self, task_id: int) -> RolloutResult:
        """Remove a finished result from the book (unmarked)."""
        if task_id not in self._where:
            self.worker_of(task_id)  # raises, naming why
        result = self._results.pop(task_id, None)
        if result is None:
            raise ControllerStateError(f"task {task_id} has not finished yet")
        del self._where[task_id]
        self._reserved.pop(task_id, None)
        self._ready.pop(task_id, None)
        return result

    def release(self, task_id: int) -> None:
        """End a batch reservation: the result (now or later) goes to ``wait()``."""
        if self._reserved.pop(task_id, None) is None or task_id not in self._where:
            return
        if task_id in self._results:
            self._ready[task_id] = None
            self.waiters.wake()

    # -- waiting ---------------------------------------------------------------------------
    async def wait_async(self, count: int | None, timeout: float | None,
                         raise_on_failure: bool, *, stall_reason: StallReason,
                         ) -> list[RolloutResult]:
        """Wait for ``count`` unreserved results (``None``: every outstanding task), consume
        them in completion order. See ``RolloutController.wait_async``."""
        n_out = self.outstanding()
        if count is None:
            count = n_out
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"count must be an int >= 0 or None, got {count!r}")
        if count > n_out:
            raise ConfigError(f"wait({count}) asks for more results than the {n_out} "
                              "outstanding task(s); submit more first")
        n = count
        await self.waiters.until(lambda: len(self._ready) >= n, timeout=timeout,
                                 what=f"wait({count})", stall_reason=stall_reason)
        ids = self.ready(count)
        if raise_on_failure:
            for tid in ids:
                res = self._results[tid]
                if res.status == "failed":
                    raise workflow_error(self.take(tid))
        return self.take_all(ids)

    async def wait_for_async(self, task_id: int, timeout: float | None,
                             raise_on_failure: bool, *, stall_reason: StallReason,
                             ) -> RolloutResult:
        """Wait for one task's result and consume it. See ``RolloutController.wait_for_async``."""
        self.worker_of(task_id)  # unknown or consumed ids raise UnknownTaskIdError now
        await self.waiters.until(lambda: task_id in self._results, timeout=timeout,
                                 what=f"wait_for({task_id})", stall_reason=stall_reason)
        result = self.take(task_id)
        if raise_on_failure and result.status == "failed":
            raise workflow_error(result)
        return result
