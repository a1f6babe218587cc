"""``rollout_batch`` and ``prepare_batch``, the controller's batch calls.

The controller submits *reserved* tasks (their results are delivered to the batch call, never to a
concurrent ``wait()``), takes results by id, and releases reservations when the call ends
early (timeout, failure, data ran out) so the results then come back from ``wait()``:
nothing is lost.

Every data item is checked with the workflow's ``validate(data)`` before it is submitted:
``rollout_batch`` checks all items before the first task is queued, ``prepare_batch`` each
item before its task, so bad data raises ``ConfigError`` (naming the item's index) in the
caller and takes no task id.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import ConfigError, ControllerStateError, RolloutTimeoutError, WorkflowError
from .._io import RolloutResult
from .waiting import Waiters

if TYPE_CHECKING:
    from .._executor import Recipe


#: Tasks a batch call submits before it lets the event loop run other callbacks.
SUBMIT_SLICE = 64


class BatchHost(Protocol):
    """What the batch calls need from the controller."""

    @property
    def queue_size(self) -> int | None: ...

    @property
    def waiters(self) -> Waiters: ...

    def prepare(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                should_accept_fn: object) -> Recipe: ...

    async def submit_reserved(self, data: Any, recipe: Recipe,
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


def validate_item(recipe: Recipe, item: Any, where: str) -> None:
    """Run the workflow's ``validate`` on one batch item; the error starts with ``where``."""
    try:
        recipe.factory.validate(item)
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
    recipe = host.prepare(workflow, workflow_kwargs, should_accept_fn)
    for i, item in enumerate(items):  # all of them before the first id is taken
        validate_item(recipe, item, f"data[{i}]")
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
                ids.append(await host.submit_reserved(item, recipe, on_done))
                if len(ids) % SUBMIT_SLICE == 0:
                    await asyncio.sleep(0)  # a big batch never holds the loop for long
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
    recipe = host.prepare(workflow, workflow_kwargs, should_accept_fn)
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
                validate_item(recipe, item, f"item {n_items} of this call's data")
                n_items += 1
                in_flight.add(await host.submit_reserved(item, recipe, on_done))
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
