"""Configuration value types: frozen, keyword-only dataclasses with named defaults.

Derive variants with ``dataclasses.replace`` (or ``GenerationConfig.new``); never mutate.
Validation happens at construction, so a bad value fails where it was written.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Literal

from ._errors import ConfigError

RoutingPolicy = Literal["round_robin", "least_in_flight", "sticky"]


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationConfig:
    """Sampling parameters (AReaL's ``GenerationHyperparameters`` names).

    ``max_new_tokens`` bounds the completion; ``max_tokens`` bounds prompt + completion;
    ``min_new_tokens`` holds off end-of-sequence and stop strings until that many tokens
    (SGLang ``min_new_tokens``, vLLM ``min_tokens``).
    ``logprobs`` asks the server for each output token's logprob (vLLM ``logprobs: 0``,
    SGLang ``return_logprob``), which RL needs; ``False`` sends the request ``vllm bench
    serve`` and SGLang's ``bench_serving`` send (no logprobs: the server skips that work, the
    output ids still come back, the response's logprobs are NaN) — the default of
    ``rollout-kit load``.
    """

    n_samples: int = 1
    max_new_tokens: int = 256
    min_new_tokens: int = 0
    max_tokens: int = 65536
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    greedy: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    frequency_penalty: float = 0.0
    seed: int | None = None
    logprobs: bool = True

    def __post_init__(self) -> None:
        _check(_is_count(self.n_samples) and self.n_samples >= 1,
               f"n_samples must be an int >= 1, got {self.n_samples!r}")
        _check(_is_count(self.max_new_tokens) and self.max_new_tokens >= 1,
               f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        _check(_is_count(self.min_new_tokens)
               and 0 <= self.min_new_tokens <= self.max_new_tokens,
               f"min_new_tokens must be an int in [0, max_new_tokens], got "
               f"{self.min_new_tokens!r}")
        _check(_is_count(self.max_tokens) and self.max_tokens >= 1,
               f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        _check(_is_number(self.temperature) and self.temperature >= 0,
               f"temperature must be a finite number >= 0, got {self.temperature!r}")
        _check(_is_number(self.top_p) and 0 < self.top_p <= 1,
               f"top_p must be in (0, 1], got {self.top_p!r}")
        _check(_is_count(self.top_k) and (self.top_k == -1 or self.top_k >= 1),
               f"top_k must be -1 (disabled) or an int >= 1, got {self.top_k!r}")
        _check(_is_number(self.frequency_penalty) and -2 <= self.frequency_penalty <= 2,
               f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty!r}")
        _check(self.seed is None or _is_count(self.seed),
               f"seed must be an int or None, got {self.seed!r}")
        _check(isinstance(self.logprobs, bool),
               f"logprobs must be a bool, got {self.logprobs!r}")
        _check(isinstance(self.stop, str | tuple | list),
               f"stop must be a string or a sequence of strings, got {self.stop!r}")
        _check(isinstance(self.stop_token_ids, tuple | list),
               f"stop_token_ids must be a sequence of ints, got {self.stop_token_ids!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        _check(all(isinstance(s, str) and s for s in stop),
               f"stop must be non-empty strings, got {self.stop!r}")
        ids = tuple(self.stop_token_ids)
        _check(all(_is_count(i) and i >= 0 for i in ids),
               f"stop_token_ids must be non-negative ints, got {self.stop_token_ids!r}")
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "stop_token_ids", ids)

    def new(self, **changes: Any) -> GenerationConfig:
        """Return a copy with ``changes`` applied (validated again)."""
        try:
            return dataclasses.replace(self, **changes)
        except TypeError as exc:
            raise ConfigError(f"unknown GenerationConfig field: {exc}") from None

    def with_seed(self, seed: int) -> GenerationConfig:
        """A copy with ``seed`` set — cheap: only the seed is checked (the other fields were
        checked when ``self`` was made). The engine calls it once per recorded request."""
        _check(_is_count(seed), f"seed must be an int or None, got {seed!r}")
        new = object.__new__(GenerationConfig)
        for name, value in zip(_GENERATION_FIELDS, _generation_values(self), strict=True):
            object.__setattr__(new, name, value)
        object.__setattr__(new, "seed", seed)
        return new

    @property
    def effective_temperature(self) -> float:
        return 0.0 if self.greedy else self.temperature


_GENERATION_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GenerationConfig))
_generation_values = operator.attrgetter(*_GENERATION_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Seconds. ``request`` bounds one HTTP attempt; ``total`` bounds all attempts of a call.

    ``setup`` is how long an engine waits at start for servers that answer but are not
    healthy yet; ``refused`` how long a server may refuse connections at start before it
    counts as not there at all (a wrong address fails in seconds, not after ``setup``).
    """

    connect: float = 10.0
    request: float = 300.0
    total: float = 900.0
    health: float = 5.0
    setup: float = 60.0
    refused: float = 2.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            _check(_is_number(v) and v > 0, f"Timeouts.{f.name} must be > 0, got {v!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Retry connection errors, timeouts, 408/429/5xx with exponential backoff and jitter.

    Other 4xx are never retried. ``Retry-After`` (seconds) is honoured up to ``max_delay``.
    """

    max_retries: int = 3
    initial_delay: float = 0.2
    max_delay: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.25
    retry_statuses: frozenset[int] = field(
        default_factory=lambda: frozenset({408, 429, 500, 502, 503, 504})
    )

    def __post_init__(self) -> None:
        _check(_is_count(self.max_retries) and self.max_retries >= 0,
               f"max_retries must be an int >= 0, got {self.max_retries!r}")
        _check(_is_number(self.initial_delay) and self.initial_delay >= 0,
               "initial_delay must be >= 0")
        _check(_is_number(self.max_delay) and self.max_delay >= self.initial_delay,
               "max_delay must be >= initial_delay")
        _check(_is_number(self.jitter) and 0 <= self.jitter <= 1, "jitter must be in [0, 1]")

    def delay(self, attempt: int, retry_after: float | None = None,
              rand: float = 0.5) -> float:
        """Backoff before retry number ``attempt`` (0-based); ``rand`` in [0, 1)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay)
        base = min(self.initial_delay * self.multiplier**attempt, self.max_delay)
        return base * (1 - self.jitter + 2 * self.jitter * rand)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """How an engine talks to its servers.

    ``trace_context``: inside a traced task, every generate request carries a W3C
    ``traceparent`` header whose trace is the task's and whose parent span is the session's
    (:func:`rollout_kit.tracing.traceparent`), so a server exporting OpenTelemetry spans
    (vLLM ``--otlp-traces-endpoint``) makes its request span a child of the session.

    ``transport``: ``"loop"`` (default) speaks HTTP/1.1 on the event loop's own sockets, the
    fastest per request; ``"aiohttp"`` goes through aiohttp.
    ``read_bufsize`` applies to aiohttp only.
    """

    routing: RoutingPolicy = "round_robin"
    timeouts: Timeouts = field(default_factory=Timeouts)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    stream: bool = False
    transport: Literal["loop", "aiohttp"] = "loop"
    max_connections: int = 0  # 0 = unlimited (aiohttp's default of 100 throttles TTFT)
    read_bufsize: int = 4 * 1024 * 1024
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    pause_poll_interval: float = 0.05
    health_probe_interval: float = 1.0
    max_continuations: int = 64
    record_text: bool = True
    trace_context: bool = True

    def __post_init__(self) -> None:
        _check(self.routing in ("round_robin", "least_in_flight", "sticky"),
               f"routing must be round_robin, least_in_flight or sticky, got {self.routing!r}")
        _check(self.transport in ("loop", "aiohttp"),
               f"transport must be 'loop' or 'aiohttp', got {self.transport!r}")
        _check(_is_count(self.max_connections) and self.max_connections >= 0,
               "max_connections must be an int >= 0")
        _check(_is_count(self.read_bufsize) and self.read_bufsize >= 64 * 1024,
               "read_bufsize must be >= 65536")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorConfig:
    """Capacity control of a ``WorkflowExecutor``.

    Staleness control is off by default (``max_staleness=None``); when on, capacity follows
    AReaL: ``(max_staleness + version + 1) * consumer_batch_size - (accepted + running)``.
    """

    max_concurrent_rollouts: int = 256
    queue_size: int | None = None  # None = unbounded
    max_staleness: int | None = None
    consumer_batch_size: int = 1
    reward_timeout: float = 60.0

    def __post_init__(self) -> None:
        _check(_is_count(self.max_concurrent_rollouts) and self.max_concurrent_rollouts >= 1,
               "max_concurrent_rollouts must be an int >= 1")
        _check(self.queue_size is None or (_is_count(self.queue_size) and self.queue_size >= 1),
               "queue_size must be None or an int >= 1")
        _check(self.max_staleness is None
               or (_is_count(self.max_staleness) and self.max_staleness >= 0),
               "max_staleness must be None or an int >= 0")
        _check(_is_count(self.consumer_batch_size) and self.consumer_batch_size >= 1,
               "consumer_batch_size must be an int >= 1")
        _check(_is_number(self.reward_timeout) and self.reward_timeout > 0,
               "reward_timeout must be > 0")


DEFAULT_TIMEOUTS = Timeouts()
DEFAULT_RETRY_POLICY = RetryPolicy()
