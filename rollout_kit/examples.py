"""Arithmetic problems, an exact-match reward and a simulated model's answers: the pieces the
demo, the notebooks and tests share, so they import them from the library, not the CLI."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

__all__ = ["exact_match_reward", "make_answer_fn", "make_problems"]

_PROMPT_RE = re.compile(r"What is (\d+)\s*([+\-*])\s*(\d+)\?")
_INT_RE = re.compile(r"-?\d+")


def make_problems(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` arithmetic prompts with their answers (seeded)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        op = rng.choice("+-*")
        ans = a + b if op == "+" else a - b if op == "-" else a * b
        out.append({"prompt": f"What is {a}{op}{b}?", "answer": str(ans)})
    return out


def make_answer_fn(p_correct: float, seed: int) -> Callable[[str], str]:
    """An ``answer_fn``: right with probability ``p_correct``, else off by one.

    The simulator's built-in answer model does this by default (``serve(accuracy=...)``,
    ``rollout-kit sim --accuracy``), which is what the demo uses; this function is for
    ``answer_fn`` users (notebooks, ``LocalEngine``) who want the old per-prompt call counter.
    """
    calls: dict[str, int] = {}

    def answer(prompt: str) -> str:
        m = _PROMPT_RE.search(prompt)
        if m is None:
            return "I don't know."
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        k = calls.get(prompt, 0)
        calls[prompt] = k + 1
        if random.Random(f"{seed}:{prompt}:{k}").random() >= p_correct:
            value += 1
        return f"The answer is {value}."

    return answer


def exact_match_reward(prompt: str, completion: str, prompt_ids: list[int],
                       completion_ids: list[int], answer: str = "", **_: Any) -> float:
    """1.0 when the last integer in the completion equals ``answer``."""
    del prompt, prompt_ids, completion_ids
    nums = _INT_RE.findall(completion)
    return 1.0 if nums and nums[-1] == answer else 0.0
