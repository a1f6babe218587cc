"""Wake-ups at an absolute instant, finer than the event loop's millisecond timer.

asyncio hands a sleep to the selector as a timeout, and ``epoll_wait`` / ``poll`` count whole
milliseconds: :mod:`selectors` rounds the timeout *up*, and each I/O event that ends the wait
early has what is left rounded up again. Under open-loop load, with responses arriving every
few hundred microseconds, a sleep aimed 0.5 ms before a deadline woke 0.37 ms *after* it at
the median (``rollout-kit load`` at 500 req/s against a zero-latency simulator).

:class:`Alarm` wakes the loop at an absolute :func:`time.perf_counter` instant. On Linux it
arms a ``timerfd`` on ``CLOCK_MONOTONIC`` (the clock ``perf_counter`` reads; the kernel's
high-resolution timer, no slack) at that instant and watches it with ``loop.add_reader``: the
selector returns when the timer fires, whatever its own rounded timeout. Elsewhere (another
OS, a loop without ``add_reader`` such as Windows' proactor, a ``perf_counter`` on another
clock) it falls back to ``loop.call_at``, and :attr:`Alarm.precise` is ``False``.

Python 3.11 has no ``os.timerfd_*`` (3.13 has), so the two calls go through :mod:`ctypes`;
this module is the one place that does.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import sys
import time
from typing import Any

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


@functools.cache
def _libc() -> tuple[Any, Any]:
    """libc's ``timerfd_create`` and ``timerfd_settime``, typed once per process."""
    libc = ctypes.CDLL(None, use_errno=True)
    create, settime = libc.timerfd_create, libc.timerfd_settime
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                        ctypes.c_void_p]
    return create, settime


class _TimerFd:
    """A non-blocking ``timerfd`` on ``CLOCK_MONOTONIC``, armed at absolute instants."""

    def __init__(self) -> None:
        create, self._settime = _libc()
        fd = int(create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd = fd
        self._spec = _Itimerspec()

    def arm(self, instant: float | None) -> None:
        """Fire at ``instant`` (monotonic seconds; past: at once); ``None`` disarms."""
        value = self._spec.it_value
        if instant is None:
            value.tv_sec = value.tv_nsec = 0
        else:  # an all-zero value would disarm: an instant at or before 0 fires at 1 ns
            sec, nsec = divmod(max(int(instant * 1e9), 1), 1_000_000_000)
            value.tv_sec, value.tv_nsec = sec, nsec
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def consume(self) -> bool:
        """Read the expiry count; ``False`` when the timer had not fired (a stale wake-up)."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        os.close(self.fd)


def _precise_clock() -> bool:
    info = time.get_clock_info("perf_counter")
    return sys.platform == "linux" and "CLOCK_MONOTONIC" in info.implementation \
        and "RAW" not in info.implementation


class Alarm:
    """One re-armable alarm on ``loop``: :meth:`wait` returns a future that resolves at an
    instant or when :meth:`ring` is called, whichever comes first.

    One wait at a time: a new :meth:`wait` replaces the previous one (its future is left
    pending, and nothing resolves it any more). :meth:`close` releases the kernel's timer;
    waits after it use the loop's own.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fut: asyncio.Future[None] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._timer: _TimerFd | None = None
        if _precise_clock():
            try:
                timer = _TimerFd()
            except (OSError, AttributeError):  # no timerfd in this libc / kernel
                return
            try:
                loop.add_reader(timer.fd, self._fired)
            except NotImplementedError:  # a proactor loop watches no file descriptors
                timer.close()
                return
            self._timer = timer

    @property
    def precise(self) -> bool:
        """Whether wake-ups come from the kernel's timer (``False``: the loop's own)."""
        return self._timer is not None

    def wait(self, instant: float | None) -> asyncio.Future[None]:
        """A future resolved at ``instant`` (:func:`time.perf_counter` seconds; one already
        past resolves at the next loop turn) or by :meth:`ring`; ``None``: by :meth:`ring`
        only."""
        fut = self._loop.create_future()
        self._fut = fut
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._timer is not None:
            self._timer.arm(instant)
        elif instant is not None:
            at = self._loop.time() + (instant - time.perf_counter())
            self._handle = self._loop.call_at(at, self.ring)
        return fut

    def ring(self) -> None:
        """Resolve the pending wait now (nothing happens when none is pending)."""
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _fired(self) -> None:
        assert self._timer is not None
        if self._timer.consume():
            self.ring()

    def close(self) -> None:
        """Release the timer (idempotent)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        timer, self._timer = self._timer, None
        if timer is not None:
            self._loop.remove_reader(timer.fd)
            timer.close()
