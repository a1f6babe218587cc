"""``AgentClient``: agent code written against ``openai.AsyncOpenAI`` runs on a task's engine.

``client.chat.completions.create(...)`` takes the parameters of the ``openai`` package's
method and returns its types (``ChatCompletion``, or an async iterator of
``ChatCompletionChunk`` with ``stream=True``), so an agent loop works unchanged. Each call
is one traced session of the client's task, sticky-routed per conversation (the server's
prefix cache keeps the conversation), annotated with its ``conversation``, ``turn``,
``parent_turn``, ``tool_calls`` and ``drift_at``; each tool run through :meth:`AgentClient.tool`
or :attr:`AgentClient.tools` is a phase named ``tool.<name>`` of the session that asked for it,
so a timeline shows generate → tool → generate.

Retokenization drift: each turn checks that its parent turn's prompt + completion ids are a
prefix of its own prompt ids and records where they first differ (``drift_at``, -1 when the
prefix holds; ``None`` when the server returned no ids); the stop token a reply ended on is
where the template writes its end-of-turn marker, not drift (``turn_drift``).
``token_mode="exact"`` cannot drift: the client sends the conversation's exact ids itself —
the parent's prompt and completion ids plus the rendering of the new messages only (AReaL's
"concat"), through the flavour's completions endpoint — and parses tool calls from the text
as vLLM's hermes parser does.

Streaming: the call completes, then the chunks are yielded (the engine measures TTFT and
ITL from the server's own stream with ``EngineConfig(stream=True)``).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

from .._config import GenerationConfig
from .._errors import AgentClosedError, ConfigError, ToolError, TurnTimeoutError
from .._io import ModelRequest, ModelResponse, TokenSource, check_messages, check_tools, new_rid
from ..tracing import current_task_id, current_tracer, trace_phase, trace_session
from ._hermes import parse_tool_calls

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    from ..engines import InferenceEngine
    from ..tracing import Tracer

TokenMode = Literal["server", "exact"]
ToolErrors = Literal["message", "raise"]
#: ``render(messages, tools, add_generation_prompt) -> ids`` (sync or async), e.g. a
#: tokenizer's ``apply_chat_template(..., tokenize=True)``
Render = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, bool],
                  "list[int] | Awaitable[list[int]]"]

#: ``create`` parameters of the openai package that are accepted and have no effect here
_IGNORED = frozenset({"user", "metadata", "store", "parallel_tool_calls", "service_tier",
                      "extra_headers", "extra_query", "timeout", "stream_options", "model",
                      "reasoning_effort", "prompt_cache_key", "safety_identifier"})
#: ``extra_body`` keys that map onto :class:`GenerationConfig`
_EXTRA = {"top_k": "top_k", "ignore_eos": "ignore_eos", "skip_special_tokens":
          "skip_special_tokens", "stop_token_ids": "stop_token_ids"}


def check_options(*, token_mode: Any, tool_errors: Any, turn_timeout: Any, render: Any,
                  **_: Any) -> None:
    """Raise ``ConfigError`` for a bad client option (called where the options are given)."""
    if token_mode not in ("server", "exact"):
        raise ConfigError(f"token_mode must be 'server' or 'exact', got {token_mode!r}")
    if tool_errors not in ("message", "raise"):
        raise ConfigError(f"tool_errors must be 'message' or 'raise', got {tool_errors!r}")
    if turn_timeout is not None and not (isinstance(turn_timeout, int | float)
                                         and turn_timeout > 0):
        raise ConfigError(f"turn_timeout must be > 0 seconds or None, got {turn_timeout!r}")
    if render is not None and not callable(render):
        raise ConfigError(f"render must be callable, got {render!r}")


def first_divergence(prefix: list[int], ids: list[int], more: list[int] | None = None) -> int:
    """-1 when ``prefix`` (followed by ``more``) is a prefix of ``ids``, else the first
    position where they differ (two parts so a turn's check copies no list)."""
    n = len(prefix)
    if ids[:n] == prefix and (not more or ids[n:n + len(more)] == more):
        return -1
    whole = prefix + more if more else prefix
    for i, (a, b) in enumerate(zip(whole, ids, strict=False)):
        if a != b:
            return i
    return min(len(whole), len(ids))


#: finish reasons of a reply that ended on the model's own stop token (EOS, a stop token)
_STOPPED = frozenset({"stop", "tool_calls"})


def turn_drift(parent_prompt: list[int], parent_completion: list[int], finish_reason: str,
               ids: list[int]) -> int:
    """Where a turn's prompt ``ids`` leave its parent's prompt + completion (-1: nowhere).

    A reply that ended on a stop token ends in the model's end-of-turn id, and a chat
    template writes its own end-of-turn marker there (Qwen's ``<|im_end|>`` is both; the
    simulator's ``plain`` template writes a newline where the model's ``</s>`` was): a
    difference at exactly that last id is the template's marker, not drift.
    """
    at = first_divergence(parent_prompt, ids, parent_completion)
    last = len(parent_prompt) + len(parent_completion) - 1
    if at == last and parent_completion and len(ids) > last and finish_reason in _STOPPED:
        return -1
    return at


@dataclass(slots=True)
class Turn:
    """One chat call of a conversation: what was sent, what came back, its ids.

    ``parent`` is the index of the turn whose messages (plus its reply) start this turn's
    messages, -1 for a root; ``drift_at`` is where the parent's prompt + completion ids stop
    being a prefix of this prompt's ids (-1: they are; ``None``: not known, no ids).
    """

    index: int
    parent: int
    session_id: int | None
    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    message: dict[str, Any]
    finish_reason: str
    token_source: TokenSource
    drift_at: int | None
    cached_tokens: int
    ttft_s: float
    latency_s: float
    tool_s: float = 0.0
    tool_errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The turn as plain JSON values (the trajectory's per-turn record)."""
        return {"turn": self.index, "parent": self.parent, "session_id": self.session_id,
                "prompt_ids": self.prompt_ids, "completion_ids": self.completion_ids,
                "logprobs": self.logprobs, "versions": self.versions,
                "message": self.message, "finish_reason": self.finish_reason,
                "token_source": self.token_source, "drift_at": self.drift_at,
                "cached_tokens": self.cached_tokens, "tool_s": self.tool_s,
                "tool_errors": self.tool_errors}


def _message_dict(m: Any) -> dict[str, Any]:
    """A message as a dict: agents append the ``ChatCompletionMessage`` they got back."""
    if isinstance(m, dict):
        return m
    dump = getattr(m, "model_dump", None)
    if dump is None:
        raise ConfigError(f"a message must be a dict or an openai message object, got "
                          f"{type(m).__name__}")
    d: dict[str, Any] = dump(exclude_none=True)
    if d.get("role") == "assistant" and "content" not in d:
        d["content"] = None
    return d


class _Completions:
    __slots__ = ("_client",)

    def __init__(self, client: AgentClient) -> None:
        self._client = client

    async def create(self, *, messages: Any, stream: bool = False,
                     **params: Any) -> ChatCompletion | AsyncIterator[ChatCompletionChunk]:
        """``openai.AsyncOpenAI().chat.completions.create`` on the client's engine."""
        from openai.types.chat import ChatCompletion

        done = await self._client.complete_json_async(messages, **params)
        if stream:
            usage = bool((params.get("stream_options") or {}).get("include_usage"))
            return _chunks(done, usage)
        return ChatCompletion.model_validate(done)


class _Chat:
    __slots__ = ("completions",)

    def __init__(self, client: AgentClient) -> None:
        self.completions = _Completions(client)


class AgentClient:
    """An ``openai.AsyncOpenAI`` look-alike for ``chat.completions.create``, bound to a task.

    Build it inside a workflow (an :class:`~rollout_kit.agents.AgentWorkflow` builds one per
    conversation): it takes the current tracer and task from there, so calls made later from
    another asyncio task (the local endpoint's handler) still land in this task.

    Args:
        engine: the task's engine; a chat flavour (``vllm-chat``, ``sglang-chat``) for
            ``token_mode="server"``.
        gconfig: default sampling values; ``create``'s parameters override them per call.
        token_mode: ``"server"`` (the server renders the messages) or ``"exact"`` (the client
            sends the conversation's exact ids; see the module docstring).
        render: ``render(messages, tools, add_generation_prompt) -> ids`` for exact mode;
            default: the engine's render endpoint (vLLM's ``/tokenize``).
        turn_timeout: seconds one call may take; past it the call raises
            :class:`~rollout_kit.TurnTimeoutError` and the task fails with reason
            ``turn_timeout``.
        conversation: the conversation's number within its task (a session column).
        tools: functions by name; :attr:`tools` holds them traced.
        tool_errors: a tool that raises: ``"message"`` (the error becomes the tool message
            the agent reads, and is recorded on the turn) or ``"raise"``
            (:class:`~rollout_kit.ToolError`: the task fails with ``tool_error``).
        template: a label of the chat template, recorded per turn (the drift table groups by
            it).
        template_kwargs: the chat template's variables (``chat_template_kwargs``), sent with
            every call and every rendering.
    """

    def __init__(self, engine: InferenceEngine, *, gconfig: GenerationConfig | None = None,
                 token_mode: TokenMode = "server", render: Render | None = None,
                 turn_timeout: float | None = None, conversation: int = 0,
                 tools: Mapping[str, Callable[..., Any]] | None = None,
                 tool_errors: ToolErrors = "message", template: str | None = None,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        check_options(token_mode=token_mode, tool_errors=tool_errors, turn_timeout=turn_timeout,
                      render=render)
        self.engine = engine
        self.gconfig = gconfig or GenerationConfig()
        self.token_mode: TokenMode = token_mode
        self._render = render
        self.turn_timeout = turn_timeout
        self.conversation = conversation
        self.tool_errors: ToolErrors = tool_errors
        self.template = template
        self.template_kwargs = template_kwargs
        self.turns: list[Turn] = []
        self.chat = _Chat(self)
        self._key = new_rid()
        self._tracer: Tracer | None = current_tracer()
        self._task_id = current_task_id()
        self._closed = False
        #: set by :meth:`AgentEndpoint.bind`: what an agent in another process passes to
        #: its own OpenAI client (``OpenAI(base_url=client.base_url, api_key=client.api_key)``)
        self.base_url: str | None = None
        self.api_key: str | None = None
        self._glue: list[int] | None = None
        self.tools: dict[str, Callable[..., Any]] = {
            name: self._traced_tool(name, fn) for name, fn in (tools or {}).items()}

    def __repr__(self) -> str:  # never shows the api key
        return (f"AgentClient(task={self._task_id}, conversation={self.conversation}, "
                f"turns={len(self.turns)}, token_mode={self.token_mode!r})")

    @property
    def task_id(self) -> int | None:
        """The task whose sessions the calls become (``None`` outside a traced task)."""
        return self._task_id

    def completion_id(self, turn: Turn) -> str:
        """The ``id`` of ``turn``'s ``chat.completion`` as the agent received it."""
        return f"chatcmpl-{self._key}-{turn.index}"

    def close(self) -> None:
        """End the client with its task: later calls raise ``AgentClosedError``."""
        self._closed = True

    # -- a chat call ---------------------------------------------------------------------

    async def complete_json_async(self, messages: Any, **params: Any) -> dict[str, Any]:
        """One chat call: ``create``'s work, returning the ``chat.completion`` object as JSON
        values (what the local endpoint sends; ``create`` wraps it in openai's type).

        Raises:
            AgentClosedError: the task has ended. ConfigError: bad messages, tools or
                parameters. TurnTimeoutError: past ``turn_timeout``. EngineError: the server.
        """
        if self._closed:
            raise AgentClosedError(f"agent client of task {self._task_id} (conversation "
                                   f"{self.conversation}) was called after its task ended")
        if not isinstance(messages, list):
            raise ConfigError(f"messages must be a list, got {type(messages).__name__}")
        msgs = check_messages([_message_dict(m) for m in messages])
        tools = params.pop("tools", None)
        if params.pop("tool_choice", None) == "none":
            tools = None
        if tools is not None:
            tools = check_tools(list(tools))
        want_logprobs = bool(params.get("logprobs"))
        gconfig = self._gconfig(params)
        parent = self._parent(msgs)
        index = len(self.turns)
        tracer, task_id = self._tracer, self._task_id
        session = (tracer.session(task_id) if tracer is not None and task_id is not None
                   else trace_session())
        deadline = asyncio.timeout(self.turn_timeout)
        with session as sid:
            try:
                async with deadline:
                    ids, source = await self._prompt_ids(msgs, tools, parent)
                    req = (ModelRequest(rid=f"{self._key}:{index}", input_ids=ids,
                                        gconfig=gconfig) if ids is not None else
                           ModelRequest(rid=f"{self._key}:{index}", messages=msgs,
                                        tools=tools, gconfig=gconfig,
                                        chat_template_kwargs=self.template_kwargs))
                    with trace_phase("generate"):
                        resp = await self.engine.generate_async(req)
            except TimeoutError:
                if not deadline.expired():  # the engine's own timeout: an EngineError
                    raise
                self._annotate(sid, timed_out=True, conversation=self.conversation, turn=index)
                raise TurnTimeoutError(
                    f"turn {index} of conversation {self.conversation} (task {self._task_id}) "
                    f"took longer than turn_timeout={self.turn_timeout} s") from None
            turn = self._turn(index, parent, sid, msgs, resp, source)
            self.turns.append(turn)
            self._annotate(sid, conversation=self.conversation, turn=index,
                           parent_turn=parent.index if parent is not None else -1,
                           tool_calls=len(turn.message.get("tool_calls") or ()),
                           drift_at=turn.drift_at, token_mode=self.token_mode,
                           token_source=turn.token_source,
                           **({"template": self.template} if self.template else {}))
        return _completion(self._key, index, turn, resp, want_logprobs)

    def _gconfig(self, params: dict[str, Any]) -> GenerationConfig:
        changes: dict[str, Any] = {}
        for key, value in params.items():
            if value is None or key in _IGNORED:
                continue
            if key in ("max_tokens", "max_completion_tokens"):
                changes["max_new_tokens"] = value
            elif key in ("temperature", "top_p", "seed", "frequency_penalty"):
                changes[key] = value
            elif key == "stop":
                changes["stop"] = (value,) if isinstance(value, str) else tuple(value)
            elif key in ("logprobs", "top_logprobs"):
                pass  # the reply carries them when asked (the turn always records them)
            elif key == "n":
                if value != 1:
                    raise ConfigError(f"n={value}: one chat call makes one completion here; "
                                      "run n conversations (AgentWorkflow(n_samples=n))")
            elif key == "extra_body":
                for k, v in dict(value).items():
                    if k not in _EXTRA:
                        raise ConfigError(f"extra_body key {k!r} is not supported; known: "
                                          f"{sorted(_EXTRA)}")
                    changes[_EXTRA[k]] = v
            else:
                raise ConfigError(f"chat.completions.create({key}=...) is not supported by "
                                  "rollout_kit's agent client")
        return self.gconfig.new(**changes) if changes else self.gconfig

    def _parent(self, msgs: list[dict[str, Any]]) -> Turn | None:
        """The latest turn whose messages and reply start ``msgs`` (the conversation it
        continues), as AReaL finds a completion's parent."""
        for turn in reversed(self.turns):
            n = len(turn.messages)
            if len(msgs) > n + 1 and msgs[:n] == turn.messages:
                return turn
        return None

    async def _prompt_ids(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                          parent: Turn | None) -> tuple[list[int] | None, TokenSource]:
        """Exact mode: the ids to send (parent ids + the new messages rendered alone)."""
        if self.token_mode == "server":
            return None, "server"
        if parent is None:
            return await self._rendered(msgs, tools, True), "rendered"
        head = msgs[:len(parent.messages) + 1]  # the parent's messages and its reply
        done, full = await asyncio.gather(self._rendered(head, tools, False),
                                          self._rendered(msgs, tools, True))
        suffix = (full[len(done):] if full[:len(done)] == done
                  else await self._rendered(msgs[len(head):], None, True))
        ids = parent.prompt_ids + parent.completion_ids
        glue = await self._end_of_turn(tools)
        overlap = next((j for j in range(len(glue), 0, -1) if ids[-j:] == glue[:j]), 0)
        return ids + glue[overlap:] + suffix, "rendered"

    async def _end_of_turn(self, tools: list[dict[str, Any]] | None) -> list[int]:
        """The ids the template puts after an assistant message's content (its end-of-turn
        marker): the common tail of two one-message replies, rendered once per client."""
        if self._glue is None:
            user = {"role": "user", "content": "?"}
            one, a, b = await asyncio.gather(
                self._rendered([user], tools, True),
                self._rendered([user, {"role": "assistant", "content": "a"}], tools, False),
                self._rendered([user, {"role": "assistant", "content": "b"}], tools, False))
            ta, tb = a[len(one):], b[len(one):]
            n = 0
            while n < min(len(ta), len(tb)) - 1 and ta[-1 - n] == tb[-1 - n]:
                n += 1
            self._glue = ta[len(ta) - n:]
        return self._glue

    async def _rendered(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                        generation_prompt: bool) -> list[int]:
        if self._render is not None:
            ids = self._render(msgs, tools, generation_prompt)
            return list(await ids if inspect.isawaitable(ids) else ids)
        render_async = getattr(self.engine, "render_async", None)
        if render_async is None:
            raise ConfigError(f"token_mode='exact' needs render= (the engine "
                              f"{type(self.engine).__name__} cannot render messages)")
        return list(await render_async(msgs, tools, add_generation_prompt=generation_prompt,
                                       rid=self._key, template_kwargs=self.template_kwargs))

    def _turn(self, index: int, parent: Turn | None, sid: int | None,
              msgs: list[dict[str, Any]], resp: ModelResponse, source: TokenSource) -> Turn:
        if source == "rendered":  # ids were sent: the server parsed no tool calls
            content, calls = parse_tool_calls(resp.text or "", f"call-{self._key}-{index}")
            finish = "tool_calls" if calls and resp.stop_reason == "stop" else resp.stop_reason
        else:
            content, calls, finish = resp.text, resp.tool_calls, resp.stop_reason
            source = resp.token_source
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = calls
        prompt = resp.input_tokens
        drift: int | None = None
        if parent is not None and prompt and source != "none" and parent.token_source != "none":
            drift = turn_drift(parent.prompt_ids, parent.completion_ids, parent.finish_reason,
                               prompt)
        return Turn(index=index, parent=parent.index if parent is not None else -1,
                    session_id=sid, messages=msgs, prompt_ids=prompt,
                    completion_ids=resp.output_tokens, logprobs=resp.output_logprobs,
                    versions=resp.output_versions, message=message, finish_reason=finish,
                    token_source=source, drift_at=drift, cached_tokens=resp.cached_tokens,
                    ttft_s=resp.ttft, latency_s=resp.latency)

    def _annotate(self, sid: int | None, **attrs: Any) -> None:
        if self._tracer is not None and sid is not None:
            self._tracer.annotate(sid, **attrs)

    # -- tools ---------------------------------------------------------------------------

    def tool(self, name: str) -> _TurnSpan:
        """A traced tool run: ``with client.tool("search"): ...`` (or ``async with``) is a
        ``tool.<name>`` phase of the latest turn's session; its time adds to the turn's."""
        return _TurnSpan(self, f"tool.{name}", tool=True)

    def phase(self, name: str) -> _TurnSpan:
        """A span of phase ``name`` in the latest turn's session (e.g. ``"reward"``)."""
        return _TurnSpan(self, name, tool=False)

    def annotate_turn(self, turn: Turn, **attrs: Any) -> None:
        """Set attributes of ``turn``'s session (e.g. its ``reward``)."""
        self._annotate(turn.session_id, **attrs)

    def _traced_tool(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ConfigError(f"tools[{name!r}] must be callable, got {fn!r}")

        async def run(*args: Any, **kwargs: Any) -> Any:
            async with self.tool(name):
                value = fn(*args, **kwargs)
                return await value if inspect.isawaitable(value) else value

        run.__name__ = name
        return run

    async def run_tool_calls(self, tool_calls: Any) -> list[dict[str, Any]]:
        """Run a reply's tool calls with :attr:`tools` (arguments parsed from their JSON) and
        return the ``tool`` messages to append; a tool that raises gives an ``error: …``
        message (``tool_errors="message"``) or fails the task (``"raise"``)."""
        out = []
        for call in tool_calls or ():
            c = _message_dict(call)
            fn_spec = c.get("function") or {}
            name = fn_spec.get("name", "")
            fn = self.tools.get(name)
            try:
                if fn is None:
                    raise KeyError(f"unknown tool {name!r}; known: {sorted(self.tools)}")
                args = orjson.loads(fn_spec.get("arguments") or "{}")
                result = await fn(**args) if isinstance(args, dict) else await fn(args)
                text = result if isinstance(result, str) else orjson.dumps(result).decode()
            except ToolError:
                raise
            except Exception as exc:
                text = self._tool_failed(name, exc)
            out.append({"role": "tool", "tool_call_id": c.get("id", ""), "content": text})
        return out

    def _tool_failed(self, name: str, exc: BaseException) -> str:
        text = f"error: {type(exc).__name__}: {exc}"
        if self.turns:
            self.turns[-1].tool_errors.append(f"{name}: {text}")
            self._annotate(self.turns[-1].session_id, tool_error=text[:200])
        if self.tool_errors == "raise":
            raise ToolError(f"tool {name!r} raised in task {self._task_id}: {exc}") from exc
        return text


class _TurnSpan:
    """A phase in the latest turn's session (the task's when there is no turn yet); a tool's
    time adds to the turn's ``tool_s``."""

    __slots__ = ("_client", "_name", "_scope", "_t0", "_tool")

    def __init__(self, client: AgentClient, name: str, *, tool: bool) -> None:
        self._client = client
        self._name = name
        self._tool = tool
        self._scope: Any = None
        self._t0 = 0.0

    def __enter__(self) -> _TurnSpan:
        c = self._client
        sid = c.turns[-1].session_id if c.turns else None
        tracer = c._tracer
        if tracer is not None and sid is not None:
            self._scope = tracer.phase(self._name, sid)
        elif tracer is not None and c._task_id is not None:
            self._scope = tracer.session(c._task_id)  # no turn yet: a session of its own
        if self._scope is not None:
            self._scope.__enter__()
            if sid is None and self._tool:
                self._scope = _Nested(self._scope, trace_phase(self._name))
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        c = self._client
        if self._tool and c.turns:
            c.turns[-1].tool_s += time.perf_counter() - self._t0
        if self._scope is not None:
            self._scope.__exit__(et, ev, tb)
        if self._tool and isinstance(ev, Exception) and not isinstance(ev, ToolError) \
                and c.tool_errors == "raise":
            raise ToolError(f"{self._name} raised in task {c._task_id}: {ev}") from ev

    async def __aenter__(self) -> _TurnSpan:
        return self.__enter__()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)


class _Nested:
    """An outer and an inner scope entered and left as one (a session with its phase)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, outer: Any, inner: Any) -> None:
        self._outer = outer
        self._inner = inner
        inner.__enter__()

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            self._inner.__exit__(et, ev, tb)
        finally:
            self._outer.__exit__(et, ev, tb)


# -- openai types ------------------------------------------------------------------------

def _usage(turn: Turn, resp: ModelResponse) -> dict[str, Any]:
    prompt = resp.prompt_tokens if resp.prompt_tokens is not None else len(turn.prompt_ids)
    done = (resp.completion_tokens if resp.completion_tokens is not None
            else len(turn.completion_ids))
    return {"prompt_tokens": prompt, "completion_tokens": done,
            "total_tokens": prompt + done,
            "prompt_tokens_details": {"cached_tokens": turn.cached_tokens}}


def _logprobs(turn: Turn) -> dict[str, Any] | None:
    if not turn.logprobs or all(math.isnan(x) for x in turn.logprobs):
        return None
    return {"content": [{"token": f"token_id:{t}", "logprob": lp, "bytes": None,
                         "top_logprobs": []}
                        for t, lp in zip(turn.completion_ids, turn.logprobs, strict=False)]}


def _completion(key: str, index: int, turn: Turn, resp: ModelResponse,
                logprobs: bool) -> dict[str, Any]:
    """The ``chat.completion`` object as JSON values (the endpoint sends it as is)."""
    return {
        "id": f"chatcmpl-{key}-{index}", "object": "chat.completion",  # see completion_id
        "created": int(time.time()), "model": resp.server or "rollout_kit",
        "choices": [{"index": 0, "message": turn.message, "finish_reason": turn.finish_reason,
                     "logprobs": _logprobs(turn) if logprobs else None}],
        "usage": _usage(turn, resp)}


def completion_chunks(done: dict[str, Any], usage: bool) -> list[dict[str, Any]]:
    """A finished ``chat.completion`` (JSON values) as the ``chat.completion.chunk`` objects
    a streamed call yields: role and content, one per tool call, the finish reason, then
    usage when asked."""
    choice = done["choices"][0]
    msg = choice["message"]
    base = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"],
            "model": done["model"]}

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta or {},
                                     "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": msg.get("content") or ""})]
    out += [chunk({"tool_calls": [{"index": i, **call}]})
            for i, call in enumerate(msg.get("tool_calls") or ())]
    out.append(chunk(None, choice["finish_reason"]))
    if usage:
        out.append({**base, "choices": [], "usage": done["usage"]})
    return out


async def _chunks(done: dict[str, Any], usage: bool) -> AsyncIterator[ChatCompletionChunk]:
    from openai.types.chat import ChatCompletionChunk

    for c in completion_chunks(done, usage):
        yield ChatCompletionChunk.model_validate(c)
