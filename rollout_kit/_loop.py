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

from .errors import SyncInLoopError

__all__ = ["run_sync", "running_loop"]

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
