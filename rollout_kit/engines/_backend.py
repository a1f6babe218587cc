"""The contract between the shared engine and a server flavour's adapter.

An adapter (:mod:`._flavours.sglang`, :mod:`._flavours.vllm`) only builds request bodies and
parses response bodies; routing, retries, sessions, pause logic and tracing live once in
:class:`~rollout_kit.RemoteInfEngine`. Parsers may raise ``KeyError``,
``TypeError``, ``ValueError`` or ``IndexError`` on a body that does not follow the API; the
engine turns those into :class:`~rollout_kit.EngineResponseError`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._config import GenerationConfig
from .._errors import ConfigError
from .._io import StopReason

#: what an adapter's parser may raise on a body that does not follow the API
PARSE_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)

_TOKEN_ID_BOUND = 2**63  # what orjson (int64) can send back in a continuation


def token_ids(values: Any) -> list[int]:
    """Token ids from a response: non-negative ints below 2**63 (``ValueError`` otherwise,
    which the caller maps to :class:`~rollout_kit.EngineResponseError`)."""
    ids = list(values)
    if len(ids) == 1:  # a streamed delta: one token (the hot case)
        v = ids[0]
        if v.__class__ is int and 0 <= v < _TOKEN_ID_BOUND:
            return ids
    if ids and (set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) >= _TOKEN_ID_BOUND):
        raise ValueError(f"token ids must be ints in [0, 2**63), got {ids[:8]!r}…")
    return ids


def logprob(value: Any) -> float:
    """A logprob from a response (``null`` → ``nan``)."""
    return math.nan if value is None else float(value)


def as_stop_reason(value: str) -> StopReason:
    """Map a server's finish reason to rollout_kit's (``repetition`` counts as ``stop``)."""
    if value in ("stop", "repetition"):
        return "stop"
    if value == "length":
        return "length"
    if value == "abort":
        return "abort"
    if value == "tool_calls":
        return "tool_calls"
    raise ValueError(f"unknown finish reason {value!r}")


def float_timings(obj: Any) -> dict[str, float]:
    """The numeric entries of a server-side timing dict (e.g. the simulator's ``sim_timing``)."""
    if not isinstance(obj, Mapping):
        return {}
    return {str(k): float(v) for k, v in obj.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def sampling_fields(g: GenerationConfig) -> dict[str, Any]:
    """The sampling fields every flavour's request sends under the same names (SGLang's
    ``sampling_params``, the OpenAI-compatible bodies with vLLM's extensions)."""
    return {
        "temperature": g.effective_temperature,
        "top_p": g.top_p,
        "top_k": g.top_k,
        "ignore_eos": g.ignore_eos,
        "skip_special_tokens": g.skip_special_tokens,
        "frequency_penalty": g.frequency_penalty,
    }


@dataclass(slots=True)
class Segment:
    """What one generation request to one server returned.

    ``chunks`` holds ``(arrival perf_counter_ns, new tokens)`` per streamed event that carried
    tokens; it is empty for non-streamed requests. ``versions`` (filled by the engine while
    streaming) is the weight version current when each token arrived.
    """

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: StopReason | None = None
    message: str | None = None
    text: str | None = None
    prompt_ids: list[int] | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # None: the server reported none
    server_timing: dict[str, float] = field(default_factory=dict)
    chunks: list[tuple[int, int]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    completion_tokens: int | None = None
    ids_returned: bool = True
    sent_ns: int = 0  # when its request was written (perf_counter_ns; 0: unknown)
    done_ns: int = 0  # when the last byte of its answer was read

    def check(self) -> Segment:
        """Validate the parsed lengths; fill missing logprobs with ``nan``."""
        if not self.logprobs and self.tokens:
            self.logprobs = [math.nan] * len(self.tokens)
        if len(self.logprobs) != len(self.tokens):
            raise ValueError(f"{len(self.tokens)} output tokens but "
                             f"{len(self.logprobs)} logprobs")
        return self


class StreamParser(ABC):
    """Accumulates the events of one streamed response into a :class:`Segment`."""

    def __init__(self) -> None:
        self.segment = Segment()

    @abstractmethod
    def feed(self, event: Any, t_ns: int) -> None:
        """Take one decoded ``data:`` event that arrived at ``t_ns``."""

    def _add(self, tokens: list[int], logprobs: list[float], t_ns: int) -> None:
        seg = self.segment
        if len(logprobs) != len(tokens):
            if logprobs:
                raise ValueError(f"an event carried {len(tokens)} tokens but "
                                 f"{len(logprobs)} logprobs")
            logprobs = [math.nan] * len(tokens)
        if tokens:
            seg.tokens.extend(tokens)
            seg.logprobs.extend(logprobs)
            seg.chunks.append((t_ns, len(tokens)))

    def result(self) -> Segment:
        """The accumulated segment (finish reason ``None`` if the stream never said)."""
        return self.segment.check()


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """A control call: method, endpoint, JSON payload, query params."""

    method: str
    endpoint: str
    payload: Any = None
    params: Mapping[str, str] | None = None


class Backend(ABC):
    """One server flavour's request/response translation and control endpoints."""

    flavour: ClassVar[str]
    #: the server software (``sglang`` / ``vllm``): what a simulator of this flavour runs
    server_family: ClassVar[str]
    generate_endpoint: ClassVar[str]
    health_endpoint: ClassVar[str] = "/health"
    metrics_endpoint: ClassVar[str] = "/metrics"
    pause_request: ClassVar[ControlRequest]
    resume_request: ClassVar[ControlRequest]
    paused_probe: ClassVar[ControlRequest | None] = None
    needs_model: ClassVar[bool] = False
    wrong_flavour_hint: ClassVar[str]
    #: the chat endpoint, for flavours that speak OpenAI's chat API (``None``: ids/text only)
    chat_endpoint: ClassVar[str | None] = None
    #: the endpoint that renders messages into prompt ids, where the server has one
    render_endpoint: ClassVar[str | None] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @abstractmethod
    def build_request(self, *, input_ids: list[int] | None, text: str | None,
                      gconfig: GenerationConfig, max_new_tokens: int, stream: bool,
                      model: str | None) -> dict[str, Any]:
        """The JSON body of one generation request (prompt as ids, else text)."""

    @abstractmethod
    def parse_response(self, body: Any) -> Segment:
        """Parse one non-streamed generation response."""

    @abstractmethod
    def stream_parser(self) -> StreamParser:
        """A fresh parser for one streamed response."""

    def build_chat_request(self, *, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]] | None, gconfig: GenerationConfig,
                           max_new_tokens: int, stream: bool, model: str | None,
                           template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON body of one chat request (only flavours with a :attr:`chat_endpoint`)."""
        del messages, tools, gconfig, max_new_tokens, stream, model, template_kwargs
        raise ConfigError(f"the {self.flavour} flavour speaks no chat API: use a chat flavour "
                          f"(e.g. servers={{'{self.flavour}-chat': [...]}})")

    def parse_chat_response(self, body: Any) -> Segment:
        """Parse one non-streamed chat response."""
        raise NotImplementedError(f"{self.flavour} has no chat API")

    def chat_stream_parser(self) -> StreamParser:
        """A fresh parser for one streamed chat response."""
        raise NotImplementedError(f"{self.flavour} has no chat API")

    def render_request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       *, add_generation_prompt: bool, model: str | None,
                       template_kwargs: dict[str, Any] | None = None) -> ControlRequest:
        """The request that renders ``messages`` into the prompt ids the chat API would send."""
        del messages, tools, add_generation_prompt, model, template_kwargs
        raise ConfigError(f"the {self.flavour} flavour has no endpoint that renders messages "
                          "into token ids; pass a render function (e.g. a tokenizer's "
                          "apply_chat_template)")

    def parse_render(self, body: Any) -> list[int]:
        """The prompt ids of a :meth:`render_request` answer."""
        return token_ids(body["tokens"])

    def parse_paused(self, body: Any) -> bool:
        """Read the answer of :attr:`paused_probe`."""
        return bool(isinstance(body, Mapping) and body.get("is_paused"))

    def weights_from_disk_request(self, path: str, version: int) -> ControlRequest:
        """The request that loads new weights from ``path`` (not every flavour has one)."""
        del path, version
        raise ConfigError(f"{self.flavour} has no stock 'update weights from disk' endpoint")

    def check_weights_answer(self, body: Any) -> str | None:
        """An error message when a weight-update answer reports failure, else ``None``."""
        if isinstance(body, Mapping) and body.get("success") is False:
            return str(body.get("message", "success: false"))
        return None

    def model_from_models(self, body: Any) -> str:
        """The first model id of a ``GET /v1/models`` answer."""
        return str(body["data"][0]["id"])
