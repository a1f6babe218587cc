"""``rollout_batch`` and ``prepare_batch`` over any host (an executor or the controller).

A host submits *reserved* tasks (their results are delivered to the batch call, never to a
concurrent ``wait()``), takes results by id, and releases reservations when the call ends
early (timeout, failure, data ran out) so the results then come back from ``wait()``:
nothing is lost.

Every data item is checked with the workflow's ``validate(data)`` before it is submitted:
``rollout_batch`` checks all items before the first task is queued, ``prepare_batch`` each
item before its task, so bad data raises ``ConfigError`` (naming the item's index) in the
caller and takes no task id.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, ControllerStateError, RolloutTimeoutError, WorkflowError
from ..io import RolloutResult
from .twins import BlockingTwins
from .waiting import Waiters

if TYPE_CHECKING:
    from .resolve import AcceptFnSpec, WorkflowFactory, WorkflowSpec

__all__ = ["BatchCalls", "BatchHost", "prepare_batch", "progress_bar", "rollout_batch",
           "validate_item", "workflow_error"]


class BatchHost(Protocol):
    """What the batch helpers need from an executor or controller."""

    @property
    def queue_size(self) -> int | None: ...

    @property
    def waiters(self) -> Waiters: ...

    def check_specs(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                    should_accept_fn: object) -> WorkflowFactory: ...

    async def submit_reserved(self, data: Any, workflow: Any,
                              workflow_kwargs: dict[str, Any] | None, should_accept_fn: Any,
                              on_done: Callable[[int], None]) -> int: ...

    def take(self, task_id: int) -> RolloutResult: ...

    def peek(self, task_id: int) -> RolloutResult | None: ...

    def release(self, task_id: int) -> None: ...

    def stall_reason(self) -> str | None: ...


def workflow_error(result: RolloutResult) -> WorkflowError:
    """The ``WorkflowError`` that re-raises a failed result (cause: the original error)."""
    err = WorkflowError(
        f"task {result.task_id} failed: {result.reason or 'workflow_exception'}"
        + (f": {type(result.error).__name__}: {result.error}" if result.error else "")
        + (f"\n{result.traceback}" if result.traceback else ""),
        task_id=result.task_id, traceback=result.traceback,
    )
    if result.error is not None:
        err.__cause__ = result.error
    return err


def validate_item(factory: WorkflowFactory, item: Any, where: str) -> None:
    """Run the workflow's ``validate`` on one batch item; the error starts with ``where``."""
    try:
        factory.validate(item)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A ``tqdm.auto`` bar (a notebook widget in Jupyter, text elsewhere), or ``None``."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="task")


async def rollout_batch(host: BatchHost, data: Sequence[Any], workflow: object,
                        workflow_kwargs: dict[str, Any] | None, should_accept_fn: object,
                        timeout: float | None, progress: bool = False) -> list[RolloutResult]:
    """One result per item of ``data``, in input order, rejected and failed included."""
    items = list(data)
    factory = host.check_specs(workflow, workflow_kwargs, should_accept_fn)
    for i, item in enumerate(items):  # all of them before the first id is taken
        validate_item(factory, item, f"data[{i}]")
    done: set[int] = set()
    ids: list[int] = []
    bar = progress_bar(len(items), "rollout_batch", progress)

    def on_done(tid: int) -> None:
        done.add(tid)
        if bar is not None:
            bar.update(1)

    try:
        async def run() -> None:
            for item in items:
                ids.append(await host.submit_reserved(item, workflow, workflow_kwargs,
                                                      should_accept_fn, on_done))
            await host.waiters.until(lambda: len(done) == len(ids), timeout=None,
                                     what="rollout_batch()", stall_reason=host.stall_reason,
                                     check_stall=timeout is None)

        if timeout is None:
            await run()
        else:
            await _with_timeout(run(), timeout, "rollout_batch()")
    except BaseException:
        for tid in ids:
            host.release(tid)
        raise
    finally:
        if bar is not None:
            bar.close()
    return [host.take(tid) for tid in ids]


async def prepare_batch(host: BatchHost, data: Iterable[Any], workflow: object,
                        batch_size: int, workflow_kwargs: dict[str, Any] | None,
                        should_accept_fn: object, timeout: float | None,
                        raise_on_failure: bool, progress: bool = False) -> list[RolloutResult]:
    """Submit items of ``data`` until ``batch_size`` results are accepted; return those.

    At most ``batch_size - accepted`` tasks are in flight, so no surplus is produced.
    Rejected results are consumed (they stay in the traces). A failure raises
    ``WorkflowError`` when ``raise_on_failure`` (accepted results collected so far are
    released to ``wait()``).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
    qs = host.queue_size
    if qs is not None and batch_size > qs:
        raise ConfigError(
            f"prepare_batch(batch_size={batch_size}) is larger than the queue bound "
            f"queue_size={qs}; raise queue_size or use a smaller batch"
        )
    factory = host.check_specs(workflow, workflow_kwargs, should_accept_fn)
    it = iter(data)
    finished: deque[int] = deque()
    in_flight: set[int] = set()
    accepted: list[int] = []
    n_items = 0
    bar = progress_bar(batch_size, "prepare_batch (accepted)", progress)

    def on_done(tid: int) -> None:
        finished.append(tid)

    async def run() -> None:
        nonlocal n_items
        exhausted = False
        while len(accepted) < batch_size:
            while finished:
                tid = finished.popleft()
                in_flight.discard(tid)
                res = host.peek(tid)
                if res is not None and res.status == "accepted":
                    accepted.append(tid)
                    if bar is not None:
                        bar.update(1)
                elif res is not None and res.status == "failed" and raise_on_failure:
                    raise workflow_error(host.take(tid))
                else:
                    host.take(tid)
            need = batch_size - len(accepted) - len(in_flight)
            while need > 0 and not exhausted:
                try:
                    item = next(it)
                except StopIteration:
                    exhausted = True
                    break
                validate_item(factory, item, f"item {n_items} of this call's data")
                n_items += 1
                in_flight.add(await host.submit_reserved(item, workflow, workflow_kwargs,
                                                         should_accept_fn, on_done))
                need -= 1
            if len(accepted) >= batch_size:
                break
            if not in_flight and not finished:
                raise ConfigError(
                    f"prepare_batch(): data ran out after {n_items} item(s) with "
                    f"{len(accepted)}/{batch_size} accepted; the accepted results stay "
                    "available from wait()"
                )
            await host.waiters.until(lambda: bool(finished), timeout=None,
                                     what="prepare_batch()", stall_reason=host.stall_reason,
                                     check_stall=timeout is None)

    try:
        if timeout is None:
            await run()
        else:
            await _with_timeout(run(), timeout, "prepare_batch()")
    except BaseException:
        for tid in [*accepted, *in_flight, *finished]:
            host.release(tid)
        raise
    finally:
        if bar is not None:
            bar.close()
    return [host.take(tid) for tid in accepted]


async def _with_timeout(coro: Any, timeout: float, what: str) -> None:
    import asyncio

    try:
        async with asyncio.timeout(timeout):
            await coro
    except TimeoutError as exc:
        if isinstance(exc, RolloutTimeoutError | ControllerStateError):
            raise
        raise RolloutTimeoutError(
            f"{what} timed out after {timeout} s; unfinished tasks keep running and every "
            "result of this call is available from wait()"
        ) from None


class BatchCalls(BlockingTwins):
    """Mixin: the result-taking calls of a :class:`BatchHost` (the executor and the
    controller) — ``wait_async``, ``wait_for_async``, ``rollout_batch_async``,
    ``prepare_batch_async`` — plus their blocking twins, written once."""

    _ready: dict[int, None]  # unreserved finished results, in completion order
    waiters: Waiters

    def _bind(self) -> Any:
        raise NotImplementedError

    def _outstanding(self) -> int:
        """Submitted, unreserved tasks whose results were not consumed yet."""
        raise NotImplementedError

    def peek(self, task_id: int) -> RolloutResult | None:
        raise NotImplementedError

    def take(self, task_id: int) -> RolloutResult:
        raise NotImplementedError

    def stall_reason(self) -> str | None:
        raise NotImplementedError

    async def wait_async(self, count: int | None = None, timeout: float | None = None,
                         raise_on_failure: bool = False) -> list[RolloutResult]:
        """Wait for ``count`` results (``None`` = every outstanding task), completion order.

        Each result carries its ``task_id``. Results of batch calls are not counted.

        Args:
            count: how many results; must not exceed the outstanding tasks.
            timeout: seconds; ``None`` waits as long as progress is possible.
            raise_on_failure: raise ``WorkflowError`` for the first failed result among
                them (only that result is consumed; the others stay for the next wait).

        Raises:
            RolloutTimeoutError: time ran out; nothing is consumed.
            ControllerStateError: ``timeout=None`` but nothing can progress (paused /
                staleness stall).
            ConfigError: ``count`` exceeds the outstanding tasks.
            WorkflowError: see ``raise_on_failure``.
        """
        self._bind()
        n_out = self._outstanding()
        if count is None:
            count = n_out
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"count must be an int >= 0 or None, got {count!r}")
        if count > n_out:
            raise ConfigError(f"wait({count}) asks for more results than the {n_out} "
                              "outstanding task(s); submit more first")
        await self.waiters.until(lambda: len(self._ready) >= count, timeout=timeout,
                                 what=f"wait({count})", stall_reason=self.stall_reason)
        ids = list(self._ready)[:count]
        if raise_on_failure:
            for tid in ids:
                res = self.peek(tid)
                if res is not None and res.status == "failed":
                    raise workflow_error(self.take(tid))
        return [self.take(tid) for tid in ids]

    async def wait_for_async(self, task_id: int, timeout: float | None = None,
                             raise_on_failure: bool = False) -> RolloutResult:
        """Wait for one task's result and consume it.

        Raises:
            UnknownTaskIdError: never submitted here, or already consumed.
            RolloutTimeoutError: time ran out (the task keeps running).
            WorkflowError: the task failed and ``raise_on_failure``.
        """
        self._bind()
        self.peek(task_id)  # unknown or consumed ids raise UnknownTaskIdError now
        await self.waiters.until(lambda: self.peek(task_id) is not None, timeout=timeout,
                                 what=f"wait_for({task_id})", stall_reason=self.stall_reason)
        result = self.take(task_id)
        if raise_on_failure and result.status == "failed":
            raise workflow_error(result)
        return result



    async def rollout_batch_async(
        self,
        data: Sequence[Any],
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Run one task per item; return one result per item in input order (rejected too).

        On a timeout (``RolloutTimeoutError``) the tasks keep running and all their results
        come back from ``wait()``.

        Raises:
            ConfigError: a bad spec, or an item the workflow's ``validate`` refuses (the
                message starts with ``data[i]``); nothing was submitted then.
            RolloutTimeoutError: time ran out.
        """
        self._bind()
        host: BatchHost = self  # type: ignore[assignment]  # subclasses implement BatchHost
        return await rollout_batch(host, data, workflow, workflow_kwargs, should_accept_fn,
                                   timeout, progress)

    async def prepare_batch_async(
        self,
        data: Iterable[Any],
        workflow: WorkflowSpec,
        batch_size: int,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        raise_on_failure: bool = True,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Submit items from ``data`` until ``batch_size`` are accepted; return those.

        Each call uses the arguments it is given (AReaL caches the first call's). Pass an
        iterator to continue where the previous call stopped. Rejected results are dropped
        (they remain in the traces).

        Raises:
            ConfigError: ``batch_size`` larger than ``queue_size``, the data ran out, or
                an item the workflow's ``validate`` refuses (it is not submitted; results
                collected so far go to ``wait()``).
            WorkflowError: a task failed and ``raise_on_failure`` (default).
            RolloutTimeoutError: time ran out; results go to ``wait()``.
        """
        self._bind()
        host: BatchHost = self  # type: ignore[assignment]  # subclasses implement BatchHost
        return await prepare_batch(host, data, workflow, batch_size, workflow_kwargs,
                                   should_accept_fn, timeout, raise_on_failure, progress)
