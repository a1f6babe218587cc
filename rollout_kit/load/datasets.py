"""Load-test datasets: what each open-loop request sends (nothing is downloaded).

Every loader returns ``list[LoadRequest]``::

    read_jsonl("prompts.jsonl")                     {"prompt": ..., "output_tokens": N} lines
    read_sharegpt("sharegpt.json", num=200)         ShareGPT conversations (vllm bench serve rules)
    synthetic(100, input_len=512, output_len=128, dist="uniform", range_ratio=0.5)
    shared_prefix(num_groups=4, prompts_per_group=8, prefix_len=256, suffix_len=32,
                  output_len=64)                    prefix caching: a shared prefix per group
    read_mooncake("trace.jsonl", time_scale=0.5)    a Mooncake trace, replayed (timestamps)
    load_dataset("random", num=100, input_len=64)   by ``vllm bench serve --dataset-name``

Lengths are tokens. Synthetic, shared-prefix and trace prompts are **token ids** drawn from a
vocabulary without its special ids, so ``prompt_len`` is exact on the server (no re-encoding);
they ask for exactly ``output_len`` tokens (``ignore_eos``), as ``vllm bench serve`` forces for
its random datasets. The vocabulary defaults to the simulator's byte tokenizer (259 ids, 0..2
special), which also fits the tiny vLLM CPU test model; pass ``tokenizer=`` (a path or object,
see :mod:`rollout_kit.load.tokenize`) to use another. Text datasets (JSONL, ShareGPT) count
tokens with ``tokenizer`` (default: the simulator's byte counting).

Bad input raises :class:`~rollout_kit.errors.DatasetError` with one line that names the file
and the 1-based line (or entry) number.
"""

from __future__ import annotations

import inspect
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import ConfigError, DatasetError, truncate
from .tokenize import TextTokenizer, load_tokenizer

__all__ = [
    "DATASET_NAMES",
    "Distribution",
    "LoadRequest",
    "load_dataset",
    "read_jsonl",
    "read_mooncake",
    "read_sharegpt",
    "shared_prefix",
    "synthetic",
]

Distribution = Literal["fixed", "uniform", "normal"]

#: default vocabulary: the simulator's byte tokenizer (ids 0..2 special)
_VOCAB_SIZE = 259
_SPECIAL_IDS = (0, 1, 2)
#: ShareGPT pruning, as vllm's ``is_valid_sequence`` (from the original benchmark_serving.py)
_SHAREGPT_MIN_LEN = 4
_SHAREGPT_MAX_PROMPT = 1024
_SHAREGPT_MAX_TOTAL = 2048
_HUMAN = frozenset({"human", "user"})
_GPT = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadRequest:
    """One request of a load run.

    Attributes:
        prompt: the text prompt, or ``None`` when ``prompt_ids`` are given.
        prompt_ids: the prompt's token ids, or ``None``.
        prompt_len: the prompt's length in tokens, when known.
        output_len: tokens to generate (``max_new_tokens``); ``None``: the server's default.
        ignore_eos: generate exactly ``output_len`` tokens (datasets that fix lengths).
        timestamp: send time in seconds from the run's start (trace datasets, time-scaled).
        group: shared-prefix group, or a trace request's first hash id.
    """

    prompt: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    prompt_len: int | None = None
    output_len: int | None = None
    ignore_eos: bool = False
    timestamp: float | None = None
    group: int | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.prompt_ids is None):
            raise ConfigError("LoadRequest needs exactly one of prompt and prompt_ids")
        for name in ("prompt_len", "output_len"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise ConfigError(f"LoadRequest.{name} must be an int >= 1, got {v!r}")

    @property
    def input_len(self) -> int | None:
        """``prompt_len``, else the number of ``prompt_ids``, else ``None``."""
        if self.prompt_len is not None:
            return self.prompt_len
        return len(self.prompt_ids) if self.prompt_ids is not None else None


# --------------------------------------------------------------------------- helpers
def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _where(path: str | None, line: int | None, what: str = "line") -> str:
    if path is None:
        return ""
    return f"{path}:{line}: " if line is not None and what == "line" else (
        f"{path}: {what} {line}: " if line is not None else f"{path}: ")


def _fail(message: str, path: str | None = None, line: int | None = None,
          what: str = "line") -> DatasetError:
    one_line = " ".join(message.split())
    return DatasetError(f"{_where(path, line, what)}{one_line}", path=path, line=line)


def _as_int(x: object) -> int | None:
    """``x`` as an int when it is one (numpy ints too; an integral float too), else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return None


def _length(value: object, key: str, path: str | None, line: int | None,
            what: str = "line") -> int:
    """A positive int length (an integral float like ``12.0`` is accepted)."""
    n = _as_int(value)
    if n is None:
        raise _fail(f"{key!r} must be an integer, got {truncate(value, 40)}", path, line, what)
    if n < 1:
        raise _fail(f"{key!r} must be positive, got {n}", path, line, what)
    return n


def _positive(value: object, name: str) -> int:
    n = _as_int(value) if not isinstance(value, float) else None
    if n is None or n < 1:
        raise _fail(f"{name} must be an int >= 1, got {value!r}")
    return n


def _open_text(path: str | Path) -> tuple[str, str]:
    p = Path(path).expanduser()
    try:
        return str(path), p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail("no such dataset file", str(path)) from None
    except IsADirectoryError:
        raise _fail("is a directory, not a dataset file", str(path)) from None
    except UnicodeDecodeError as exc:
        raise _fail(f"not UTF-8 text ({exc.reason} at byte {exc.start})", str(path)) from None
    except OSError as exc:
        raise _fail(f"cannot read: {exc.strerror or exc}", str(path)) from None


def _jsonl_objects(path: str | Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """``(name, 1-based line number, object)`` of each non-blank line of a JSONL file."""
    name, text = _open_text(path)
    seen = False
    for no, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(f"not valid JSON ({exc.msg}, column {exc.colno})", name, no) from None
        if not isinstance(obj, dict):
            raise _fail(f"expected a JSON object, got {type(obj).__name__}", name, no)
        seen = True
        yield name, no, obj
    if not seen:
        raise _fail("empty dataset (no JSON lines)", name)


def _tokens(tokenizer: TextTokenizer | str | Path | object | None) -> TextTokenizer:
    try:
        return load_tokenizer(tokenizer)
    except DatasetError:
        raise
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _take(requests: list[LoadRequest], num: int | None, seed: int,
          name: str | None) -> list[LoadRequest]:
    """The first ``num`` requests; fewer are oversampled as vllm does (seeded choice)."""
    if not requests:
        raise _fail("empty dataset (no usable request)", name)
    if num is None:
        return requests
    num = _positive(num, "num")
    if len(requests) >= num:
        return requests[:num]
    rng = random.Random(seed)
    return requests + [rng.choice(requests) for _ in range(num - len(requests))]


def _allowed_ids(tokenizer: TextTokenizer | str | Path | object | None, vocab_size: int,
                 special_ids: Sequence[int]) -> tuple[np.ndarray, int]:
    """The ids a synthetic prompt may use, and the vocabulary size."""
    if tokenizer is not None:
        tok = _tokens(tokenizer)
        vocab_size, special_ids = tok.vocab_size, sorted(tok.special_ids)
    vocab_size = _positive(vocab_size, "vocab_size")
    specials = {int(i) for i in special_ids}
    allowed = np.array([i for i in range(vocab_size) if i not in specials], dtype=np.int64)
    if allowed.size == 0:
        raise _fail(f"the vocabulary ({vocab_size} ids) has no non-special id")
    return allowed, vocab_size


def _pair(value: float | tuple[float, float], name: str) -> tuple[float, float]:
    if isinstance(value, tuple):
        if len(value) != 2:
            raise _fail(f"{name} must be a number or an (input, output) pair, got {value!r}")
        a, b = value
    else:
        a = b = value
    for v in (a, b):
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise _fail(f"{name} must be a finite number, got {v!r}")
    return float(a), float(b)


# --------------------------------------------------------------------------- text datasets
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
        tokenizer: counts ``prompt_len`` (see :mod:`rollout_kit.load.tokenize`).

    Raises:
        DatasetError: no such file, an empty file, a line that is not a JSON object, a
            missing or non-string prompt, a non-positive output length.
    """
    keys = (output_len_key,) if output_len_key else ("output_tokens", "output_len")
    fixed = None if output_len is None else _positive(output_len, "output_len")
    tok = _tokens(tokenizer) if tokenizer is not None else None
    out: list[LoadRequest] = []
    name = str(path)
    for name, no, obj in _jsonl_objects(path):
        if prompt_key not in obj:
            raise _fail(f"missing key {prompt_key!r} (keys: {', '.join(map(str, obj)) or 'none'})",
                        name, no)
        prompt = obj[prompt_key]
        if not isinstance(prompt, str) or not prompt:
            raise _fail(f"{prompt_key!r} must be a non-empty string, got {truncate(prompt, 40)}",
                        name, no)
        n_out = fixed
        if n_out is None:
            key = next((k for k in keys if k in obj), None)
            if key is not None:
                n_out = _length(obj[key], key, name, no)
        n_in = len(tok.encode(prompt)) if tok is not None else None
        out.append(LoadRequest(prompt=prompt, prompt_len=n_in or None, output_len=n_out,
                               ignore_eos=ignore_eos and n_out is not None))
    if shuffle:
        random.Random(seed).shuffle(out)
    return _take(out, num, seed, name)


def _turn_text(turn: object, name: str, entry: int) -> tuple[str, str]:
    if not isinstance(turn, dict):
        raise _fail(f"a turn must be an object, got {type(turn).__name__}", name, entry, "entry")
    if "value" not in turn:
        raise _fail("a turn lacks the key 'value'", name, entry, "entry")
    value = turn["value"]
    if not isinstance(value, str):
        raise _fail(f"a turn's 'value' must be a string, got {type(value).__name__}",
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
    name, text = _open_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"not valid JSON ({exc.msg}, column {exc.colno})", name, exc.lineno) from None
    if not isinstance(data, list):
        raise _fail(f"expected a JSON list of conversations, got {type(data).__name__}", name)
    if not data:
        raise _fail("empty dataset (no conversations)", name)
    fixed = None if output_len is None else _positive(output_len, "output_len")
    tok = _tokens(tokenizer)
    entries: list[tuple[int, list[Any]]] = []
    for i, entry in enumerate(data, 1):
        if not isinstance(entry, dict):
            raise _fail(f"expected an object, got {type(entry).__name__}", name, i, "entry")
        if "conversations" not in entry:
            raise _fail("missing key 'conversations'", name, i, "entry")
        conv = entry["conversations"]
        if not isinstance(conv, list):
            raise _fail(f"'conversations' must be a list, got {type(conv).__name__}",
                        name, i, "entry")
        if len(conv) >= 2:
            entries.append((i, conv))
    if shuffle:
        random.Random(seed).shuffle(entries)
    out: list[LoadRequest] = []
    limit = None if num is None else _positive(num, "num")
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
        raise _fail("no usable conversation (a human turn and a reply of 4 to 1024 tokens, "
                    "2048 together)", name)
    return _take(out, limit, seed, name)


def _prompt_and_reply(turns: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The first human turn and the reply after it; turns without roles: the first two."""
    if not any(role for role, _ in turns):
        return turns[0][1], turns[1][1]
    for k, (role, value) in enumerate(turns):
        if role in _HUMAN:
            reply = next((v for r, v in turns[k + 1:] if r in _GPT), None)
            return None if reply is None else (value, reply)
    return None


# --------------------------------------------------------------------------- synthetic
def _sample_lengths(rng: np.random.Generator, num: int, mean: int, dist: str,
                    ratio: float, std: float, minimum: int) -> np.ndarray:
    if dist == "fixed":
        return np.full(num, mean, dtype=np.int64)
    if dist == "uniform":
        # vllm's get_sampling_params: integers in [floor(L(1-r)), ceil(L(1+r))]
        low = max(math.floor(mean * (1 - ratio)), minimum)
        high = max(math.ceil(mean * (1 + ratio)), minimum)
        return rng.integers(low, high + 1, size=num)
    values = np.rint(rng.normal(mean, std, size=num)).astype(np.int64)
    return np.maximum(values, minimum)


def synthetic(num: int, *, input_len: int, output_len: int, dist: Distribution = "fixed",
              range_ratio: float | tuple[float, float] = 0.0,
              std: float | tuple[float, float] = 0.0, seed: int = 0,
              vocab_size: int = _VOCAB_SIZE, special_ids: Sequence[int] = _SPECIAL_IDS,
              tokenizer: TextTokenizer | str | Path | object | None = None,
              ) -> list[LoadRequest]:
    """``num`` token-id prompts of given lengths (vllm bench serve's ``random`` dataset).

    Lengths per ``dist``: ``"fixed"`` (exactly ``input_len`` / ``output_len``),
    ``"uniform"`` (integers in ``[floor(L·(1−r)), ceil(L·(1+r))]``, ``r = range_ratio`` in
    ``[0, 1)``, as vllm's ``--random-range-ratio``; the output at least 1) or ``"normal"``
    (rounded ``N(L, std)``, at least 1). ``range_ratio`` and ``std`` are one value or an
    ``(input, output)`` pair. The ids follow vllm's ``RandomDataset``: with
    ``rng = numpy.random.default_rng(seed)``, lengths then per-request offsets are drawn and
    request ``i`` is ``allowed[(offset_i + i + arange(len)) % len(allowed)]``, ``allowed``
    being the vocabulary without its special ids; so a byte tokenizer and vllm (with no
    special tokens added) draw the same lengths and ids.

    Raises:
        DatasetError: ``num`` or a length below 1, an unknown ``dist``, a ratio outside
            ``[0, 1)``, a negative ``std``.
    """
    num = _positive(num, "num")
    input_len = _positive(input_len, "input_len")
    output_len = _positive(output_len, "output_len")
    if dist not in ("fixed", "uniform", "normal"):
        raise _fail(f"dist must be 'fixed', 'uniform' or 'normal', got {dist!r}")
    r_in, r_out = _pair(range_ratio, "range_ratio")
    s_in, s_out = _pair(std, "std")
    if not (0 <= r_in < 1 and 0 <= r_out < 1):
        raise _fail(f"range_ratio must be in [0, 1), got {range_ratio!r}")
    if s_in < 0 or s_out < 0:
        raise _fail(f"std must be >= 0, got {std!r}")
    if seed < 0:
        raise _fail(f"seed must be >= 0, got {seed!r}")
    allowed, vocab = _allowed_ids(tokenizer, vocab_size, special_ids)
    rng = np.random.default_rng(seed)
    in_lens = _sample_lengths(rng, num, input_len, dist, r_in, s_in, 1)
    out_lens = _sample_lengths(rng, num, output_len, dist, r_out, s_out, 1)
    offsets = rng.integers(0, vocab, size=num)
    n = len(allowed)
    out = []
    for i in range(num):
        k = int(in_lens[i])
        ids = allowed[(int(offsets[i]) + i + np.arange(k)) % n]
        out.append(LoadRequest(prompt_ids=tuple(ids.tolist()), prompt_len=k,
                               output_len=int(out_lens[i]), ignore_eos=True))
    return out


def shared_prefix(*, num_groups: int, prompts_per_group: int, prefix_len: int,
                  suffix_len: int, output_len: int, seed: int = 0, shuffle: bool = True,
                  vocab_size: int = _VOCAB_SIZE, special_ids: Sequence[int] = _SPECIAL_IDS,
                  tokenizer: TextTokenizer | str | Path | object | None = None,
                  ) -> list[LoadRequest]:
    """Prefix-caching load: ``num_groups`` random prefixes, each with distinct suffixes.

    Every prompt is ``prefix(group) + suffix`` in token ids (``prefix_len + suffix_len``
    tokens); suffixes are distinct across the whole dataset, prefixes across groups. As vllm's
    ``prefix_repetition`` dataset, the requests are shuffled (seeded) unless ``shuffle=False``
    (then group by group). ``group`` is the group index.

    Raises:
        DatasetError: a count or length below 1, or more prompts than distinct suffixes.
    """
    num_groups = _positive(num_groups, "num_groups")
    per = _positive(prompts_per_group, "prompts_per_group")
    prefix_len = _positive(prefix_len, "prefix_len")
    suffix_len = _positive(suffix_len, "suffix_len")
    output_len = _positive(output_len, "output_len")
    allowed, _ = _allowed_ids(tokenizer, vocab_size, special_ids)
    total = num_groups * per
    for count, length, what in ((total, suffix_len, "suffixes"), (num_groups, prefix_len,
                                                                   "prefixes")):
        if count > 1 and math.log(count) > length * math.log(len(allowed)) + 1e-9:
            raise _fail(f"{count} distinct {what} of {length} token(s) cannot be drawn from "
                        f"{len(allowed)} ids")
    rng = np.random.default_rng(seed)
    prefixes: set[tuple[int, ...]] = set()
    suffixes: set[tuple[int, ...]] = set()

    def fresh(length: int, seen: set[tuple[int, ...]]) -> tuple[int, ...]:
        while True:
            ids = tuple(allowed[rng.integers(0, len(allowed), size=length)].tolist())
            if ids not in seen:
                seen.add(ids)
                return ids

    out = []
    for g in range(num_groups):
        prefix = fresh(prefix_len, prefixes)
        for _ in range(per):
            ids = prefix + fresh(suffix_len, suffixes)
            out.append(LoadRequest(prompt_ids=ids, prompt_len=len(ids), output_len=output_len,
                                   ignore_eos=True, group=g))
    if shuffle:
        random.Random(seed).shuffle(out)
    return out


# --------------------------------------------------------------------------- traces
def read_mooncake(path: str | Path, *, time_scale: float = 1.0, block_size: int = 512,
                  seed: int = 0, num: int | None = None, rebase: bool = True,
                  vocab_size: int = _VOCAB_SIZE, special_ids: Sequence[int] = _SPECIAL_IDS,
                  tokenizer: TextTokenizer | str | Path | object | None = None,
                  ) -> list[LoadRequest]:
    """A Mooncake-style trace: one ``{"timestamp", "input_length", "output_length",
    "hash_ids"}`` object per line, replayed at its timestamps.

    ``timestamp`` is in milliseconds; a request's ``timestamp`` is
    ``(timestamp − first) / 1000 · time_scale`` seconds (``rebase=False`` keeps the trace's
    zero; ``time_scale=0.5`` replays twice as fast). The prompt is ``input_length`` token ids
    built block by block: block ``j`` is ``block_size`` seeded tokens of ``hash_ids[j]`` (so
    requests sharing hash ids share those prompt blocks and a prefix cache hits, and a partial
    last block is the start of its hash's block); tokens past the hash ids are unique to the
    request. ``output_length`` tokens are asked for (``ignore_eos``); ``group`` is the first
    hash id. Requests come sorted by timestamp (stable).

    Raises:
        DatasetError: an empty file, a malformed line (file and line number), a missing key,
            a negative timestamp, a non-positive length, hash ids that are not integers.
    """
    if not isinstance(time_scale, int | float) or isinstance(time_scale, bool) or not (
            math.isfinite(time_scale) and time_scale > 0):
        raise _fail(f"time_scale must be a finite number > 0, got {time_scale!r}")
    block_size = _positive(block_size, "block_size")
    allowed, _ = _allowed_ids(tokenizer, vocab_size, special_ids)
    n_allowed = len(allowed)
    blocks: dict[int, np.ndarray] = {}

    def block(h: int) -> np.ndarray:
        b = blocks.get(h)
        if b is None:
            r = np.random.default_rng([seed & 0xFFFFFFFF, 0xB10C, h & 0xFFFFFFFFFFFFFFFF])
            b = blocks[h] = allowed[r.integers(0, n_allowed, size=block_size)]
        return b

    rows: list[tuple[float, LoadRequest]] = []
    for name, no, obj in _jsonl_objects(path):
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise _fail(f"missing key {key!r}", name, no)
        ts = obj["timestamp"]
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
            raise _fail(f"'timestamp' must be a number (ms), got {truncate(ts, 40)}", name, no)
        if ts < 0:
            raise _fail(f"'timestamp' must be >= 0, got {ts}", name, no)
        n_in = _length(obj["input_length"], "input_length", name, no)
        n_out = _length(obj["output_length"], "output_length", name, no)
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(_is_int(h) for h in hashes):
            raise _fail("'hash_ids' must be a list of integers", name, no)
        parts: list[np.ndarray] = []
        left = n_in
        for h in hashes:
            if left <= 0:
                break
            b = block(int(h))
            parts.append(b[:left] if left < block_size else b)
            left -= len(parts[-1])
        if left > 0:
            r = np.random.default_rng([seed & 0xFFFFFFFF, 0x7A11, no])
            parts.append(allowed[r.integers(0, n_allowed, size=left)])
        ids = np.concatenate(parts).tolist()
        req = LoadRequest(prompt_ids=tuple(ids), prompt_len=n_in, output_len=n_out,
                          ignore_eos=True, group=int(hashes[0]) if hashes else None)
        rows.append((float(ts), req))
    rows.sort(key=lambda row: row[0])
    t0 = rows[0][0] if rebase else 0.0
    out = [replace(req, timestamp=(ts - t0) / 1000.0 * time_scale) for ts, req in rows]
    return _take(out, num, seed, str(path)) if num is not None else out


# --------------------------------------------------------------------------- by name
def _random(num: int, *, input_len: int = 1024, output_len: int = 128,
            range_ratio: float | tuple[float, float] = 0.0, seed: int = 0,
            vocab_size: int = _VOCAB_SIZE, special_ids: Sequence[int] = _SPECIAL_IDS,
            tokenizer: TextTokenizer | str | Path | object | None = None,
            ) -> list[LoadRequest]:
    return synthetic(num, input_len=input_len, output_len=output_len, dist="uniform",
                     range_ratio=range_ratio, seed=seed, vocab_size=vocab_size,
                     special_ids=special_ids, tokenizer=tokenizer)


def _prefix_repetition(num: int | None = None, *, num_prefixes: int = 10,
                       prefix_len: int = 256, suffix_len: int = 256, output_len: int = 128,
                       prompts_per_group: int | None = None, seed: int = 0,
                       shuffle: bool = True, vocab_size: int = _VOCAB_SIZE,
                       special_ids: Sequence[int] = _SPECIAL_IDS,
                       tokenizer: TextTokenizer | str | Path | object | None = None,
                       ) -> list[LoadRequest]:
    if prompts_per_group is None:
        if num is None:
            raise _fail("prefix_repetition needs num (or prompts_per_group)")
        prompts_per_group = _positive(num, "num") // _positive(num_prefixes, "num_prefixes")
        if prompts_per_group == 0:
            raise _fail(f"num ({num}) must be >= num_prefixes ({num_prefixes})")
    return shared_prefix(num_groups=num_prefixes, prompts_per_group=prompts_per_group,
                         prefix_len=prefix_len, suffix_len=suffix_len, output_len=output_len,
                         seed=seed, shuffle=shuffle, vocab_size=vocab_size,
                         special_ids=special_ids, tokenizer=tokenizer)


_BY_NAME: dict[str, tuple[Callable[..., list[LoadRequest]], bool]] = {
    # name -> (loader, takes a path)
    "random": (_random, False),
    "synthetic": (synthetic, False),
    "prefix_repetition": (_prefix_repetition, False),
    "shared_prefix": (shared_prefix, False),
    "sharegpt": (read_sharegpt, True),
    "jsonl": (read_jsonl, True),
    "custom": (read_jsonl, True),
    "mooncake": (read_mooncake, True),
    "trace": (read_mooncake, True),
}

#: the names :func:`load_dataset` knows (``vllm bench serve --dataset-name`` where shared)
DATASET_NAMES: tuple[str, ...] = tuple(_BY_NAME)


def load_dataset(name: str, path: str | Path | None = None, **options: Any) -> list[LoadRequest]:
    """A dataset by ``vllm bench serve``'s ``--dataset-name``.

    ``"random"`` (uniform lengths with ``range_ratio``; defaults ``input_len=1024``,
    ``output_len=128`` as vllm), ``"synthetic"`` (:func:`synthetic`), ``"prefix_repetition"``
    (``num // num_prefixes`` prompts per prefix, vllm's defaults 10 prefixes of 256 tokens,
    256-token suffixes, 128 output tokens), ``"shared_prefix"`` (:func:`shared_prefix`),
    ``"sharegpt"``, ``"jsonl"`` / ``"custom"``, ``"mooncake"`` / ``"trace"`` (files at
    ``path``). ``options`` go to the loader (``num``, ``seed``, lengths, ``tokenizer``…).

    Raises:
        DatasetError: an unknown name or option, a missing or needless path, bad input.
    """
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in _BY_NAME:
        raise _fail(f"unknown dataset {name!r} (known: {', '.join(DATASET_NAMES)})")
    fn, takes_path = _BY_NAME[key]
    params = inspect.signature(fn).parameters
    unknown = sorted(k for k in options if k not in params or k == "path")
    if unknown:
        known = ", ".join(k for k in params if k != "path")
        raise _fail(f"dataset {key!r} takes no option(s) {', '.join(unknown)} (known: {known})")
    if takes_path:
        if path is None:
            raise _fail(f"dataset {key!r} needs a path")
        return fn(path, **options)
    if path is not None:
        raise _fail(f"dataset {key!r} is generated; it takes no path")
    return fn(**options)
