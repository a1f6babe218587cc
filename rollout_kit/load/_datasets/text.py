"""Text datasets from files: JSONL prompts and ShareGPT conversations.

* :func:`read_jsonl`: one ``{"prompt": ..., "output_tokens": N}`` object a line (vllm's
  ``custom`` dataset);
* :func:`read_sharegpt`: ShareGPT conversations, sampled and pruned by ``vllm bench serve``'s
  rules.

Their prompts are text, so ``prompt_len`` is counted with ``tokenizer`` (default for ShareGPT:
the simulator's byte counting; JSONL counts only with a tokenizer given). Bad input raises
:class:`~rollout_kit.DatasetError` naming the file and the line (or entry).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ..._errors import truncate
from .._tokenize import TextTokenizer
from .common import check_length, fail, jsonl_objects, open_text, positive, take, tokenizer_of
from .request import LoadRequest

#: ShareGPT pruning, as vllm's ``is_valid_sequence`` (from the original benchmark_serving.py)
_SHAREGPT_MIN_LEN = 4
_SHAREGPT_MAX_PROMPT = 1024
_SHAREGPT_MAX_TOTAL = 2048
_HUMAN = frozenset({"human", "user"})
_GPT = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})


def read_jsonl(path: str | Path, *, prompt_key: str = "prompt", output_len: int | None = None,
               output_len_key: str | None = None, num: int | None = None,
               shuffle: bool = False, seed: int = 0, ignore_eos: bool = False,
               tokenizer: TextTokenizer | str | Path | object | None = None,
               ) -> list[LoadRequest]:
    """Prompts from a JSONL file: one ``{"prompt": "...", "output_tokens": N}`` per line.

    The output length is ``output_len`` when given, else the line's ``output_len_key``
    (default: ``output_tokens`` as vllm's custom dataset, or ``output_len``), else ``None``
    (the server's default). Blank lines are skipped. ``prompt_len`` is counted with
    ``tokenizer`` only when one is given.

    Args:
        path: the JSONL file.
        prompt_key: the key holding the prompt text.
        output_len: one output length for every request (overrides the lines).
        output_len_key: the key holding a line's output length.
        num: how many requests (first ``num``; fewer lines are oversampled, seeded).
        shuffle: shuffle the lines first (seeded, as vllm's custom dataset does).
        seed: seeds the shuffle and the oversampling.
        ignore_eos: ask for exactly the output length.
        tokenizer: counts ``prompt_len``: ``None`` (the simulator's byte tokenizer), a
            ``tokenizer.json`` path or folder, or an object with ``encode``.

    Raises:
        DatasetError: no such file, an empty file, a line that is not a JSON object, a
            missing or non-string prompt, a non-positive output length.
    """
    keys = (output_len_key,) if output_len_key else ("output_tokens", "output_len")
    fixed = None if output_len is None else positive(output_len, "output_len")
    tok = tokenizer_of(tokenizer) if tokenizer is not None else None
    out: list[LoadRequest] = []
    name = str(path)
    for name, no, obj in jsonl_objects(path):
        if prompt_key not in obj:
            raise fail(f"missing key {prompt_key!r} (keys: {', '.join(map(str, obj)) or 'none'})",
                       name, no)
        prompt = obj[prompt_key]
        if not isinstance(prompt, str) or not prompt:
            raise fail(f"{prompt_key!r} must be a non-empty string, got {truncate(prompt, 40)}",
                       name, no)
        n_out = fixed
        if n_out is None:
            key = next((k for k in keys if k in obj), None)
            if key is not None:
                n_out = check_length(obj[key], key, name, no)
        n_in = len(tok.encode(prompt)) if tok is not None else None
        out.append(LoadRequest(prompt=prompt, prompt_len=n_in or None, output_len=n_out,
                               ignore_eos=ignore_eos and n_out is not None))
    if shuffle:
        random.Random(seed).shuffle(out)
    return take(out, num, seed, name)


def _turn_text(turn: object, name: str, entry: int) -> tuple[str, str]:
    if not isinstance(turn, dict):
        raise fail(f"a turn must be an object, got {type(turn).__name__}", name, entry, "entry")
    if "value" not in turn:
        raise fail("a turn lacks the key 'value'", name, entry, "entry")
    value = turn["value"]
    if not isinstance(value, str):
        raise fail(f"a turn's 'value' must be a string, got {type(value).__name__}",
                   name, entry, "entry")
    role = turn.get("from")
    return (role if isinstance(role, str) else ""), value


def read_sharegpt(path: str | Path, *, num: int | None = None, seed: int = 0,
                  tokenizer: TextTokenizer | str | Path | object | None = None,
                  output_len: int | None = None, shuffle: bool = True,
                  ignore_eos: bool = False) -> list[LoadRequest]:
    """Requests from a ShareGPT-format JSON file, sampled as ``vllm bench serve`` does.

    The file is a list of ``{"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}``.
    As vllm's ``ShareGPTDataset``: entries with fewer than two turns are dropped, the rest
    shuffled with ``random.seed(seed)``; each entry's prompt is its first human turn and its
    output length the token count of the reply after it (or ``output_len``); pairs with a
    prompt or reply under 4 tokens, a prompt over 1024, or prompt + reply over 2048 are
    skipped (the reply minimum does not apply with ``output_len``); the first ``num`` are
    kept, and too few are oversampled by ``random.seed(seed)`` choices. With the same
    tokenizer and standard (human, gpt, …) conversations this picks the same requests as vllm.

    Args:
        path: the JSON file.
        num: how many requests (default: every usable entry).
        seed: seeds the shuffle and the oversampling.
        tokenizer: counts the lengths (default: the simulator's byte tokenizer).
        output_len: one output length for every request instead of the reply's.
        shuffle: shuffle the entries (vllm's ``--disable-shuffle`` is ``shuffle=False``).
        ignore_eos: ask for exactly the output length.

    Raises:
        DatasetError: not JSON (with the line), not a list, an entry without
            ``conversations`` or a turn without ``value``, no usable conversation.
    """
    name, text = open_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc.msg}, column {exc.colno})", name, exc.lineno) from None
    if not isinstance(data, list):
        raise fail(f"expected a JSON list of conversations, got {type(data).__name__}", name)
    if not data:
        raise fail("empty dataset (no conversations)", name)
    fixed = None if output_len is None else positive(output_len, "output_len")
    tok = tokenizer_of(tokenizer)
    entries: list[tuple[int, list[Any]]] = []
    for i, entry in enumerate(data, 1):
        if not isinstance(entry, dict):
            raise fail(f"expected an object, got {type(entry).__name__}", name, i, "entry")
        if "conversations" not in entry:
            raise fail("missing key 'conversations'", name, i, "entry")
        conv = entry["conversations"]
        if not isinstance(conv, list):
            raise fail(f"'conversations' must be a list, got {type(conv).__name__}",
                       name, i, "entry")
        if len(conv) >= 2:
            entries.append((i, conv))
    if shuffle:
        random.Random(seed).shuffle(entries)
    out: list[LoadRequest] = []
    limit = None if num is None else positive(num, "num")
    for i, conv in entries:
        if limit is not None and len(out) >= limit:
            break
        turns = [_turn_text(t, name, i) for t in conv]
        pair = _prompt_and_reply(turns)
        if pair is None:
            continue
        prompt, reply = pair
        n_in = len(tok.encode(prompt))
        n_out = fixed if fixed is not None else len(tok.encode(reply))
        if (n_in < _SHAREGPT_MIN_LEN or (fixed is None and n_out < _SHAREGPT_MIN_LEN)
                or n_in > _SHAREGPT_MAX_PROMPT or n_in + n_out > _SHAREGPT_MAX_TOTAL):
            continue
        out.append(LoadRequest(prompt=prompt, prompt_len=n_in, output_len=n_out,
                               ignore_eos=ignore_eos))
    if not out:
        raise fail("no usable conversation (a human turn and a reply of 4 to 1024 tokens, "
                   "2048 together)", name)
    return take(out, limit, seed, name)


def _prompt_and_reply(turns: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The first human turn and the reply after it; turns without roles: the first two."""
    if not any(role for role, _ in turns):
        return turns[0][1], turns[1][1]
    for k, (role, value) in enumerate(turns):
        if role in _HUMAN:
            reply = next((v for r, v in turns[k + 1:] if r in _GPT), None)
            return None if reply is None else (value, reply)
    return None
