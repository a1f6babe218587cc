"""The *shape* of a JSON value (keys and JSON types, recursively) and shape differences.

Shared by the recorded-contract tests (``test_vllm_cpu_contract.py``) and the differential
test simulator vs real vLLM (``test_sim_vs_vllm.py``).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TOKEN_ID", "shape", "shape_diff"]

#: ``"token_id:N"``: a token named by its id (``return_tokens_as_token_ids``).
TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def shape(value: Any) -> Any:
    """Keys and JSON types of ``value``, recursively (lists by their first element).

    Dicts keyed by ``"token_id:N"`` (``top_logprobs`` entries) collapse to one ``<token>`` key.
    """
    if isinstance(value, dict):
        if value and all(isinstance(k, str) and TOKEN_ID.match(k) for k in value):
            return {"<token>": shape(next(iter(value.values())))}
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def shape_diff(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where the shapes of two JSON values differ, one line per difference (empty: alike).

    Both values are reduced with :func:`shape` first; ``path`` names the root in the lines
    (``$.choices[0].token_ids``). An empty list matches a list of anything.
    """
    return _diff(shape(expected), shape(actual), path)


def _diff(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in expected ({a[k]})" for k in sorted(set(a) - set(b))]
        out += [f"{path}.{k}: only in actual ({b[k]})" for k in sorted(set(b) - set(a))]
        for k in sorted(set(a) & set(b)):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if not a or not b:
            return []
        return _diff(a[0], b[0], f"{path}[0]")
    if a != b:
        return [f"{path}: expected {a}, got {b}"]
    return []
