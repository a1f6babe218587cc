"""Trace datasets: a Mooncake-style trace, replayed at its (time-scaled) timestamps.

Each request's prompt is built block by block from the trace's hash ids, so requests that
share hash ids share those prompt blocks (a prefix cache hits as in the traced workload); the
ids come from the same vocabulary as :mod:`.synthetic`'s and ask for exactly the traced output
length (``ignore_eos``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..._errors import truncate
from .._tokenize import TextTokenizer
from .common import (
    SPECIAL_IDS,
    VOCAB_SIZE,
    allowed_ids,
    check_length,
    check_time_scale,
    fail,
    is_int,
    jsonl_objects,
    positive,
    take,
)
from .request import LoadRequest


def read_mooncake(path: str | Path, *, time_scale: float = 1.0, block_size: int = 512,
                  seed: int = 0, num: int | None = None, rebase: bool = True,
                  vocab_size: int = VOCAB_SIZE, special_ids: Sequence[int] = SPECIAL_IDS,
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
    time_scale = check_time_scale(time_scale)
    block_size = positive(block_size, "block_size")
    allowed, _ = allowed_ids(tokenizer, vocab_size, special_ids)
    n_allowed = len(allowed)
    blocks: dict[int, np.ndarray] = {}

    def block(h: int) -> np.ndarray:
        b = blocks.get(h)
        if b is None:
            r = np.random.default_rng([seed & 0xFFFFFFFF, 0xB10C, h & 0xFFFFFFFFFFFFFFFF])
            b = blocks[h] = allowed[r.integers(0, n_allowed, size=block_size)]
        return b

    rows: list[tuple[float, LoadRequest]] = []
    for name, no, obj in jsonl_objects(path):
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise fail(f"missing key {key!r}", name, no)
        ts = obj["timestamp"]
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
            raise fail(f"'timestamp' must be a number (ms), got {truncate(ts, 40)}", name, no)
        if ts < 0:
            raise fail(f"'timestamp' must be >= 0, got {ts}", name, no)
        n_in = check_length(obj["input_length"], "input_length", name, no)
        n_out = check_length(obj["output_length"], "output_length", name, no)
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(is_int(h) for h in hashes):
            raise fail("'hash_ids' must be a list of integers", name, no)
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
    return take(out, num, seed, str(path)) if num is not None else out
