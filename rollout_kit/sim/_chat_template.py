"""The simulator's chat template, its hermes tool calls, and the deterministic tool mode.

Template (both flavours' chat endpoints and vLLM's ``/tokenize`` render with it, so a client
can render locally and send ids)::

    <|tools|>\\n[{"name":"calculator",...}]\\n      (only when the request has tools)
    <|role|>\\ncontent\\n                          (per message)
    <|assistant|>\\n                               (the generation prompt)

The tools line is the compact JSON list of the ``function`` objects. An assistant message's
``tool_calls`` follow its content as hermes blocks ``<tool_call>{"name": N, "arguments": {...}}
</tool_call>`` written with ``json.dumps``' default separators, the very text the tool mode
generates, so a conversation re-rendered with the ``plain`` template keeps the ids the model
produced. The ``drop_think`` variant keeps only the text after the last ``</think>`` of earlier
assistant messages, as Qwen3-style templates do: re-rendering then drifts from the generated ids.

Tool mode (:func:`tool_reply`) decides an output from the rendered prompt text alone, so
``/v1/chat/completions`` and ``/v1/completions`` with the same rendered prompt (text or ids)
answer alike: with a ``calculator`` tool offered, a last ``user`` section holding an arithmetic
expression gets a calculator call, a last ``tool`` section (the result) gets
``"The answer is <result>."``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

ChatTemplate = Literal["plain", "drop_think"]
TOOLS_HEADER = "<|tools|>\n"
ASSISTANT_HEADER = "<|assistant|>\n"
ROLES = ("system", "user", "assistant", "tool", "developer")
_ROLE_SET = frozenset(ROLES)
_OPEN = "<tool_call>"
_CLOSE = "</tool_call>"
_THINK_END = "</think>"
_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
#: where the arguments value starts inside a block written name-first
_ARGS_AT_RE = re.compile(r'\s*\{\s*"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"arguments"\s*:\s*')
#: a run of characters that may form an arithmetic expression
_EXPR_RE = re.compile(r"[\d(][\d+\-*()\s]*[\d)]")
_MAX_EXPR = 200


class TemplateError(ValueError):
    """A malformed chat request: where (``loc``, dotted), the bad value, pydantic's error
    ``kind`` and the message, so each flavour words the 400 its own way."""

    def __init__(self, loc: str, value: Any, kind: str, msg: str) -> None:
        super().__init__(f"{loc}: {msg}")
        self.loc = loc
        self.value = value
        self.kind = kind
        self.msg = msg


# -- rendering ---------------------------------------------------------------------------------
def check_tools(tools: Any) -> list[dict[str, Any]]:
    """The ``function`` objects of a request's ``tools`` (``None`` gives ``[]``).

    Raises:
        TemplateError: not a list of ``{"type": "function", "function": {"name": str,
            "parameters": JSON-Schema object}}`` (``parameters`` may be left out, as vLLM
            allows).
    """
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TemplateError("tools", tools, "list_type", "Input should be a valid list")
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            raise TemplateError(f"tools.{i}", t, "model_type",
                                "Each tool must be an object with type 'function'")
        fn = t.get("function")
        if not isinstance(fn, dict):
            raise TemplateError(f"tools.{i}.function", fn, "model_type",
                                "Input should be a valid dictionary")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise TemplateError(f"tools.{i}.function.name", fn.get("name"), "string_type",
                                "Input should be a non-empty string")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict)
                                   or not isinstance(params.get("type", ""), str)):
            raise TemplateError(f"tools.{i}.function.parameters", params, "dict_type",
                                "Input should be a JSON Schema object")
        out.append(fn)
    return out


def tool_call_text(name: str, arguments: Any) -> str:
    """One hermes block: ``<tool_call>{"name": N, "arguments": ARGS}</tool_call>``."""
    return _OPEN + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + _CLOSE


def _content_text(content: Any, loc: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and p.get("type") == "text")
    raise TemplateError(loc, content, "string_type", "Input should be a valid string")


def _calls_text(calls: Any, loc: str) -> str:
    if calls is None:
        return ""
    if not isinstance(calls, list):
        raise TemplateError(loc, calls, "list_type", "Input should be a valid list")
    parts: list[str] = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise TemplateError(f"{loc}.{j}.function", fn, "model_type",
                                "Each tool call needs a function with a string name")
        args = fn.get("arguments")
        if isinstance(args, str):  # OpenAI sends a JSON string; the template wants the object
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise TemplateError(f"{loc}.{j}.function.arguments", args, "json_invalid",
                                    "Tool call arguments must be a JSON string") from None
        elif args is None:
            args = {}
        parts.append(tool_call_text(fn["name"], args))
    return "".join(parts)


def render(messages: Any, tools: Any = None, *, add_generation_prompt: bool = True,
           template: ChatTemplate = "plain") -> str:
    """The prompt text of a chat request (see the module docstring).

    Raises:
        TemplateError: ``messages`` not a non-empty list of objects, a role outside
            system/user/assistant/tool/developer, malformed content, tool calls or tools.
    """
    if not isinstance(messages, list) or not messages:
        raise TemplateError("messages", messages, "missing" if messages is None else
                            "list_type", "Field required" if messages is None else
                            "Input should be a non-empty list")
    fns = check_tools(tools)
    parts: list[str] = []
    if fns:
        parts.append(TOOLS_HEADER + json.dumps(fns, separators=(",", ":"), ensure_ascii=False)
                     + "\n")
    drop = template == "drop_think"
    last = len(messages) - 1
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TemplateError(f"messages.{i}", m, "model_type",
                                "Each message must be an object with a string role")
        role = m.get("role")
        if role not in _ROLE_SET:
            raise TemplateError(f"messages.{i}.role", role, "literal_error",
                                "Input should be 'system', 'user', 'assistant', 'tool' or "
                                "'developer'")
        text = _content_text(m.get("content"), f"messages.{i}.content")
        if role == "assistant":
            if drop and (i < last or add_generation_prompt) and _THINK_END in text:
                text = text.rsplit(_THINK_END, 1)[1]
            text += _calls_text(m.get("tool_calls"), f"messages.{i}.tool_calls")
        parts.append(f"<|{role}|>\n{text}\n")
    if add_generation_prompt:
        parts.append(ASSISTANT_HEADER)
    return "".join(parts)


# -- tool mode ---------------------------------------------------------------------------------
def evaluate(expression: str) -> int:
    """The value of an integer expression with ``+ - *``, parentheses and unary minus
    (what a ``calculator`` tool answers).

    Raises:
        ValueError: not such an expression.
    """
    tokens: list[str] = re.findall(r"\d+|[-+*()]|\S", expression)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("unexpected end of expression")
        pos += 1
        return tokens[pos - 1]

    def factor() -> int:
        t = take()
        if t == "-":
            return -factor()
        if t == "(":
            v = expr()
            if take() != ")":
                raise ValueError("unbalanced parentheses")
            return v
        if t.isdigit():
            return int(t)
        raise ValueError(f"unexpected {t!r}")

    def term() -> int:
        v = factor()
        while peek() == "*":
            take()
            v *= factor()
        return v

    def expr() -> int:
        v = term()
        while peek() in ("+", "-"):
            v = v + term() if take() == "+" else v - term()
        return v

    value = expr()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r}")
    return value


def find_expression(text: str) -> str | None:
    """The last arithmetic expression in ``text`` (integers with at least one ``+ - *``,
    parentheses allowed), as written, or ``None``."""
    for m in reversed(list(_EXPR_RE.finditer(text))):
        cand = m.group(0).strip()
        if len(cand) > _MAX_EXPR or not any(op in cand for op in "+-*"):
            continue
        try:
            evaluate(cand)
        except ValueError:
            continue
        return cand
    return None


def _offers_calculator(prompt: str) -> bool:
    end = prompt.find("\n", len(TOOLS_HEADER))
    if end < 0:
        return False
    try:
        fns = json.loads(prompt[len(TOOLS_HEADER):end])
    except ValueError:
        return False
    return isinstance(fns, list) and any(isinstance(f, dict) and f.get("name") == "calculator"
                                         for f in fns)


def _last_section(prompt: str) -> tuple[str, str] | None:
    """``(role, content)`` of the last message before the generation prompt."""
    if not prompt.endswith(ASSISTANT_HEADER):
        return None
    body = prompt[:-len(ASSISTANT_HEADER)]
    best = -1
    best_role = ""
    for role in ROLES:
        at = body.rfind(f"\n<|{role}|>\n")
        if at > best:
            best, best_role = at, role
    if best < 0:
        return None
    content = body[best + len(best_role) + 6:]
    return best_role, content[:-1] if content.endswith("\n") else content


def tool_reply(prompt: str, template: ChatTemplate = "plain") -> str | None:
    """The forced output of a tool-mode prompt, or ``None`` (generate as usual).

    Args:
        prompt: the rendered prompt text (it must start with the tools block).
        template: the server's template variant (``drop_think`` adds a ``<think>`` part).
    """
    if not prompt.startswith(TOOLS_HEADER) or not _offers_calculator(prompt):
        return None
    section = _last_section(prompt)
    if section is None:
        return None
    role, content = section
    think = template == "drop_think"
    if role == "user":
        expr = find_expression(content)
        if expr is None:
            return None
        call = tool_call_text("calculator", {"expression": expr})
        return ("<think>I will use the calculator.</think>" + call) if think else call
    if role == "tool":
        result = content.strip()
        answer = f"The answer is {result}."
        return f"<think>The tool said {result}.</think>{answer}" if think else answer
    return None


# -- parsing tool calls out of an output (vLLM's --tool-call-parser hermes) ---------------------
@dataclass(frozen=True, slots=True)
class ToolCallText:
    """One parsed call: its name, its arguments JSON string, and where they lie in the text
    (``args_start``: the name is known and the call's first stream delta goes out;
    ``args_end``: the arguments text ends; a call whose arguments are not a slice of the
    text has ``args_start == args_end`` at the block's end and streams ``arguments`` whole)."""

    name: str
    arguments: str
    args_start: int
    args_end: int
    sliced: bool


@dataclass(frozen=True, slots=True)
class ParsedCalls:
    """An output split as the hermes parser does: ``content`` is the text before the first
    block (``None`` when empty or blank), ``content_end`` its length in the text."""

    content: str | None
    content_end: int
    calls: tuple[ToolCallText, ...]


def parse_tool_calls(text: str) -> ParsedCalls | None:
    """The hermes tool calls of ``text``, or ``None`` when it has none or one does not parse
    (the whole text is then content, as in vLLM).

    A call's ``arguments`` is the arguments value as written in the text (vLLM re-serialises it
    with ``json.dumps``, which gives the same string for the simulator's own calls), so a
    stream can send it in pieces that add up to the non-streamed string.
    """
    if _OPEN not in text:
        return None
    calls: list[ToolCallText] = []
    for m in _BLOCK_RE.finditer(text):
        body = m.group(1)
        try:
            obj = json.loads(body)
        except ValueError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        at = _ARGS_AT_RE.match(body)
        stripped = body.rstrip()
        raw = stripped[at.end():-1].rstrip() if at is not None and stripped.endswith("}") else ""
        try:
            sliced = bool(raw) and json.loads(raw) == obj.get("arguments")
        except ValueError:
            sliced = False
        if sliced:
            assert at is not None
            start = m.start(1) + at.end()
            calls.append(ToolCallText(obj["name"], raw, start, start + len(raw), True))
        else:
            args = obj.get("arguments", {})
            whole = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append(ToolCallText(obj["name"], whole, m.end(), m.end(), False))
    if not calls:
        return None
    first = text.index(_OPEN)
    content = text[:first]
    return ParsedCalls(content if content.strip() else None, first, tuple(calls))


def stream_pieces(parsed: ParsedCalls, text: str, lo: int, hi: int
                  ) -> tuple[str, list[tuple[int, ToolCallText, bool, str]]]:
    """What a stream sends for the text between ``lo`` and ``hi`` characters.

    Returns:
        ``(content, calls)``: the content piece, and per call touched ``(index, call,
        first, arguments piece)`` (``first``: the call's opening delta, with id and name).
    """
    content = text[lo:min(hi, parsed.content_end)] if lo < parsed.content_end else ""
    out: list[tuple[int, ToolCallText, bool, str]] = []
    for i, call in enumerate(parsed.calls):
        a, b = call.args_start, call.args_end
        first = lo < a <= hi
        if call.sliced:
            piece = text[max(lo, a):min(hi, b)] if hi > a and lo < b else ""
        else:
            piece = call.arguments if first else ""
        if first or piece:
            out.append((i, call, first, piece))
    return content, out
