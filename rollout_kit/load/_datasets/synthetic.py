"""Generated datasets: token-id prompts of chosen lengths, with or without shared prefixes.

* :func:`synthetic`: ``vllm bench serve``'s ``random`` dataset (fixed, uniform or normal
  lengths);
* :func:`shared_prefix`: prefix-caching load, a random prefix per group and distinct
  suffixes (vllm's ``prefix_repetition``).

The prompts are **token ids** drawn from a vocabulary without its special ids, so
``prompt_len`` is exact on the server (no re-encoding); they ask for exactly ``output_len``
tokens (``ignore_eos``), as ``vllm bench serve`` forces for its random datasets. The
vocabulary defaults to the simulator's byte tokenizer (259 ids, 0..2 special), which also fits
the tiny vLLM CPU test model; pass ``tokenizer=`` (a path or object, see
:mod:`rollout_kit.load._tokenize`) to use another.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from .._tokenize import TextTokenizer
from .common import SPECIAL_IDS, VOCAB_SIZE, allowed_ids, fail, positive
from .request import LoadRequest

Distribution = Literal["fixed", "uniform", "normal"]


def _pair(value: float | tuple[float, float], name: str) -> tuple[float, float]:
    if isinstance(value, tuple):
        if len(value) != 2:
            raise fail(f"{name} must be a number or an (input, output) pair, got {value!r}")
        a, b = value
    else:
        a = b = value
    for v in (a, b):
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise fail(f"{name} must be a finite number, got {v!r}")
    return float(a), float(b)


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
              vocab_size: int = VOCAB_SIZE, special_ids: Sequence[int] = SPECIAL_IDS,
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
    num = positive(num, "num")
    input_len = positive(input_len, "input_len")
    output_len = positive(output_len, "output_len")
    if dist not in ("fixed", "uniform", "normal"):
        raise fail(f"dist must be 'fixed', 'uniform' or 'normal', got {dist!r}")
    r_in, r_out = _pair(range_ratio, "range_ratio")
    s_in, s_out = _pair(std, "std")
    if not (0 <= r_in < 1 and 0 <= r_out < 1):
        raise fail(f"range_ratio must be in [0, 1), got {range_ratio!r}")
    if s_in < 0 or s_out < 0:
        raise fail(f"std must be >= 0, got {std!r}")
    if seed < 0:
        raise fail(f"seed must be >= 0, got {seed!r}")
    allowed, vocab = allowed_ids(tokenizer, vocab_size, special_ids)
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
                  vocab_size: int = VOCAB_SIZE, special_ids: Sequence[int] = SPECIAL_IDS,
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
    num_groups = positive(num_groups, "num_groups")
    per = positive(prompts_per_group, "prompts_per_group")
    prefix_len = positive(prefix_len, "prefix_len")
    suffix_len = positive(suffix_len, "suffix_len")
    output_len = positive(output_len, "output_len")
    allowed, _ = allowed_ids(tokenizer, vocab_size, special_ids)
    total = num_groups * per
    for count, length, what in ((total, suffix_len, "suffixes"), (num_groups, prefix_len,
                                                                   "prefixes")):
        if count > 1 and math.log(count) > length * math.log(len(allowed)) + 1e-9:
            raise fail(f"{count} distinct {what} of {length} token(s) cannot be drawn from "
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
