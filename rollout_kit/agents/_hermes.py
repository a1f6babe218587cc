"""Tool calls in a completion's text, as vLLM's ``--tool-call-parser hermes`` finds them:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks after the content.

Used where the client sent ids to the completions endpoint (exact-ids mode), so no server
parsed the text; small and hand-written because it must agree with the chat endpoint's
parse of the same text, which the simulator's tests check.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str, id_prefix: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The content before the first block (``None`` when blank) and the parsed calls in
    OpenAI's shape; a block that is not a JSON object with a ``name`` stays in the content."""
    calls: list[dict[str, Any]] = []
    first = None
    for m in _BLOCK.finditer(text):
        try:
            obj = orjson.loads(m.group(1))
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        if first is None:
            first = m.start()
        args = obj.get("arguments", {})
        calls.append({"id": f"{id_prefix}-{len(calls)}", "type": "function",
                      "function": {"name": obj["name"],
                                   "arguments": args if isinstance(args, str)
                                   else orjson.dumps(args).decode()}})
    content = text if first is None else text[:first]
    return (content if content.strip() else None), calls
