"""Conversation datasets: ShareGPT conversations, vLLM's multi-turn benchmark JSON, synthetic
conversations and agent traces — each a ``list[Conversation]`` (:mod:`.conversation`).

* :func:`read_sharegpt_conversations`: ShareGPT entries (``{"conversations": [{"from",
  "value"}, ...]}``), every user turn a chat call;
* :func:`read_multiturn_json`: the input of vLLM's ``benchmarks/multi_turn``
  (``benchmark_serving_multi_turn.py --input-file``, as ``convert_sharegpt_to_openai.py``
  writes it): a list of ``{"id", "messages": [{"role", "content"}, ...]}``;
* :func:`synthetic_conversations`: ``turns`` turns of ``input_len`` / ``output_len`` tokens
  (uniform within ``range_ratio``), an optional system prompt shared by every conversation,
  and a think-time distribution;
* :func:`read_agent_trace`: a Mooncake-style trace of agent sessions, one JSONL line per chat
  call with its ``session_id``, ``timestamp`` (ms), ``input_length``, ``output_length``,
  ``hash_ids`` and ``role`` (``user`` or ``tool``: a tool result), think time
  ``think_ms`` (else the gap between the session's timestamps).

In the file datasets each user (or tool) message is a turn, and the reply after it sets the
turn's ``output_len`` (its token count with ``tokenizer``; or ``output_len=`` for all); system
messages before the first user message are the system prompt; assistant messages before it
are skipped (as vLLM's converter does). The reply the server gives replaces the recorded one
in the history.

Bad input raises :class:`~rollout_kit.DatasetError`, one line naming the file and the
1-based line: a conversation with no user turn, a message with an unknown role, a negative
think time, a missing key, a non-positive length.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..._errors import truncate
from .._tokenize import TextTokenizer
from .common import (
    check_length,
    check_time_scale,
    fail,
    is_int,
    jsonl_objects,
    open_text,
    positive,
    take,
    tokenizer_of,
)
from .conversation import Conversation, ConversationTurn, ThinkTime, text_of_length, with_think_time

#: ShareGPT ``from`` values by the role they play
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
                   "model": "assistant", "system": "system", "tool": "tool",
                   "function": "tool", "observation": "tool"}
#: OpenAI ``role`` values by the role they play
_OPENAI_ROLES = {"user": "user", "assistant": "assistant", "system": "system",
                 "developer": "system", "tool": "tool"}
_SESSION_KEYS = ("session_id", "conversation_id", "chat_id")

Tok = TextTokenizer | str | Path | object | None


def _json_list(path: str | Path, what: str) -> tuple[str, list[tuple[int, Any]]]:
    """``(name, [(1-based line of the entry, entry), ...])`` of a JSON file holding a list."""
    name, text = open_text(path)
    dec = json.JSONDecoder()
    pos = _skip(text, 0)
    if pos >= len(text):
        raise fail(f"empty dataset (no {what})", name)
    if text[pos] != "[":
        try:
            kind = type(json.loads(text)).__name__
        except json.JSONDecodeError as exc:
            raise fail(f"not valid JSON ({exc.msg}, column {exc.colno})", name,
                       exc.lineno) from None
        raise fail(f"expected a JSON list of {what}, got {kind}", name)
    out: list[tuple[int, Any]] = []
    line, counted = 1, 0
    pos = _skip(text, pos + 1)
    while pos < len(text) and text[pos] != "]":
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise fail(f"not valid JSON ({exc.msg}, column {exc.colno})", name,
                       exc.lineno) from None
        out.append((line, obj))
        pos = _skip(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
        elif pos < len(text) and text[pos] != "]":
            line += text.count("\n", counted, pos)
            raise fail("not valid JSON (expected ',' or ']' between entries)", name, line)
    if pos >= len(text):
        raise fail("not valid JSON (the list is not closed)", name, line)
    if not out:
        raise fail(f"empty dataset (no {what})", name)
    return name, out


def _skip(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _conversation(messages: list[tuple[str, str]], name: str, line: int, *, tok: TextTokenizer,
                  output_len: int | None, max_turns: int | None, ignore_eos: bool,
                  conv_id: str | None) -> Conversation | None:
    """The conversation of ``(role, content)`` messages (roles already mapped); ``None``: a
    conversation without messages."""
    if not messages:
        return None
    if not any(role == "user" for role, _ in messages):
        raise fail(f"a conversation with no user turn ({len(messages)} message(s), roles: "
                   f"{', '.join(sorted({r for r, _ in messages}))})", name, line)
    system: list[str] = []
    turns: list[tuple[str, str, int | None]] = []  # role, content, reply tokens
    for k, (role, content) in enumerate(messages):
        if not turns:
            if role == "system":
                system.append(content)
            elif role == "tool":
                raise fail(f"message {k + 1}: a tool result before the first user turn",
                           name, line)
            if role != "user":
                continue
        if role in ("user", "tool"):
            if not content:
                raise fail(f"message {k + 1}: an empty {role} message", name, line)
            if max_turns is not None and len(turns) >= max_turns:
                break
            turns.append((role, content, None))
        elif role == "assistant":
            r, c, n = turns[-1]
            if n is None:
                turns[-1] = (r, c, max(1, len(tok.encode(content))) if content else 1)
        else:
            raise fail(f"message {k + 1}: a {role} message after the first user turn "
                       "(only user, assistant and tool messages follow it)", name, line)
    out = tuple(ConversationTurn(content=c, role=r, input_len=len(tok.encode(c)) or None,
                                 output_len=output_len if output_len is not None else n)
                for r, c, n in turns)
    return Conversation(turns=out, system="\n".join(system) or None, ignore_eos=ignore_eos,
                        id=conv_id)


def _finish(out: list[Conversation], name: str, *, num: int | None, seed: int, shuffle: bool,
            min_turns: int, think_time: ThinkTime | str | float | Mapping[str, Any] | None,
            ) -> list[Conversation]:
    out = [c for c in out if c.num_turns >= min_turns]
    if not out:
        raise fail(f"no conversation with at least {min_turns} user turn(s)", name)
    if shuffle:
        random.Random(seed).shuffle(out)
    out = take(out, num, seed, name)
    return with_think_time(out, think_time, seed) if think_time is not None else out


def read_sharegpt_conversations(
        path: str | Path, *, num: int | None = None, min_turns: int = 1,
        max_turns: int | None = None, output_len: int | None = None, shuffle: bool = True,
        seed: int = 0, ignore_eos: bool = False, tokenizer: Tok = None,
        think_time: ThinkTime | str | float | Mapping[str, Any] | None = None,
) -> list[Conversation]:
    """ShareGPT conversations with all their turns (``[{"conversations": [{"from",
    "value"}, ...]}, ...]``).

    Roles: ``human``/``user``; ``gpt``/``assistant``/``chatgpt``/``bard``/``bing``/``model``;
    ``system``; ``tool``/``function``/``observation`` (a tool result). Entries with no
    messages are skipped; those with fewer than ``min_turns`` user turns are left out.

    Args:
        path: the JSON file.
        num: how many conversations (first ``num`` after the seeded shuffle; too few are
            oversampled).
        min_turns: leave out conversations with fewer user turns.
        max_turns: keep at most this many turns of each conversation.
        output_len: one reply length for every turn (default: the recorded reply's tokens).
        shuffle: shuffle the entries (seeded).
        seed: seeds the shuffle, the oversampling and the think times.
        ignore_eos: ask for exactly each turn's reply length.
        tokenizer: counts the lengths (default: the simulator's byte tokenizer).
        think_time: a :class:`ThinkTime` for the turns after the first (default 0).

    Raises:
        DatasetError: not a JSON list, an entry without ``conversations``, a message without
            a string ``value`` or with an unknown ``from``, a conversation with no user turn.
    """
    return _read_messages(path, "conversations", "from", "value", _SHAREGPT_ROLES, num=num,
                          min_turns=min_turns, max_turns=max_turns, output_len=output_len,
                          shuffle=shuffle, seed=seed, ignore_eos=ignore_eos,
                          tokenizer=tokenizer, think_time=think_time)


def read_multiturn_json(
        path: str | Path, *, num: int | None = None, min_turns: int = 1,
        max_turns: int | None = None, output_len: int | None = None, shuffle: bool = False,
        seed: int = 0, ignore_eos: bool = False, tokenizer: Tok = None,
        think_time: ThinkTime | str | float | Mapping[str, Any] | None = None,
) -> list[Conversation]:
    """The conversations of vLLM's multi-turn benchmark input (``[{"id": ..., "messages":
    [{"role": "user"|"assistant"|"system"|"tool", "content": ...}, ...]}, ...]``).

    Options as :func:`read_sharegpt_conversations` (``shuffle`` off by default: the file's
    order, as the benchmark's ``round_robin`` sampling).

    Raises:
        DatasetError: not a JSON list, an entry without ``messages``, a message without a
            string ``content`` or with an unknown ``role``, a conversation with no user turn.
    """
    return _read_messages(path, "messages", "role", "content", _OPENAI_ROLES, num=num,
                          min_turns=min_turns, max_turns=max_turns, output_len=output_len,
                          shuffle=shuffle, seed=seed, ignore_eos=ignore_eos,
                          tokenizer=tokenizer, think_time=think_time)


def _read_messages(path: str | Path, list_key: str, role_key: str, text_key: str,
                   roles: Mapping[str, str], *, num: int | None, min_turns: int,
                   max_turns: int | None, output_len: int | None, shuffle: bool, seed: int,
                   ignore_eos: bool, tokenizer: Tok,
                   think_time: ThinkTime | str | float | Mapping[str, Any] | None,
                   ) -> list[Conversation]:
    if think_time is not None:
        ThinkTime.parse(think_time)  # a bad one fails before the file is read
    min_turns = positive(min_turns, "min_turns")
    max_turns = None if max_turns is None else positive(max_turns, "max_turns")
    fixed = None if output_len is None else positive(output_len, "output_len")
    tok = tokenizer_of(tokenizer)
    name, entries = _json_list(path, "conversations")
    out: list[Conversation] = []
    for line, entry in entries:
        if not isinstance(entry, dict):
            raise fail(f"expected an object, got {type(entry).__name__}", name, line)
        if list_key not in entry:
            raise fail(f"missing key {list_key!r}", name, line)
        raw = entry[list_key]
        if not isinstance(raw, list):
            raise fail(f"{list_key!r} must be a list, got {type(raw).__name__}", name, line)
        messages: list[tuple[str, str]] = []
        for k, m in enumerate(raw, 1):
            if not isinstance(m, dict):
                raise fail(f"message {k} must be an object, got {type(m).__name__}", name, line)
            role = m.get(role_key)
            if not isinstance(role, str) or role not in roles:
                raise fail(f"message {k} has an unknown {role_key} {truncate(repr(role), 40)} "
                           f"(known: {', '.join(roles)})", name, line)
            text = m.get(text_key)
            if not isinstance(text, str):
                raise fail(f"message {k}: {text_key!r} must be a string, got "
                           f"{type(text).__name__}", name, line)
            messages.append((roles[role], text))
        conv_id = entry.get("id")
        conv = _conversation(messages, name, line, tok=tok, output_len=fixed,
                             max_turns=max_turns, ignore_eos=ignore_eos,
                             conv_id=None if conv_id is None else str(conv_id))
        if conv is not None:
            out.append(conv)
    return _finish(out, name, num=num, seed=seed, shuffle=shuffle, min_turns=min_turns,
                   think_time=think_time)


def _lengths(rng: np.random.Generator, size: int, mean: int, ratio: float) -> np.ndarray:
    low = max(math.floor(mean * (1 - ratio)), 1)
    high = max(math.ceil(mean * (1 + ratio)), 1)
    return rng.integers(low, high + 1, size=size)


def synthetic_conversations(
        num: int, *, turns: int = 4, input_len: int = 128, output_len: int = 64,
        range_ratio: float = 0.0, system_prompt_len: int = 0,
        think_time: ThinkTime | str | float | Mapping[str, Any] = 0.0, seed: int = 0,
        tokenizer: Tok = None) -> list[Conversation]:
    """``num`` conversations of ``turns`` user turns each, with exact reply lengths.

    Each turn's message is ``input_len`` tokens of random words and asks for ``output_len``
    tokens (``ignore_eos``); with ``range_ratio`` r both are uniform integers in
    ``[floor(L·(1−r)), ceil(L·(1+r))]``. ``system_prompt_len`` > 0 puts one system prompt of
    that many tokens in front of every conversation (shared: a prefix cache serves it to all).
    Think times before turns 2.. come from ``think_time`` (a :class:`ThinkTime`). All draws
    come from ``numpy.random.default_rng(seed)``.

    Raises:
        DatasetError: a count or length below 1, a ratio outside ``[0, 1)``, a negative
            ``system_prompt_len`` or think time.
    """
    num = positive(num, "num")
    turns = positive(turns, "turns")
    input_len = positive(input_len, "input_len")
    output_len = positive(output_len, "output_len")
    if isinstance(range_ratio, bool) or not isinstance(range_ratio, int | float) or not (
            0 <= range_ratio < 1):
        raise fail(f"range_ratio must be in [0, 1), got {range_ratio!r}")
    if not is_int(system_prompt_len) or system_prompt_len < 0:
        raise fail(f"system_prompt_len must be an int >= 0, got {system_prompt_len!r}")
    dist = ThinkTime.parse(think_time)
    tok = tokenizer_of(tokenizer) if tokenizer is not None else None
    rng = np.random.default_rng(seed)
    system = (text_of_length(int(system_prompt_len), rng, tok) if system_prompt_len
              else None)
    ins = _lengths(rng, num * turns, input_len, float(range_ratio))
    outs = _lengths(rng, num * turns, output_len, float(range_ratio))
    thinks = dist.sample(rng, num * turns)
    out = []
    for i in range(num):
        conv_turns = []
        for k in range(turns):
            j = i * turns + k
            n_in = int(ins[j])
            conv_turns.append(ConversationTurn(
                content=text_of_length(n_in, rng, tok), input_len=n_in,
                output_len=int(outs[j]), think_s=float(thinks[j]) if k else 0.0))
        out.append(Conversation(turns=tuple(conv_turns), system=system, ignore_eos=True,
                                id=str(i)))
    return out


def read_agent_trace(
        path: str | Path, *, time_scale: float = 1.0, block_size: int = 512, seed: int = 0,
        num: int | None = None, rebase: bool = True, tokenizer: Tok = None,
        think_time: ThinkTime | str | float | Mapping[str, Any] | None = None,
) -> list[Conversation]:
    """Agent sessions from a Mooncake-style trace, one JSONL line per chat call.

    A line: ``{"session_id": "s1", "timestamp": 1200, "input_length": 900,
    "output_length": 40, "hash_ids": [7, 8], "role": "user", "think_ms": 1500}``
    (``conversation_id`` or ``chat_id`` name the session too; ``role`` ``"user"`` by
    default, ``"tool"`` for a call that follows a tool's result; ``hash_ids`` and
    ``think_ms`` optional). Lines of one session are its turns, in timestamp order.

    * A session's first message is ``input_length`` tokens built block by block from its
      ``hash_ids`` (block ``j`` is ``block_size`` seeded tokens of ``hash_ids[j]``), so
      sessions that share hash ids share that prompt prefix (a system prompt, tool specs).
    * A later turn's message is the tokens the trace adds after the history:
      ``input_length − previous input_length − previous output_length`` (at least 1).
    * Think time: ``think_ms`` (× ``time_scale``), else the gap to the session's previous
      timestamp (which includes the traced answer's own time), or ``think_time`` for all.
    * A session starts at its first timestamp: ``(ms − first) / 1000 · time_scale`` seconds
      (``rebase=False`` keeps the trace's zero); sessions come sorted by it. Replay them on
      their times with ``Arrivals.schedule(c.timestamp for c in conversations)``.

    Every turn asks for exactly ``output_length`` tokens (``ignore_eos``).

    Raises:
        DatasetError: a malformed line, a missing key, a negative timestamp or think time,
            an unknown role, a non-positive length, hash ids that are not integers, a
            session whose first turn is not a user's.
    """
    time_scale = check_time_scale(time_scale)
    block_size = positive(block_size, "block_size")
    if think_time is not None:
        ThinkTime.parse(think_time)
    tok = tokenizer_of(tokenizer) if tokenizer is not None else None
    blocks: dict[int, str] = {}

    def block(h: int) -> str:
        b = blocks.get(h)
        if b is None:
            r = np.random.default_rng([seed & 0xFFFFFFFF, 0xB10C, h & 0xFFFFFFFFFFFFFFFF])
            b = blocks[h] = text_of_length(block_size, r, tok)
        return b

    sessions: dict[str, list[tuple[float, int, dict[str, Any]]]] = {}
    name = str(path)
    for name, no, obj in jsonl_objects(path):
        key = next((k for k in _SESSION_KEYS if k in obj), None)
        if key is None:
            raise fail("missing key 'session_id' (the conversation the call belongs to)",
                       name, no)
        for k in ("timestamp", "input_length", "output_length"):
            if k not in obj:
                raise fail(f"missing key {k!r}", name, no)
        ts = obj["timestamp"]
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
            raise fail(f"'timestamp' must be a number (ms), got {truncate(ts, 40)}", name, no)
        if ts < 0:
            raise fail(f"'timestamp' must be >= 0, got {ts}", name, no)
        role = obj.get("role", "user")
        if role not in ("user", "tool"):
            raise fail(f"unknown role {truncate(repr(role), 40)} (a turn is 'user' or 'tool')",
                       name, no)
        think = obj.get("think_ms")
        if think is not None:
            if not isinstance(think, int | float) or isinstance(think, bool) or not \
                    math.isfinite(think):
                raise fail(f"'think_ms' must be a number, got {truncate(think, 40)}", name, no)
            if think < 0:
                raise fail(f"'think_ms' is negative ({think}); think times are >= 0", name, no)
        check_length(obj["input_length"], "input_length", name, no)
        check_length(obj["output_length"], "output_length", name, no)
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(is_int(h) for h in hashes):
            raise fail("'hash_ids' must be a list of integers", name, no)
        sessions.setdefault(str(obj[key]), []).append((float(ts), no, obj))
    out: list[tuple[float, Conversation]] = []
    for sid, rows in sessions.items():
        rows.sort(key=lambda r: r[0])
        first_no = rows[0][1]
        if rows[0][2].get("role", "user") != "user":
            raise fail(f"session {truncate(sid, 40)} starts with a tool turn (the first call "
                       "of a session is a user's)", name, first_no)
        turns = []
        prev_in = prev_out = 0
        prev_ts = rows[0][0]
        for pos, (ts, no, obj) in enumerate(rows):
            n_in = int(obj["input_length"])
            n_out = int(obj["output_length"])
            if pos == 0:
                text = _from_blocks(n_in, [int(h) for h in obj.get("hash_ids", [])],
                                    block, block_size, seed, no, tok)
                new = n_in
            else:
                new = max(1, n_in - prev_in - prev_out)
                text = text_of_length(new, np.random.default_rng(
                    [seed & 0xFFFFFFFF, 0x7A11, no]), tok)
            think = obj.get("think_ms")
            think_s = (float(think) if think is not None else max(0.0, ts - prev_ts)) \
                / 1000.0 * time_scale
            turns.append(ConversationTurn(content=text, role=obj.get("role", "user"),
                                          input_len=new, output_len=n_out,
                                          think_s=think_s if pos else 0.0))
            prev_in, prev_out, prev_ts = n_in, n_out, ts
        out.append((rows[0][0], Conversation(turns=tuple(turns), ignore_eos=True, id=sid)))
    if not out:
        raise fail("empty dataset (no session)", name)
    out.sort(key=lambda r: r[0])
    t0 = out[0][0] if rebase else 0.0
    convs = [replace(c, timestamp=(ts - t0) / 1000.0 * time_scale) for ts, c in out]
    if think_time is not None:
        convs = with_think_time(convs, think_time, seed)
    return take(convs, num, seed, name) if num is not None else convs


def _from_blocks(n: int, hashes: list[int], block: Any, block_size: int, seed: int, no: int,
                 tok: TextTokenizer | None) -> str:
    """``n`` tokens of text: the hash ids' blocks, then text unique to the line."""
    parts: list[str] = []
    left = n
    for h in hashes:
        if left <= 0:
            break
        if left >= block_size:
            parts.append(block(h))
            left -= block_size
        else:
            parts.append(text_of_length(left, np.random.default_rng(
                [seed & 0xFFFFFFFF, 0xB10C, h & 0xFFFFFFFFFFFFFFFF]), tok))
            left = 0
    if left > 0:
        parts.append(text_of_length(left, np.random.default_rng(
            [seed & 0xFFFFFFFF, 0x7A11, no]), tok))
    return "".join(parts)
