"""Call a reward function, sync or async, with a timeout — on the loop only when it is cheap.

``reward_fn(prompt, completion, prompt_ids, completion_ids, **data) -> float`` (AReaL's
signature). Async functions are awaited. Where a sync function runs is the workflow's
``reward_mode``:

* ``"thread"``: every call in the loop's default thread pool, so a slow or blocking reward
  never freezes the notebook's loop; the hop costs tens of µs per call;
* ``"inline"``: every call on the loop (no hop; for rewards known to take microseconds —
  ``timeout`` cannot interrupt a sync call there);
* ``"auto"`` (default): the first :data:`PROBE_CALLS` calls run in threads and are timed
  there; when each used at most :data:`CHEAP_CPU_S` of CPU and :data:`CHEAP_WALL_S` of wall
  time, later calls run inline; two inline calls in a row that take longer than
  :data:`INLINE_LIMIT_S` send every later call back to threads for good (logged once; one
  slow call alone may be the machine preempting a cheap one). At worst two calls block the
  loop for as long as they take.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from .._errors import ConfigError

logger = logging.getLogger("rollout_kit._workflows")

RewardFn = Callable[..., Any]
RewardMode = Literal["auto", "thread", "inline"]
RESERVED_REWARD_ARGS = frozenset({"prompt", "completion", "prompt_ids", "completion_ids"})

#: ``"auto"``: calls timed in threads before the runner decides.
PROBE_CALLS = 8
#: ``"auto"``: most CPU (thread time) a probed call may use to count as cheap.
CHEAP_CPU_S = 200e-6
#: ``"auto"``: most wall time a probed call may take to count as cheap (blocking I/O is not).
CHEAP_WALL_S = 0.02
#: ``"auto"``: two inline calls in a row slower than this send the later calls to threads.
INLINE_LIMIT_S = 0.002


def check_reward_signature(fn: RewardFn) -> None:
    """Refuse, when the workflow is built, a reward function that cannot take the four
    positional arguments every call passes (else every task would fail with a TypeError)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check
        return
    try:
        sig.bind_partial("prompt", "completion", [], [])
    except TypeError:
        name = getattr(fn, "__name__", repr(fn))
        raise ConfigError(
            f"reward_fn {name}{sig} cannot be called as reward_fn(prompt, completion, "
            "prompt_ids, completion_ids, **data); give it those four parameters (data keys "
            "such as 'answer' come as keyword arguments)") from None


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()`` with the CPU and wall seconds it took on the calling thread."""
    c0, w0 = time.thread_time(), time.perf_counter()
    value = fn()
    return value, time.thread_time() - c0, time.perf_counter() - w0


class RewardRunner:
    """Calls one reward function where ``mode`` says (see the module docstring).

    Args:
        fn: the reward function, sync or async.
        mode: ``"auto"``, ``"thread"`` or ``"inline"``.
        timeout: seconds allowed per call (not enforceable on an inline sync call).
    """

    __slots__ = ("_auto", "_cheap", "_is_async", "_slow", "fn", "mode", "timeout")

    def __init__(self, fn: RewardFn, mode: RewardMode = "auto", timeout: float = 60.0) -> None:
        if mode not in ("auto", "thread", "inline"):
            raise ConfigError(f"reward_mode must be 'auto', 'thread' or 'inline', got {mode!r}")
        check_reward_signature(fn)
        self.fn = fn
        self.mode: RewardMode = mode
        self.timeout = timeout
        self._is_async = inspect.iscoroutinefunction(fn)
        self._auto = mode == "auto"  # still deciding, or watching its inline calls
        self._cheap = 0  # probed calls in a row that were cheap
        self._slow = 0  # inline calls in a row that were slow

    @property
    def inline(self) -> bool:
        """Whether sync calls run on the loop now."""
        return self.mode == "inline"

    async def __call__(self, prompt: str, completion: str, prompt_ids: list[int],
                       completion_ids: list[int], data: Mapping[str, Any]) -> float:
        """Return ``float(fn(...))``; data keys named like the positional arguments are
        dropped.

        Raises:
            TimeoutError: the reward took longer than ``timeout`` seconds.
            ConfigError: the reward is not a number.
        """
        extra = {k: v for k, v in data.items() if k not in RESERVED_REWARD_ARGS} \
            if type(data) is dict or isinstance(data, Mapping) else {}
        fn = self.fn
        if self.mode == "inline" and not self._is_async:  # no partial, no thread
            t0 = time.perf_counter() if self._auto else 0.0
            value = fn(prompt, completion, prompt_ids, completion_ids, **extra)
            if self._auto:  # still watching: two slow calls send it back to threads
                self._watch(time.perf_counter() - t0)
            if type(value) is float:  # the common case: nothing to await or convert
                return value
        elif self._is_async:
            value = await asyncio.wait_for(
                fn(prompt, completion, prompt_ids, completion_ids, **extra), self.timeout)
        else:
            value = await self._in_thread(functools.partial(
                fn, prompt, completion, prompt_ids, completion_ids, **extra))
        if inspect.isawaitable(value):
            value = await asyncio.wait_for(value, self.timeout)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"reward_fn must return a number, got {value!r}") from None

    def _watch(self, took: float) -> None:
        """``"auto"``: count slow inline calls in a row; two send later calls to threads."""
        self._slow = self._slow + 1 if took > INLINE_LIMIT_S else 0
        if self._slow >= 2:
            self.mode, self._auto = "thread", False  # for good
            logger.warning("reward_fn %r took %.1f ms on the event loop; later calls run in "
                           "threads (pass reward_mode='thread' to skip the trial)",
                           self.fn, took * 1e3)

    async def _in_thread(self, call: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        value, cpu, wall = await asyncio.wait_for(
            loop.run_in_executor(None, _timed, call), self.timeout)
        if self._auto:
            self._cheap = self._cheap + 1 if cpu <= CHEAP_CPU_S and wall <= CHEAP_WALL_S else 0
            if self._cheap >= PROBE_CALLS:
                self.mode = "inline"
        return value


async def call_reward(fn: RewardFn, prompt: str, completion: str, prompt_ids: list[int],
                      completion_ids: list[int], data: Mapping[str, Any], *,
                      timeout: float) -> float:
    """One reward call in a thread (sync ``fn``) or awaited (async ``fn``): a
    :class:`RewardRunner` in ``"thread"`` mode, for callers without a runner of their own.

    Raises:
        TimeoutError: the reward took longer than ``timeout`` seconds.
        ConfigError: the reward is not a number.
    """
    return await RewardRunner(fn, "thread", timeout)(prompt, completion, prompt_ids,
                                                     completion_ids, data)
