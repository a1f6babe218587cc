"""Value types that flow through rollouts: requests, responses, results.

Names follow AReaL (``ModelRequest``, ``ModelResponse``) so workflows port easily.
"""

from __future__ import annotations

import itertools
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from ._config import GenerationConfig
from ._errors import ConfigError

_RID_PREFIX = uuid.uuid4().hex[:12]
_rid_counter = itertools.count()


def new_rid() -> str:
    """A unique request id: a per-process random prefix and a counter.

    Cheaper than ``uuid4()`` (no ``os.urandom`` per request) and still unique across
    processes; it never contains ``:`` (sticky routing keys on the part before the last one).
    """
    return f"{_RID_PREFIX}{next(_rid_counter):x}"

StopReason = Literal["stop", "length", "abort", "tool_calls"]
Status = Literal["pending", "accepted", "rejected", "failed", "cancelled"]
#: where a response's token ids came from: ``server`` (the server returned them),
#: ``rendered`` (the client sent ids it rendered itself, so the prompt ids are exact by
#: construction), ``none`` (the server returned none: counts only, from ``usage``)
TokenSource = Literal["server", "rendered", "none"]

#: the chat roles a message may have (OpenAI's, with ``developer``)
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` as a list of role/content dicts, or :class:`ConfigError` saying what is
    wrong with which message (checked before a request is sent, so it fails in the caller)."""
    if not isinstance(messages, list) or not messages:
        raise ConfigError(f"messages must be a non-empty list of {{'role', 'content'}} dicts, "
                          f"got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ConfigError(f"messages[{i}] must be a dict with 'role' and 'content', "
                              f"got {type(m).__name__}")
        role = m.get("role")
        if role not in CHAT_ROLES:
            raise ConfigError(f"messages[{i}] has role {role!r}; expected one of "
                              f"{sorted(CHAT_ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ConfigError(f"messages[{i}].content must be a str, a list of parts or None, "
                              f"got {type(content).__name__}")
        if content is None and role != "assistant":
            raise ConfigError(f"messages[{i}] ({role}) has no content")
    return messages


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """``tools`` in OpenAI's function-tool shape with a JSON-Schema object as parameters, or
    :class:`ConfigError` naming the tool."""
    if not isinstance(tools, list):
        raise ConfigError(f"tools must be a list of {{'type': 'function', 'function': {{...}}}}"
                          f" dicts, got {type(tools).__name__}")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise ConfigError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}, "
                              f"got {t!r:.120}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ConfigError(f"tools[{i}].function.name must be a non-empty str")
        params = fn.get("parameters", {})
        if not isinstance(params, dict) or not isinstance(params.get("type", "object"), str):
            raise ConfigError(f"tools[{i}] ({fn['name']}): parameters must be a JSON Schema "
                              f"object (a dict whose 'type' is a string), got {params!r:.120}")
    return tools


@dataclass(slots=True, kw_only=True)
class ModelRequest:
    """One generation request: a prompt as ``input_ids``, ``text`` or chat ``messages`` (with
    ``tools``), plus sampling config.

    ``messages`` go to a chat flavour's ``/v1/chat/completions`` (the server renders them,
    with ``chat_template_kwargs`` as the template's variables); ids and text to its
    completions endpoint. Requests with the same ``rid`` go to the same
    server under sticky routing (prefix cache).
    """

    rid: str = field(default_factory=new_rid)
    input_ids: list[int] = field(default_factory=list)
    text: str | None = None
    gconfig: GenerationConfig = field(default_factory=GenerationConfig)
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.messages is not None:
            check_messages(self.messages)
            if self.tools is not None:
                check_tools(self.tools)
        elif self.tools is not None:
            raise ConfigError("ModelRequest.tools needs messages (tools go to the chat API)")
        elif not self.input_ids and not self.text:
            raise ConfigError("ModelRequest needs a prompt: a non-empty input_ids, text or "
                              "messages")
        ids = self.input_ids
        if ids and (set(map(type, ids)) != {int} or min(ids) < 0):  # C-speed checks
            raise ConfigError("ModelRequest.input_ids must be non-negative ints")
        if not isinstance(self.gconfig, GenerationConfig):
            raise ConfigError(
                f"gconfig must be a GenerationConfig, got {type(self.gconfig).__name__}"
            )

    def copy(self) -> ModelRequest:
        return ModelRequest(rid=self.rid, input_ids=list(self.input_ids), text=self.text,
                            gconfig=self.gconfig, metadata=dict(self.metadata),
                            messages=self.messages, tools=self.tools,
                            chat_template_kwargs=self.chat_template_kwargs)


@dataclass(slots=True, kw_only=True)
class ModelResponse:
    """What one ``generate_async`` call produced, with its client-side timings.

    A chat call adds the parsed ``tool_calls`` (OpenAI's shape: ``id``, ``type``,
    ``function.name``, ``function.arguments`` as a JSON string) and says where its token ids
    came from (``token_source``); ``prompt_tokens`` / ``completion_tokens`` are the server's
    ``usage`` counts, which stay known when it returned no ids. ``cached_tokens`` is the
    server's prefix-cache hit count; ``cached_tokens_reported`` says whether it reported one
    (vLLM needs ``--enable-prompt-tokens-details``): 0 then means no hits, else not known.

    ``ttft`` and ``itl`` are measured from the stream when streaming is on; otherwise
    ``ttft`` is ``nan`` (never a copy of ``latency``) and ``itl`` is empty. ``latency`` and
    ``ttft`` count from ``start``, the ``time.perf_counter()`` instant the engine began
    timing the call (``nan`` for an engine that does not say): a caller that timed its own
    call from earlier finds the first token at ``start + ttft``.
    """

    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_versions: list[int] = field(default_factory=list)
    stop_reason: StopReason = "stop"
    text: str | None = None
    latency: float = math.nan
    ttft: float = math.nan
    itl: list[float] = field(default_factory=list)
    server: str | None = None
    n_continuations: int = 0
    retries: int = 0
    cached_tokens: int = 0
    cached_tokens_reported: bool = False
    server_timing: dict[str, float] = field(default_factory=dict)
    start: float = math.nan
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    token_source: TokenSource = "server"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokenizer: Any = field(default=None, repr=False, compare=False)

    @property
    def input_len(self) -> int:
        return len(self.input_tokens)

    @property
    def output_len(self) -> int:
        return len(self.output_tokens)

    # -- AReaL's ModelResponse, for its workflows run unchanged (``engine.agenerate``) ------

    def _stop_ids(self, what: str) -> set[int]:
        tok = self.tokenizer
        if tok is None:
            raise ValueError(f"tokenizer is None, cannot {what} (agenerate sets the "
                             "request's tokenizer on the response)")
        ids = {tok.eos_token_id, tok.pad_token_id}
        ids.discard(None)
        return ids

    @property
    def end_with_stop(self) -> bool:
        """Whether the last output token is the tokenizer's end-of-sequence or pad id
        (AReaL's property; needs ``tokenizer``)."""
        stop = self._stop_ids("check end_with_stop")
        return bool(self.output_tokens) and self.output_tokens[-1] in stop

    @property
    def output_tokens_without_stop(self) -> list[int]:
        """The output without its trailing end-of-sequence / pad ids, as AReaL's property
        computes it (a ``stop`` that does not end in one raises ``ValueError``, as there)."""
        stop = self._stop_ids("get output_tokens_without_stop")
        out = self.output_tokens
        if self.stop_reason in ("length", "abort") or not out:
            return out
        if out[-1] not in stop:
            raise ValueError(f"output_tokens does not end with eos or pad token, it ends with "
                             f"{out[-1]}, but stop_reason is {self.stop_reason}")
        n = len(out)
        while n and out[n - 1] in stop:
            n -= 1
        if not n:
            raise ValueError("All output_tokens are EOS or PAD tokens; cannot strip stop "
                             "tokens without removing entire output.")
        return out[:n]

    @property
    def input_images(self) -> list[Any]:
        """AReaL's vision field: always empty (vision requests are refused)."""
        return []

    @property
    def processor(self) -> None:
        """AReaL's vision processor: always ``None``."""
        return None

    @property
    def routed_experts(self) -> None:
        """AReaL's MoE routing record: never returned (asking for it is refused)."""
        return None


@dataclass(slots=True, kw_only=True)
class RolloutResult:
    """The outcome of one task: its id, terminal status, why, and the trajectory.

    ``error`` holds the exception of a failed task; ``traceback`` its formatted traceback.
    ``reason`` (also the ``reason`` column of the tasks frame) is, by status:

    - rejected: ``returned_none`` (the workflow returned ``None``) or ``should_accept_fn``.
    - cancelled: ``cancelled`` (``cancel()``) or ``closed`` (queued when the executor closed).
    - failed, on the server's side (``error`` is the engine error; its ``brief`` names the
      address): ``no_healthy_server``, ``connection_error``, ``timeout``, ``server_error``,
      ``server_overloaded``, ``bad_request``, ``http_error``, ``bad_response``,
      ``engine_error`` (see :class:`~rollout_kit.EngineError` and its subclasses).
    - failed, in the workflow: ``workflow_exception`` (any other exception).
    - failed, with Ray workers: ``worker_error`` (the worker died or could not run it) and
      ``task_id_mismatch``.
    """

    task_id: int
    status: Status
    reason: str | None = None
    error: BaseException | None = None
    traceback: str | None = None
    trajectory: Any = None
    worker: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "accepted"
