"""A conversation as load: :class:`Conversation` (its turns) and :class:`ThinkTime`.

A conversation is what one simulated user does: a shared ``system`` prompt (optional), then
turns. Each :class:`ConversationTurn` is one chat call: the message appended before it (the
user's question, or a tool's result in an agent trace), how many tokens the reply asks for
(``output_len``), and the user's think time before it — counted from the previous answer's
last token (the first turn is sent when the conversation arrives). The reply the server gives
is appended to the history, so turn ``k`` resends everything before it and a prefix cache
can serve that part (``usage.prompt_tokens_details.cached_tokens``).

:class:`ThinkTime` is a distribution of think times in seconds: ``"2"`` or ``"constant:2"``,
``"uniform:1,3"``, ``"exponential:2"`` (mean 2 s), ``"lognormal:2,0.5"`` (mean 2 s,
sigma 0.5), or the object form of vLLM's multi-turn benchmark
(``{"distribution": "uniform", "min": 1, "max": 3}``). A negative value is refused
(:class:`~rollout_kit.DatasetError`); :func:`with_think_time` draws it into every
turn but the first of each conversation (seeded).

Prompt text of a given length in tokens: :func:`text_of_length` (the simulator's byte
tokenizer by default: one ASCII character per token).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..._errors import ConfigError
from .._tokenize import ByteCounter, TextTokenizer
from .common import fail, is_int, tokenizer_of

#: roles of the message a turn appends (a user's question, a tool's result)
TURN_ROLES = ("user", "tool")

_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationTurn:
    """One chat call of a conversation.

    Attributes:
        content: the text of the message appended before the call.
        role: ``"user"`` (a question) or ``"tool"`` (a tool's result, in an agent trace).
        output_len: tokens the reply asks for (``max_tokens``); ``None``: the server's default.
        think_s: seconds after the previous answer before this turn is sent (the first
            turn's is unused: it is sent when the conversation arrives).
        input_len: the message's length in tokens, when known.

    Raises:
        ConfigError: an unknown role, an empty content, a bad length or think time.
    """

    content: str
    role: str = "user"
    output_len: int | None = None
    think_s: float = 0.0
    input_len: int | None = None

    def __post_init__(self) -> None:
        if self.role not in TURN_ROLES:
            raise ConfigError(f"a turn's role must be one of {', '.join(TURN_ROLES)}, got "
                              f"{self.role!r}")
        if not isinstance(self.content, str) or not self.content:
            raise ConfigError("a turn needs a non-empty content string")
        for name, v in (("output_len", self.output_len), ("input_len", self.input_len)):
            if v is not None and (not is_int(v) or v < 1):
                raise ConfigError(f"ConversationTurn.{name} must be an int >= 1, got {v!r}")
        t = self.think_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not (
                math.isfinite(t) and t >= 0):
            raise ConfigError(f"ConversationTurn.think_s must be a finite number >= 0, got {t!r}")

    def message(self, index: int) -> dict[str, Any]:
        """The chat message this turn appends (a tool result gets a call id of its own)."""
        if self.role == "tool":
            return {"role": "tool", "tool_call_id": f"call-{index}", "content": self.content}
        return {"role": "user", "content": self.content}


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversation:
    """What one simulated user sends: an optional system prompt, then turns.

    Attributes:
        turns: the chat calls, in order (at least one; the first a user turn).
        system: the system prompt sent first in every turn's messages, or ``None``.
        ignore_eos: ask for exactly each turn's ``output_len`` tokens.
        timestamp: when the conversation starts, seconds from the run's start (traces).
        id: the conversation's id in its file, when it has one.

    Raises:
        ConfigError: no turns, a first turn that is not a user's.
    """

    turns: tuple[ConversationTurn, ...]
    system: str | None = None
    ignore_eos: bool = False
    timestamp: float | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.turns, tuple) or not self.turns or not all(
                isinstance(t, ConversationTurn) for t in self.turns):
            raise ConfigError("a Conversation needs a non-empty tuple of ConversationTurn")
        if self.turns[0].role != "user":
            raise ConfigError(f"a conversation starts with a user turn, got a "
                              f"{self.turns[0].role!r} turn first")
        if self.system is not None and (not isinstance(self.system, str) or not self.system):
            raise ConfigError("Conversation.system must be a non-empty string or None")

    @property
    def num_turns(self) -> int:
        """How many chat calls the conversation makes."""
        return len(self.turns)


# -- think time ---------------------------------------------------------------------------

_KINDS = {"constant": ("value",), "uniform": ("min", "max"), "exponential": ("mean",),
          "lognormal": ("mean", "sigma")}


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """A distribution of think times, seconds (see the module docstring for the forms).

    Raises:
        DatasetError: an unknown kind, a missing, non-finite or negative value.
    """

    kind: str = "constant"
    params: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        names = _KINDS.get(self.kind)
        if names is None:
            raise fail(f"think time: unknown distribution {self.kind!r} (known: "
                       f"{', '.join(_KINDS)})")
        if len(self.params) != len(names):
            raise fail(f"think time {self.kind} takes {', '.join(names)}; got "
                       f"{len(self.params)} value(s)")
        for name, v in zip(names, self.params, strict=True):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise fail(f"think time {self.kind}: {name} must be a finite number, got {v!r}")
            if v < 0:
                raise fail(f"think time {self.kind}: {name} is negative ({v:g}); think times "
                           "are seconds >= 0")
        if self.kind == "uniform" and self.params[0] > self.params[1]:
            raise fail(f"think time uniform: min ({self.params[0]:g}) > max "
                       f"({self.params[1]:g})")

    @classmethod
    def parse(cls, spec: ThinkTime | str | float | Mapping[str, Any] | None) -> ThinkTime:
        """A think time from ``"2"``, ``"uniform:1,3"``, a number or a mapping.

        Raises:
            DatasetError: a malformed or negative specification.
        """
        if spec is None:
            return cls()
        if isinstance(spec, ThinkTime):
            return spec
        if isinstance(spec, int | float) and not isinstance(spec, bool):
            return cls("constant", (float(spec),))
        if isinstance(spec, Mapping):
            kind = str(spec.get("distribution", "constant"))
            names = _KINDS.get(kind)
            if names is None:
                raise fail(f"think time: unknown distribution {kind!r} (known: "
                           f"{', '.join(_KINDS)})")
            missing = [n for n in names if n not in spec]
            if missing:
                raise fail(f"think time {kind} needs {', '.join(missing)}")
            return cls(kind, tuple(_number(spec[n], kind) for n in names))
        if not isinstance(spec, str):
            raise fail(f"think time must be a number of seconds, a 'kind:values' string or "
                       f"a mapping, got {type(spec).__name__}")
        kind, sep, rest = spec.strip().partition(":")
        if not sep:
            kind, rest = "constant", spec
        values = tuple(_number(v, kind) for v in rest.split(",") if v.strip())
        return cls(kind.strip().lower(), values)

    @property
    def mean(self) -> float:
        """The distribution's mean, seconds."""
        p = self.params
        return p[0] if self.kind != "uniform" else (p[0] + p[1]) / 2

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` think times (seconds, float64, all >= 0)."""
        p = self.params
        if self.kind == "constant":
            return np.full(size, p[0])
        if self.kind == "uniform":
            return rng.uniform(p[0], p[1], size=size)
        if self.kind == "exponential":
            return rng.exponential(p[0], size=size) if p[0] > 0 else np.zeros(size)
        mean, sigma = p
        if mean <= 0:
            return np.zeros(size)
        mu = math.log(mean) - sigma * sigma / 2  # so that the mean is ``mean``
        return rng.lognormal(mu, sigma, size=size)

    def __str__(self) -> str:
        return f"{self.kind}:{','.join(f'{v:g}' for v in self.params)}"


def _number(value: object, kind: str) -> float:
    if isinstance(value, bool):
        raise fail(f"think time {kind}: {value!r} is not a number")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise fail(f"think time {kind}: {value!r} is not a number") from None


def with_think_time(conversations: Sequence[Conversation],
                    think_time: ThinkTime | str | float | Mapping[str, Any],
                    seed: int = 0) -> list[Conversation]:
    """The conversations with every turn's think time drawn from ``think_time`` (seeded by
    ``seed`` and the conversation's position; the first turns keep 0).

    Raises:
        DatasetError: a malformed or negative think time.
    """
    dist = ThinkTime.parse(think_time)
    out = []
    for i, conv in enumerate(conversations):
        rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x7417, i])
        draws = dist.sample(rng, conv.num_turns)
        turns = tuple(replace(t, think_s=float(draws[k]) if k else 0.0)
                      for k, t in enumerate(conv.turns))
        out.append(replace(conv, turns=turns))
    return out


# -- text of a length ---------------------------------------------------------------------

def text_of_length(n: int, rng: np.random.Generator,
                   tokenizer: TextTokenizer | str | Path | object | None = None) -> str:
    """Random lowercase words of ``n`` tokens: ``n`` characters with the byte tokenizer (the
    default); with another tokenizer, words encoded and cut to ``n`` ids, decoded (so the
    server's count is close to ``n``, exact where decode and encode agree)."""
    tok = None if tokenizer is None else tokenizer_of(tokenizer)
    if tok is None or isinstance(tok, ByteCounter):
        chars = _LETTERS[rng.integers(0, len(_LETTERS), size=n)]
        # a space every 4..9 characters: words, never at either end
        gaps = np.cumsum(rng.integers(5, 11, size=n // 5 + 2))
        gaps = gaps[(gaps > 0) & (gaps < n - 1)]
        chars[gaps] = ord(" ")
        return chars.tobytes().decode("ascii")
    words = text_of_length(6 * n + 16, rng)
    ids = [i for i in tok.encode(words) if i not in tok.special_ids][:n]
    return tok.decode(ids).strip() or "a"
