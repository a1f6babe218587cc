"""Call a reward function, sync or async, off the event loop and with a timeout.

``reward_fn(prompt, completion, prompt_ids, completion_ids, **data) -> float`` (AReaL's
signature). Sync functions run in the loop's default thread pool so a slow reward never
blocks the notebook's loop; async ones are awaited. Both are bounded by ``timeout``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError

__all__ = ["RESERVED_REWARD_ARGS", "RewardFn", "call_reward"]

RewardFn = Callable[..., Any]
RESERVED_REWARD_ARGS = frozenset({"prompt", "completion", "prompt_ids", "completion_ids"})


async def call_reward(fn: RewardFn, prompt: str, completion: str, prompt_ids: list[int],
                      completion_ids: list[int], data: Mapping[str, Any], *,
                      timeout: float) -> float:
    """Return ``float(fn(...))``; data keys named like the positional arguments are dropped.

    Raises:
        TimeoutError: the reward took longer than ``timeout`` seconds.
        ConfigError: the reward is not a number.
    """
    extra = {k: v for k, v in data.items() if k not in RESERVED_REWARD_ARGS} \
        if isinstance(data, Mapping) else {}
    args = (prompt, completion, prompt_ids, completion_ids)
    if inspect.iscoroutinefunction(fn):
        value = await asyncio.wait_for(fn(*args, **extra), timeout)
    else:
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **extra)
        value = await asyncio.wait_for(loop.run_in_executor(None, call), timeout)
        if inspect.isawaitable(value):
            value = await asyncio.wait_for(value, timeout)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"reward_fn must return a number, got {value!r}") from None
