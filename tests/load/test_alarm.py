"""The load runner's alarm (``rollout_kit.load._alarm``): what it guarantees, no timings.

A wait resolves at its instant and never before it (the kernel's timer on Linux, the loop's
elsewhere), or at once when rung; a re-armed or disarmed alarm never resolves a later wait
with an old instant; a closed alarm falls back to the loop's timer. Each test runs on a
selector loop and on a stand-in for a loop that watches no file descriptors (Windows'
proactor): a selector loop whose ``add_reader`` raises ``NotImplementedError``, as the
proactor's does.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rollout_kit.load._alarm import Alarm

#: the loop's own timer converts the instant between two readings of the same clock
CLOCK_TOL = 1e-6

Body = Callable[[Alarm], Coroutine[Any, Any, None]]


class _NoFdLoop(asyncio.SelectorEventLoop):
    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
        raise NotImplementedError


@pytest.fixture(params=["timer", "fallback"])
def on_loop(request: pytest.FixtureRequest) -> Callable[[Body], None]:
    """Run a body with an alarm on a fresh loop: the kernel's timer, or the fallback."""
    kind = request.param

    def run(body: Body) -> None:
        loop = asyncio.SelectorEventLoop() if kind == "timer" else _NoFdLoop()

        async def main() -> None:
            alarm = Alarm(asyncio.get_running_loop())
            assert alarm.precise is (kind == "timer" and sys.platform == "linux")
            try:
                await body(alarm)
            finally:
                alarm.close()

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()

    return run


async def _turns(n: int = 3) -> None:
    """A few loop turns: every descriptor that was readable has been read by then."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_wait_resolves_at_its_instant_and_never_before(on_loop: Callable[[Body], None]
                                                         ) -> None:
    async def body(alarm: Alarm) -> None:
        for delay in (0.0005, 0.002, 0.0):
            instant = time.perf_counter() + delay
            await alarm.wait(instant)
            assert time.perf_counter() >= instant - CLOCK_TOL

    on_loop(body)


def test_an_instant_already_past_resolves_at_once(on_loop: Callable[[Body], None]) -> None:
    async def body(alarm: Alarm) -> None:
        await alarm.wait(time.perf_counter() - 1.0)
        await alarm.wait(-5.0)  # before the clock's origin: fires, it does not disarm

    on_loop(body)


def test_ring_resolves_the_pending_wait(on_loop: Callable[[Body], None]) -> None:
    async def body(alarm: Alarm) -> None:
        far = alarm.wait(time.perf_counter() + 3600.0)
        alarm.ring()
        await far
        until_rung = alarm.wait(None)
        await _turns()
        assert not until_rung.done()
        asyncio.get_running_loop().call_soon(alarm.ring)
        await until_rung
        alarm.ring()  # nothing pending: nothing happens

    on_loop(body)


def test_an_old_instant_never_resolves_a_later_wait(on_loop: Callable[[Body], None]) -> None:
    async def body(alarm: Alarm) -> None:
        old = time.perf_counter() + 0.002
        first = alarm.wait(old)
        alarm.ring()
        await first
        later = alarm.wait(None)  # disarms the timer set for ``old``
        clock = Alarm(asyncio.get_running_loop())  # a second alarm lets the instant pass
        try:
            await clock.wait(old + 0.001)
        finally:
            clock.close()
        await _turns()
        assert time.perf_counter() > old and not later.done()
        rearmed = alarm.wait(time.perf_counter() + 3600.0)
        await _turns()
        assert not rearmed.done() and not later.done()

    on_loop(body)


def test_a_closed_alarm_falls_back_to_the_loops_timer(on_loop: Callable[[Body], None]
                                                      ) -> None:
    async def body(alarm: Alarm) -> None:
        alarm.close()
        alarm.close()  # idempotent
        assert not alarm.precise
        instant = time.perf_counter() + 0.001
        await alarm.wait(instant)
        assert time.perf_counter() >= instant - CLOCK_TOL

    on_loop(body)
