"""What a simulated model says: a deterministic output plan per sequence key.

The plan is fixed when a sequence is admitted: its token ids, their logprobs, and why it
ends. Latency (``state``) only decides *when* each token is released. The text is, in order of
precedence: ``answer_fn(prompt)`` when configured; else the answer model's reply
(``answers.arithmetic_answer``: ``"The answer is N."`` for an arithmetic question, right with
probability ``SimConfig.accuracy``); else printable pseudo-random filler with an EOS at a seeded
length. With a lognormal length model (``length_sigma``) every output's length is one seeded
lognormal draw: filler ("reasoning", digit-free) then the answer, or filler alone. An answer
is followed by EOS (or, with ``ignore_eos``, padded with digit-free filler to
the token budget; with ``min_tokens``, padded to ``min_tokens`` before the EOS). Stop strings,
``stop_token_ids``, ``ignore_eos``, ``min_tokens`` and the token budget are honoured the way
vLLM/SGLang do: the matching token is kept in the ids, and its text (or the stop string) is
trimmed from ``text`` unless asked to keep it.

Sequence keys (``sequence_key``): temperature 0 depends on the simulator seed and the prompt
only; a ``seed`` sampling parameter gives the same output for the same prompt and sample index
(the request id does not matter, as on vLLM/SGLang); otherwise a client-given request id, or
else a per-server draw counter, makes every sample differ.
"""

from __future__ import annotations

import codecs
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from ._tokenizer import SimTokenizer

_MIN_LOGPROB = -9999.0
_MASK = (1 << 64) - 1
_LCG_A = 6364136223846793005
_LCG_C = 1442695040888963407
_INV53 = 1.0 / (1 << 53)
_STD_NORMAL = NormalDist()

FinishKind = Literal["eos", "token", "string", "length"]


@dataclass(slots=True, kw_only=True)
class SamplingSpec:
    """The sampling values that shape the output (already validated)."""

    max_tokens: int
    temperature: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    min_tokens: int = 0
    seed: int | None = None
    keep_stop: bool = False  # include_stop_str_in_output / no_stop_trim

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5


def stop_strings(value: object) -> tuple[str, ...] | None:
    """A request's ``stop`` (None, a string or a list of strings) as ``SamplingSpec.stop``
    (empty strings dropped); None when it is none of those."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    return None


def sequence_key(seed: int, prompt_ids: Sequence[int], spec: SamplingSpec, sample_index: int,
                 rid: str | None, draw: int = 0) -> int:
    """A deterministic integer seed for one sequence.

    Args:
        seed: the simulator's seed.
        prompt_ids: the prompt.
        spec: the sampling values.
        sample_index: index of the sample within its request (``n``).
        rid: the request id the client gave, if any.
        draw: a number unique to this sequence on its server (its draw counter), used when
            nothing else tells samples apart.

    Greedy sampling depends on the prompt only. A ``seed`` sampling parameter fixes the
    output per (prompt, sample index), whatever the rid. Otherwise the client's rid, or else
    ``draw``, varies it.
    """
    if spec.greedy:
        return hash((seed, 0x6EED, *prompt_ids))
    if spec.seed is not None:
        return hash((seed, spec.seed, sample_index, *prompt_ids))
    if rid:
        rid_hash = zlib.crc32(rid.encode("utf-8", "surrogatepass"))
        return hash((seed, -1, sample_index, rid_hash, *prompt_ids))
    return hash((seed, -2, sample_index, draw, *prompt_ids))


class OutputPlan:
    """The full output of one sequence.

    Attributes:
        token_ids: every generated id (the matched EOS / stop token included).
        logprobs: one finite logprob per token.
        finish: ``"eos"``, ``"token"`` (stop_token_ids), ``"string"`` (stop string) or
            ``"length"``.
        matched: the matched token id or stop string (``None`` for length).
        text: the final text (stop string / stop token trimmed unless kept).
    """

    __slots__ = ("_full", "_lp", "_lp_seed", "_offsets", "_text_tokens", "_tok", "finish",
                 "matched", "text", "token_ids")

    def __init__(self, token_ids: list[int], logprobs: _LazyLogprobs, finish: FinishKind,
                 matched: int | str | None, full_text: str, text_len: int,
                 text_tokens: int, tokenizer: SimTokenizer) -> None:
        self._tok = tokenizer
        self.token_ids = token_ids
        self._lp_seed = logprobs
        self._lp: list[float] | None = None
        self.finish = finish
        self.matched = matched
        self._full = full_text
        self.text = full_text if text_len == len(full_text) else full_text[:text_len]
        self._text_tokens = text_tokens
        self._offsets: list[int] | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def logprobs(self) -> list[float]:
        """One finite logprob per token (computed on first use, then cached)."""
        if self._lp is None:
            seed = self._lp_seed
            self._lp = _logprobs(seed.x, seed.n, seed.greedy)
        return self._lp

    def _build_offsets(self) -> list[int]:
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        limit = len(self.text)
        offs = [0]
        acc = 0
        ids = self.token_ids
        table = self._tok.byte_table
        n = len(table)
        for k in range(len(ids)):
            if k < self._text_tokens:
                t = ids[k]
                if 0 <= t < n:
                    acc += len(dec.decode(table[t]))
            offs.append(min(acc, limit))
        self._offsets = offs
        return offs

    def text_at(self, k: int) -> str:
        """The text after the first ``k`` tokens (complete characters only, trimmed)."""
        if k >= len(self.token_ids):
            return self.text
        offs = self._offsets if self._offsets is not None else self._build_offsets()
        return self._full[:offs[k]]

    def top_logprobs(self, index: int, k: int) -> list[tuple[int, float]]:
        """The sampled token with its logprob, then ``k`` distinct alternatives.

        Alternatives share the remaining probability mass by halves, so the probabilities
        of the listed tokens never sum above 1.
        """
        tok = self.token_ids[index]
        lp = self.logprobs[index]
        out = [(tok, lp)]
        rest = max(1.0 - math.exp(lp), 0.0)
        alternative = self._tok.alternative
        for j in range(1, k + 1):
            alt = alternative(tok, j)
            p = rest * 0.5 ** j
            out.append((alt, max(math.log(p), _MIN_LOGPROB) if p > 0 else _MIN_LOGPROB))
        return out


def _logprobs(x: int, n: int, greedy: bool) -> list[float]:
    out = []
    scale, base = (0.5, 0.0) if greedy else (4.0, 0.02)
    for _ in range(n):
        x = (x * _LCG_A + _LCG_C) & _MASK
        r = (x >> 11) * _INV53
        out.append(-(base + scale * r * r))
    return out


class _LazyLogprobs:
    """Seed of a plan's logprobs; expanded only when a response asks for them."""

    __slots__ = ("greedy", "n", "x")

    def __init__(self, x: int, n: int, greedy: bool) -> None:
        self.x = x
        self.n = n
        self.greedy = greedy


def lognormal_length(x: int, mean: float, sigma: float) -> int:
    """A length >= 1 from the 64-bit draw ``x``: lognormal with mean ``mean`` and log-sd
    ``sigma`` (``mu = ln(mean) - sigma²/2``), so the mean stays put as the tail grows."""
    u = ((x >> 11) + 0.5) * _INV53  # in (0, 1)
    z = _STD_NORMAL.inv_cdf(u)
    return max(1, round(math.exp(math.log(mean) - 0.5 * sigma * sigma + sigma * z)))


def plan_output(tokenizer: SimTokenizer, spec: SamplingSpec, key: int, *,
                answer: str | None, mean_output_tokens: int,
                length_sigma: float | None = None) -> OutputPlan:
    """Decide the whole output of one sequence.

    Args:
        tokenizer: the server's tokenizer.
        spec: validated sampling values (``max_tokens`` already clamped to the context).
        key: ``sequence_key(...)`` of this sequence.
        answer: the answer text (``answer_fn`` or the answer model), else ``None`` for
            random filler.
        mean_output_tokens: mean length of random completions (EOS included).
        length_sigma: ``None`` for the uniform model (random completions uniform in
            ``[1, 2·mean − 1]``, answers as they are); else the log-sd of a lognormal length
            (mean ``mean_output_tokens``) that every completion gets, an answer placed after
            digit-free filler (unless ``ignore_eos`` pads it to the budget anyway).

    Returns:
        The plan; ``len(plan) <= spec.max_tokens``.
    """
    x = (key ^ 0x9E3779B97F4A7C15) & _MASK
    eos = tokenizer.eos_token_id
    max_tokens = spec.max_tokens
    alpha = tokenizer.filler_ids
    na = len(alpha)

    def rand_tokens(k: int) -> list[int]:
        nonlocal x
        out = []
        for _ in range(k):
            x = (x * _LCG_A + _LCG_C) & _MASK
            out.append(alpha[(x >> 33) % na])
        return out

    def pad_tokens(k: int) -> list[int]:
        nonlocal x
        out = []
        pad = tokenizer.pad_filler_ids
        for _ in range(k):
            x = (x * _LCG_A + _LCG_C) & _MASK
            out.append(pad[(x >> 33) % len(pad)])
        return out

    if length_sigma is not None and not spec.ignore_eos:
        x = (x * _LCG_A + _LCG_C) & _MASK
        length = max(lognormal_length(x, mean_output_tokens, length_sigma),
                     spec.min_tokens + 1)
        body = tokenizer.encode(answer) if answer is not None else []
        n_pad = max(length - 1 - len(body), 0)
        cand = pad_tokens(n_pad) + body if answer is not None else rand_tokens(n_pad)
        cand = cand[:max_tokens]
        if len(cand) < max_tokens:
            cand.append(eos)
    elif answer is not None:
        cand = tokenizer.encode(answer)[:max_tokens]
        pad_to = max_tokens if spec.ignore_eos else min(spec.min_tokens, max_tokens)
        if len(cand) < pad_to:
            cand += pad_tokens(pad_to - len(cand))
        if not spec.ignore_eos and len(cand) < max_tokens:
            cand.append(eos)
    elif spec.ignore_eos:
        cand = rand_tokens(max_tokens)
    else:
        x = (x * _LCG_A + _LCG_C) & _MASK
        length = 1 + (x >> 33) % (2 * mean_output_tokens - 1)
        length = max(length, spec.min_tokens + 1)
        if length <= max_tokens:
            cand = rand_tokens(length - 1)
            cand.append(eos)
        else:
            cand = rand_tokens(max_tokens)
    greedy = spec.greedy
    stop_ids = spec.stop_token_ids
    stops = [s.encode("utf-8") for s in spec.stop]
    min_tokens = spec.min_tokens
    finish: FinishKind = "length"
    matched: int | str | None = None
    out_len = len(cand)
    if stop_ids or stops or min_tokens or not spec.ignore_eos:
        buf = bytearray()
        table = tokenizer.byte_table
        nt = len(table)
        longest = max((len(s) for s in stops), default=0)
        for i, t in enumerate(cand):
            if i + 1 <= min_tokens:
                if t == eos and not spec.ignore_eos:
                    cand[i] = t = alpha[i % na]
                if stops and 0 <= t < nt:
                    buf += table[t]
                continue
            if t == eos and not spec.ignore_eos:
                finish, matched, out_len = "eos", t, i + 1
                break
            if t in stop_ids:
                finish, matched, out_len = "token", t, i + 1
                break
            if stops and 0 <= t < nt and table[t]:
                piece = table[t]
                buf += piece
                if len(piece) == 1:
                    hit = next((s for s in stops if buf.endswith(s)), None)
                else:  # a multi-byte token may hold the stop string before its end
                    window = buf[-(len(piece) + longest - 1):]
                    hit = next((s for s in stops if s in window), None)
                if hit is not None:
                    finish, matched, out_len = "string", hit.decode("utf-8"), i + 1
                    break
    token_ids = cand[:out_len] if out_len < len(cand) else cand
    logprobs = _LazyLogprobs(x, out_len, greedy)
    text_tokens = out_len
    if finish in ("eos", "token") and not (finish == "token" and spec.keep_stop):
        text_tokens = out_len - 1
    full = tokenizer.decode(token_ids[:text_tokens] if text_tokens < out_len else token_ids)
    text_len = len(full)
    if finish == "string" and not tokenizer.byte_level:
        assert isinstance(matched, str)
        at = full.rfind(matched)  # the stop may sit inside the last token's text
        if at >= 0:
            text_len = at + (len(matched) if spec.keep_stop else 0)
    elif finish == "string" and not spec.keep_stop:
        assert isinstance(matched, str)
        text_len = max(len(full) - len(matched), 0)
    return OutputPlan(token_ids, logprobs, finish, matched, full, text_len, text_tokens,
                      tokenizer)
