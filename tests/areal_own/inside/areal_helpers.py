"""Data and reward functions of the AReaL tests (module-level: AReaL's reward wrapper runs
them in a process pool, which pickles them by name)."""

from __future__ import annotations

from typing import Any


def math_data(n: int) -> list[dict[str, Any]]:
    """AReaL's math data shape: chat ``messages`` and an ``answer``."""
    return [{"messages": [{"role": "user", "content": f"What is {i} + 1?"}],
             "answer": str(i + 1)} for i in range(n)]


def reward_fn(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any,
              answer: str | None = None, **kw: Any) -> float:
    """AReaL's reward signature; module-level, so AReaL's process pool can pickle it."""
    return float(answer is not None and answer in completion)


def zero_reward(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any,
                **kw: Any) -> float:
    return 0.0
