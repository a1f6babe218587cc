"""Run a coroutine to completion from sync code, with or without a running loop.

* No running loop (scripts, CLI, plain pytest): one private, reused ``asyncio.Runner`` per
  thread, so loop-bound state (aiohttp sessions, events) survives across calls.
* A running loop on this thread (a Jupyter cell): re-enter it with ``nest_asyncio2``, applied
  lazily on first need and only to that loop. uvloop cannot be patched: a clear
  ``SyncInLoopError`` names the ``await`` alternative.

``asyncio.run`` is never called.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._errors import ControllerStateError, SyncInLoopError

T = TypeVar("T")

_local = threading.local()
_patched: set[int] = set()
_patch_lock = threading.Lock()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running on this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _runner() -> asyncio.Runner:
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
    if runner is None:
        runner = asyncio.Runner()
        _local.runner = runner
        atexit.register(runner.close)
    return runner


def private_loop() -> asyncio.AbstractEventLoop:
    """The loop that sync calls use on this thread when no loop is running."""
    return _runner().get_loop()


def _ensure_reentrant(loop: asyncio.AbstractEventLoop, what: str) -> None:
    if id(loop) in _patched:
        return
    if not isinstance(loop, asyncio.BaseEventLoop):
        raise SyncInLoopError(
            f"{what} is a blocking call and cannot run inside a running "
            f"{type(loop).__module__}.{type(loop).__name__} loop (uvloop cannot be "
            "re-entered). Use the async twin with `await` instead."
        )
    import nest_asyncio2

    with _patch_lock:
        if id(loop) not in _patched:
            nest_asyncio2.apply(loop)
            _patched.add(id(loop))


def run_sync(coro: Coroutine[Any, Any, T], *, what: str = "this call") -> T:
    """Run ``coro`` to completion and return its result, from sync code.

    Args:
        coro: the coroutine to run.
        what: a name for error messages (``"rollout_batch()"``).

    Raises:
        SyncInLoopError: a loop runs on this thread and cannot be re-entered.
    """
    loop = running_loop()
    if loop is None:
        return _runner().run(coro)
    try:
        _ensure_reentrant(loop, what)
    except BaseException:
        coro.close()
        raise
    return loop.run_until_complete(coro)


class LoopBinding:
    """The one event loop a controller and its in-process workers live on.

    Bound at first use: to the running loop (a notebook kernel, an ``async def``) or, from
    sync code with no running loop, to this thread's private loop, whose tasks progress
    whenever a blocking call runs it. Every object of one controller shares one binding, so
    the loop check is made in one place.

    Attributes:
        loop: the bound loop, or ``None`` before first use (read only: set by binding). An
            attribute, not a property: the executor reads it twice per task.
    """

    __slots__ = ("_thread", "loop")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        loop = running_loop()
        if loop is not None:
            self._set(loop)

    def _set(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._thread = threading.get_ident()

    def bind(self) -> asyncio.AbstractEventLoop:
        """The loop, binding now if unbound.

        Raises:
            ControllerStateError: called while another loop runs on this thread.
        """
        cur = running_loop()
        if self.loop is None:
            self._set(cur if cur is not None else private_loop())
        loop = self.loop
        assert loop is not None
        if cur is not None and cur is not loop:
            raise ControllerStateError(
                "this controller is bound to another event loop (it was first used there); "
                "create a new controller for this loop"
            )
        return loop

    def here(self) -> asyncio.AbstractEventLoop | None:
        """On the thread the loop was bound on (or with none bound yet): :meth:`bind`;
        on another thread: ``None`` (the caller hands its work over with
        ``call_soon_threadsafe``). One call on ``submit``'s path instead of two.

        Raises:
            ControllerStateError: see :meth:`bind`.
        """
        thread = self._thread
        if thread is not None and thread != threading.get_ident():
            return None
        loop = self.loop
        if loop is not None and loop.is_running():
            # Running, and this is the thread it was bound on, where it runs: asyncio runs
            # one loop per thread at a time, so it is the running one. The check skips
            # asyncio.get_running_loop(), which in CPython 3.11 makes a getpid() system
            # call (~0.3 us here) on every call. (A bound loop taken to another thread
            # and run there, while this thread runs another loop, is not detected.)
            return loop
        return self.bind()

    def on_owner_thread(self) -> bool:
        """Whether the caller runs on the thread the loop was bound on (or none yet)."""
        return self._thread is None or self._thread == threading.get_ident()

    def blocking(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run an async method to completion from sync code, on the bound loop.

        From another thread while the loop runs, the coroutine is handed to the loop and
        this thread waits for it.

        Raises:
            ControllerStateError: the loop is idle and owned by another thread, or it is not
                running and is not the private loop (use the async method there).
            SyncInLoopError: see :func:`run_sync`.
        """
        loop = self.loop
        if loop is not None and not self.on_owner_thread():
            if loop.is_running():
                return asyncio.run_coroutine_threadsafe(coro, loop).result()
            coro.close()
            raise ControllerStateError(
                f"{what} was called from another thread while the controller's loop is idle"
            )
        if loop is not None and running_loop() is None and loop is not private_loop():
            coro.close()
            raise ControllerStateError(
                f"{what}: the controller's event loop is not running; use the async method"
            )
        return run_sync(coro, what=what)
