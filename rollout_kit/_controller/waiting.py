"""``Waiters``: wake every coroutine blocked on "something changed", without polling."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._errors import ControllerStateError, RolloutTimeoutError


class Waiters:
    """A set of futures resolved together by :meth:`wake` (on the owner's loop)."""

    __slots__ = ("_futs",)

    def __init__(self) -> None:
        self._futs: list[asyncio.Future[None]] = []

    def wake(self) -> None:
        """Resolve every pending waiter."""
        if not self._futs:
            return
        futs, self._futs = self._futs, []
        for f in futs:
            if not f.done():
                f.set_result(None)

    async def until(
        self,
        pred: Callable[[], bool],
        *,
        timeout: float | None,
        what: str,
        stall_reason: Callable[[], str | None],
        check_stall: bool | None = None,
    ) -> None:
        """Return once ``pred()`` holds.

        Raises:
            RolloutTimeoutError: ``timeout`` seconds passed first (nothing is lost).
            ControllerStateError: while nothing can make progress (paused, or stalled by
                staleness control, with nothing running) and ``check_stall`` (default:
                ``timeout is None``).
        """
        if check_stall is None:
            check_stall = timeout is None
        if pred():
            return
        if timeout is not None and timeout < 0:
            raise RolloutTimeoutError(f"{what}: timeout must be >= 0, got {timeout}")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while not pred():
                    if check_stall:
                        reason = stall_reason()
                        if reason is not None:
                            raise ControllerStateError(f"{what} would wait forever: {reason}")
                    fut: asyncio.Future[None] = loop.create_future()
                    self._futs.append(fut)
                    try:
                        await fut
                    finally:
                        if not fut.done():
                            fut.cancel()
        except TimeoutError:
            raise RolloutTimeoutError(
                f"{what} timed out after {timeout} s; the tasks keep running and their results "
                "stay available"
            ) from None
