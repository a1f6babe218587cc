"""``RemoteInfEngine``: generation against SGLang / vLLM servers, shared by both flavours.

Routing (:mod:`._routing`), sessions, error mapping and retries (:mod:`._http`), the
abort → continue loop, server control and tracing live here once; the flavour adapters
(:mod:`._flavours`) only translate bodies. :class:`RemoteSGLangEngine` and
:class:`RemotevLLMEngine` are thin facades.

Usage::

    async with RemoteSGLangEngine(["127.0.0.1:30000", "127.0.0.1:30001"]) as engine:
        resp = await engine.generate_async(ModelRequest(input_ids=[1, 2, 3]))

Partial rollouts: when a server aborts a generation (``pause_generation`` before a weight
update, ``/abort_request``), the tokens it returned are kept, the engine waits while the
servers are paused, and it resends prompt + partial output with the budget that remains of
the **original** ``max_new_tokens`` (AReaL #858 used the decremented one). Each token is
stamped with :meth:`RemoteInfEngine.get_version` as it arrives.

Streaming (``EngineConfig.stream``): ``ttft`` is the time from the call to the first token
kept; ``itl`` holds one gap per later token-carrying event within one server response (gaps
across a continuation, which include the pause, are left out).

Where a call's time goes: each call adds to its session's ``in_flight_s`` (for each answered
request, from the request written to the last byte of its answer read: the server, its HTTP
front end and the network) and ``client_own_s`` (from the call to its first request written,
plus from the last byte read to the return: the client's own work). A call that was retried
counts its failed attempts and backoff in ``client_own_s`` (``retries`` says which did); the
waits for a paused server between continuations count in neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import logging
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._config import EngineConfig, GenerationConfig
from .._errors import (
    ConfigError,
    ControllerStateError,
    EngineError,
    EngineResponseError,
    truncate,
)
from .._io import ModelRequest, ModelResponse, StopReason
from ..tracing import annotate, dump_call, increment, session_event, traceparent
from ..tracing.dumps import SegmentRecord
from ..tracing.schema import CONTINUE
from ._backend import PARSE_ERRORS, Backend, Segment, StreamParser
from ._base import InferenceEngine
from ._control import ServerControl
from ._flavours import SGLangBackend, VLLMBackend, backend_for
from ._health import ServerHealth
from ._http import (
    HttpClient,
    RetryState,
    call_with_retries,
    is_connect_failure,
    json_headers,
    parse_json,
)
from ._output import Output, output_budget, parse_addresses
from ._recording import CallRecording
from ._routing import Router, route_key
from ._scrape import ScrapeTarget
from ._server_timing import record_server_timings
from ._transport import Reply

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger("rollout_kit.engines")



def _rest_of(g: GenerationConfig, done: int) -> GenerationConfig:
    """``g`` for a continuation after ``done`` tokens: what is left of ``min_new_tokens``."""
    if not done or not g.min_new_tokens:
        return g
    return g.new(min_new_tokens=max(0, g.min_new_tokens - done))


class _Api(NamedTuple):
    """One generation endpoint of a flavour: where to send, how to read the answer."""

    endpoint: str
    parse: Callable[[Any], Segment]
    stream_parser: Callable[[], StreamParser]


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSED = "closed"


class RemoteInfEngine(InferenceEngine):
    """An engine over one or more servers of one flavour.

    Args:
        addresses: ``host:port`` (or ``http://host:port``) strings, or one comma-separated
            string.
        backend: the flavour adapter (:class:`SGLangBackend`, :class:`VLLMBackend`).
        config: routing, timeouts, retries, streaming, api key, …
        name: a short name for traces and reprs (default: flavour and addresses).
    """

    def __init__(self, addresses: str | Sequence[str], backend: Backend, *,
                 config: EngineConfig | None = None, name: str | None = None) -> None:
        if config is not None and not isinstance(config, EngineConfig):
            raise ConfigError(f"config must be an EngineConfig, got {type(config).__name__}")
        self.config = config if config is not None else EngineConfig()
        self.backend = backend
        servers = parse_addresses(addresses)
        self.name = name or f"{backend.flavour}@{','.join(servers)}"
        routing = self.config.routing
        if backend.chat_endpoint is not None and routing == "round_robin":
            routing = "sticky"  # a conversation's turns share a server's prefix cache
        self.router = Router(servers, routing)
        self._http = HttpClient(self.config)
        self._health = ServerHealth(self._http, self.router, backend, self.config)
        self._state = _State.UNOPENED
        self._open_lock = asyncio.Lock()
        self._open_failed: tuple[EngineError, float] | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self._version = 0
        self._model = self.config.model
        self._control = ServerControl(self._http, backend, self.config, self.router.servers)
        self._api = _Api(backend.generate_endpoint, backend.parse_response,
                         backend.stream_parser)
        self._chat_api = (None if backend.chat_endpoint is None else _Api(
            backend.chat_endpoint, backend.parse_chat_response, backend.chat_stream_parser))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, servers={list(self.servers)!r}, "
                f"routing={self.config.routing!r}, state={self._state.value!r})")

    @property
    def servers(self) -> tuple[str, ...]:
        """The ``host:port`` of every server, in address order."""
        return self.router.servers

    @property
    def model(self) -> str | None:
        """The model name sent to vLLM (configured or discovered at initialize)."""
        return self._model

    @property
    def connections_in_use(self) -> int:
        """HTTP connections handed out to a request and not yet back (0 when idle)."""
        return self._http.connections_in_use

    @property
    def generation_paused(self) -> bool:
        """Whether this engine has paused generation on the servers (server-side pause)."""
        return self._control.paused

    # -- lifecycle ---------------------------------------------------------------------

    async def initialize_async(self) -> None:
        """Wait (up to ``Timeouts.setup``) for the servers' health endpoints.

        Servers still unhealthy at the deadline are taken out of rotation and probed back in
        every ``health_probe_interval``. vLLM: discover the model name when not configured.

        Raises:
            NoHealthyServerError: no server became healthy; the message names each address
                and its last error.
            ControllerStateError: the engine was closed.
        """
        asked = time.monotonic()
        async with self._open_lock:
            if self._state is _State.CLOSED:
                raise ControllerStateError(f"engine {self.name} is closed; create a new one")
            if self._state is _State.OPENED:
                return
            failed = self._open_failed
            if failed is not None and failed[1] >= asked:  # it failed while this call waited
                raise copy.copy(failed[0])
            try:
                await self._health.wait_until_healthy(self.name)
            except EngineError as exc:
                self._open_failed = (exc, time.monotonic())
                raise
            if self.backend.needs_model and self._model is None:
                server = self.router.healthy[0] if self.router.healthy else self.servers[0]
                self._model = await self._control.discover_model(server)
            self._start_probe()
            self._state = _State.OPENED

    def _start_probe(self) -> None:
        self._probe_task = asyncio.get_running_loop().create_task(
            self._health.probe_forever(), name=f"rollout_kit health probe {self.name}")

    async def close_async(self) -> None:
        """Stop the health probe and close the HTTP sessions; idempotent."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        task, self._probe_task = self._probe_task, None
        if task is not None and not task.done():
            if task.get_loop() is asyncio.get_running_loop():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            elif not task.get_loop().is_closed():
                task.get_loop().call_soon_threadsafe(task.cancel)
        await self._http.close_async()

    def _is_open(self) -> bool:
        """Whether generation may go ahead without opening (restarts a probe whose loop
        ended)."""
        if self._state is not _State.OPENED:
            return False
        task = self._probe_task
        if task is None or task.done():  # its loop ended: probe from this one
            self._start_probe()
        return True

    async def _ensure_open(self) -> None:
        if self._is_open():
            return
        if self._state is _State.CLOSED:
            raise ControllerStateError(f"engine {self.name} is closed; create a new one")
        await self.initialize_async()

    # -- versions and server-side pause ----------------------------------------------------

    def get_version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ConfigError(f"version must be an int >= 0, got {version!r}")
        self._version = version

    async def pause_generation_async(self) -> None:
        """Server side: abort in-flight generations on every server and hold new ones.

        Aborted ``generate_async`` calls keep their partial output and wait until
        :meth:`continue_generation_async`. (Client-side dispatch control is ``pause()``.)
        """
        self._control.paused = True
        try:
            await self._ensure_open()
            await self._control.call_all(self.backend.pause_request)
        except BaseException:
            self._control.paused = False
            raise

    async def continue_generation_async(self) -> None:
        """Server side: resume generation on every server; waiting calls continue."""
        await self._ensure_open()
        await self._control.call_all(self.backend.resume_request)
        self._control.paused = False

    async def update_weights_from_disk_async(self, path: str, version: int) -> None:
        """Load weights from ``path`` on every server and set the engine's version.

        Raises:
            ConfigError: the flavour has no such endpoint (stock vLLM).
            EngineError: a server refused or failed.
        """
        await self._ensure_open()
        await self._control.update_weights_from_disk_async(path, version)
        self.set_version(version)

    # -- generation --------------------------------------------------------------------

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """Generate one completion, continuing across server-side aborts.

        Raises:
            ConfigError: ``n_samples != 1`` (workflows fan out), or no room for output.
            EngineError: the servers failed beyond the retry policy.
        """
        if not self._is_open():
            await self._ensure_open()
        g = req.gconfig
        if g.n_samples != 1:
            raise ConfigError(f"generate_async takes n_samples=1 (got {g.n_samples}); "
                              "send one request per sample")
        if req.messages is not None:
            return await self._chat(req)
        dumping = dump_call()
        rec = None if dumping is None else CallRecording(dumping, g)  # recorded for replay
        if rec is not None:
            g = rec.gconfig  # with its seed
        tp = traceparent() if self.config.trace_context else None
        headers = json_headers({"traceparent": tp}) if tp is not None else None
        prompt = list(req.input_ids)
        budget = output_budget(g, len(prompt)) if prompt else g.max_new_tokens
        key = route_key(req.rid, req.metadata)
        out = Output()
        state = RetryState()
        server: str | None = None
        n_cont = 0
        t0 = time.perf_counter_ns()
        try:
            while True:
                text = None if prompt else (req.text or "") + out.text
                ids = (prompt + out.tokens if out.tokens else prompt) if prompt else None
                room = budget - len(out.tokens)
                payload = self.backend.build_request(
                    input_ids=ids, text=text, gconfig=_rest_of(g, len(out.tokens)),
                    max_new_tokens=room,
                    stream=self.config.stream, model=self._model)
                seg, server = await self._segment(key, payload, self._api, server, state,
                                                  headers)
                if not prompt and seg.prompt_ids:
                    prompt = seg.prompt_ids
                    budget = output_budget(g, len(prompt))
                if rec is not None:
                    rec.segments.append(SegmentRecord(len(out.tokens), room, len(seg.tokens),
                                                      seg.finish, server, self._version))
                out.add(seg, seg.versions or [self._version] * len(seg.tokens))
                stop: StopReason | None = seg.finish
                if stop != "abort":
                    break
                if len(out.tokens) >= budget:
                    stop = "length"
                    break
                if n_cont >= self.config.max_continuations:
                    raise EngineError(
                        f"{server} aborted the generation {n_cont + 1} times in a row "
                        f"(EngineConfig.max_continuations={self.config.max_continuations})",
                        server=server, endpoint=self.backend.generate_endpoint)
                n_cont += 1
                await self._control.wait_while_paused(server)
                session_event(CONTINUE, version=self._version)  # the version it resumes under
        except EngineError as exc:
            annotate(server=exc.server or server, rid=req.rid, http_status=state.last_status)
            increment(retries=state.retries, continuations=n_cont)
            if rec is not None:
                rec.write(engine=self.name, flavour=self.backend.flavour, model=self._model,
                          req=req, prompt=prompt, out=out, stop=None,
                          server=exc.server or server, t0=t0, latency=math.nan,
                          error=truncate(str(exc)))
            raise
        resp = self._response(req, prompt, out, stop or "stop", t0, server, n_cont, state)
        if rec is not None:
            rec.write(engine=self.name, flavour=self.backend.flavour, model=self._model,
                      req=req, prompt=prompt, out=out, stop=resp.stop_reason, server=server,
                      t0=t0, latency=resp.latency)
        return resp

    async def _chat(self, req: ModelRequest) -> ModelResponse:
        """One chat completion: the server renders ``req.messages`` (no continuation after
        a server-side abort: a chat call ends with ``stop_reason="abort"``)."""
        api = self._chat_api
        if api is None:
            self.backend.build_chat_request(messages=[], tools=None, gconfig=req.gconfig,
                                            max_new_tokens=1, stream=False, model=None)
            raise AssertionError("unreachable")  # pragma: no cover (the line above raises)
        assert req.messages is not None
        g = req.gconfig
        dumping = dump_call()
        rec = None if dumping is None else CallRecording(dumping, g)
        if rec is not None:
            g = rec.gconfig
        tp = traceparent() if self.config.trace_context else None
        headers = json_headers({"traceparent": tp}) if tp is not None else None
        payload = self.backend.build_chat_request(
            messages=req.messages, tools=req.tools, gconfig=g, max_new_tokens=g.max_new_tokens,
            stream=self.config.stream, model=self._model,
            template_kwargs=req.chat_template_kwargs)
        out = Output()
        state = RetryState()
        server: str | None = None
        t0 = time.perf_counter_ns()
        try:
            seg, server = await self._segment(route_key(req.rid, req.metadata), payload, api,
                                              None, state, headers)
        except EngineError as exc:
            annotate(server=exc.server or server, rid=req.rid, http_status=state.last_status)
            increment(retries=state.retries)
            if rec is not None:
                rec.write(engine=self.name, flavour=self.backend.flavour, model=self._model,
                          req=req, prompt=[], out=out, stop=None, server=exc.server,
                          t0=t0, latency=math.nan, error=truncate(str(exc)))
            raise
        if rec is not None:
            rec.segments.append(SegmentRecord(0, g.max_new_tokens, len(seg.tokens), seg.finish,
                                              server, self._version))
        out.add(seg, seg.versions or [self._version] * len(seg.tokens))
        prompt = seg.prompt_ids or []
        resp = self._response(req, prompt, out, seg.finish or "stop", t0, server, 0, state,
                              seg)
        if rec is not None:
            rec.write(engine=self.name, flavour=self.backend.flavour, model=self._model,
                      req=req, prompt=prompt, out=out, stop=resp.stop_reason, server=server,
                      t0=t0, latency=resp.latency)
        return resp

    def _response(self, req: ModelRequest, prompt: list[int], out: Output, stop: StopReason,
                  t0: int, server: str | None, n_cont: int, state: RetryState,
                  chat: Segment | None = None) -> ModelResponse:
        now = time.perf_counter_ns()
        latency = (now - t0) / 1e9
        ttft = (out.first_token_ns - t0) / 1e9 if out.first_token_ns is not None else math.nan
        resp = ModelResponse(
            input_tokens=prompt, output_tokens=out.tokens, output_logprobs=out.logprobs,
            output_versions=out.versions, stop_reason=stop,
            text=out.text if out.has_text else None, latency=latency, ttft=ttft,
            itl=out.itl, server=server, n_continuations=n_cont, retries=state.retries,
            cached_tokens=out.cached_tokens or 0,
            cached_tokens_reported=out.cached_tokens is not None,
            server_timing=out.server_timing, start=t0 / 1e9)
        attrs: dict[str, Any] = {"server": server, "stop_reason": stop, "rid": req.rid,
                                 "cached_tokens": out.cached_tokens or 0}
        if self.config.stream:
            attrs["ttft_s"] = ttft
            attrs["itl_s"] = sum(out.itl) / len(out.itl) if out.itl else math.nan
        if self.config.record_text and resp.text is not None:
            attrs["output_text"] = resp.text
        n_prompt, n_out = len(prompt), len(out.tokens)
        if chat is not None:  # what only a chat answer has
            resp.tool_calls = chat.tool_calls
            resp.prompt_tokens = chat.prompt_tokens
            resp.completion_tokens = chat.completion_tokens
            if not chat.ids_returned:
                resp.token_source = "none"
                n_prompt, n_out = chat.prompt_tokens or 0, chat.completion_tokens or 0
            attrs["token_source"] = resp.token_source
        annotate(**attrs)
        record_server_timings(out.answers)  # the server's own view (SGLang's meta_info)
        if out.first_sent_ns:  # the client's own time and the requests' time out of its hands
            increment(prompt_tokens=n_prompt, completion_tokens=n_out,
                      continuations=n_cont, retries=state.retries,
                      client_own_s=(out.first_sent_ns - t0 + now - out.last_done_ns) / 1e9,
                      in_flight_s=out.in_flight_ns / 1e9)
        else:
            increment(prompt_tokens=n_prompt, completion_tokens=n_out,
                      continuations=n_cont, retries=state.retries)
        return resp

    async def _segment(self, key: str, payload: dict[str, Any], api: _Api, prefer: str | None,
                       state: RetryState, headers: dict[str, str] | None
                       ) -> tuple[Segment, str]:
        """One server response (with retries), and the server that gave it.

        The first attempt is written out flat (most requests end there): no closure, no
        context manager, one coroutine frame between the caller and aiohttp's.
        """
        cfg = self.config
        started = time.monotonic()
        router = self.router
        server = router.choose(key, prefer=prefer)
        timeout = min(cfg.timeouts.request, cfg.timeouts.total)
        router.started(server)
        try:
            if cfg.stream:
                seg = await self._stream_once(server, payload, api, timeout, headers)
            else:  # _send without its frame
                seg = self._parse(server, await self._post(server, payload, api, timeout,
                                                           headers), api)
        except EngineError as exc:
            router.finished(server)
            if is_connect_failure(exc):
                router.mark_down(server)
            return await self._retry(key, payload, api, prefer, state, [server], exc, started,
                                     headers)
        except BaseException:
            router.finished(server)
            raise
        router.finished(server)
        return seg, server

    async def _retry(self, key: str, payload: dict[str, Any], api: _Api, prefer: str | None,
                     state: RetryState, failed: list[str], first: EngineError,
                     started: float, headers: dict[str, str] | None) -> tuple[Segment, str]:
        """The attempts after a failed first one, under the retry policy."""
        cfg = self.config

        async def attempt(i: int, timeout: float) -> tuple[Segment, str]:
            server = self.router.choose(key, exclude=failed, prefer=prefer if i == 0 else None)
            self.router.started(server)
            try:
                return await self._send(server, payload, api, timeout, headers), server
            except EngineError as exc:
                failed.append(server)
                if is_connect_failure(exc):
                    self.router.mark_down(server)
                raise
            finally:
                self.router.finished(server)

        return await call_with_retries(
            attempt, policy=cfg.retry, request_timeout=cfg.timeouts.request,
            total_timeout=cfg.timeouts.total, state=state, what=api.endpoint,
            first_error=first, started=started)

    def _bad_body(self, server: str, exc: Exception, body: Any,
                  endpoint: str) -> EngineResponseError:
        return EngineResponseError(
            f"{server} {endpoint} answered with a body that does not follow the "
            f"{self.backend.flavour} API ({type(exc).__name__}: {truncate(str(exc), 120)}): "
            f"{truncate(body, 200)}. {self.backend.wrong_flavour_hint}",
            server=server, endpoint=endpoint)

    def _parse(self, server: str, reply: Reply, api: _Api) -> Segment:
        """A whole (non-streamed) answer as a :class:`Segment` (with its exchange's times)."""
        endpoint = api.endpoint
        body = parse_json(reply.body, server=server, endpoint=endpoint,
                          hint=self.backend.wrong_flavour_hint)
        try:
            seg = api.parse(body)
        except PARSE_ERRORS as exc:
            raise self._bad_body(server, exc, body, endpoint) from None
        seg.sent_ns, seg.done_ns = reply.sent_ns, reply.done_ns
        return seg

    def _post(self, server: str, payload: dict[str, Any], api: _Api, timeout: float,
              headers: dict[str, str] | None) -> Coroutine[Any, Any, Reply]:
        """The generate request's coroutine (not awaited here: no frame of its own)."""
        return self._http.exchange(server, "POST", api.endpoint, payload=payload,
                                   timeout=timeout, hint=self.backend.wrong_flavour_hint,
                                   headers=headers)

    async def _send(self, server: str, payload: dict[str, Any], api: _Api, timeout: float,
                    headers: dict[str, str] | None) -> Segment:
        """One attempt on ``server`` (streamed or not)."""
        if self.config.stream:
            return await self._stream_once(server, payload, api, timeout, headers)
        return self._parse(server, await self._post(server, payload, api, timeout, headers),
                           api)

    async def _stream_once(self, server: str, payload: dict[str, Any], api: _Api,
                           timeout: float, headers: dict[str, str] | None) -> Segment:
        endpoint = api.endpoint
        parser = api.stream_parser()
        tokens = parser.segment.tokens
        # each token gets the weight version current when it arrived: the tokens seen so
        # far are stamped only when the version changes, the rest at the end
        versions: list[int] = []
        version = self._version
        feed = parser.feed
        timing = [0, 0]
        async for event in self._http.stream_sse(
                server, endpoint, payload, timeout=timeout,
                hint=self.backend.wrong_flavour_hint, headers=headers, timing=timing):
            if self._version != version:
                versions.extend([version] * (len(tokens) - len(versions)))
                version = self._version
            try:
                feed(event.data, event.t_ns)
            except PARSE_ERRORS as exc:
                raise self._bad_body(server, exc, event.data, endpoint) from None
        try:
            seg = parser.result()
        except PARSE_ERRORS as exc:
            raise self._bad_body(server, exc, "<stream>", endpoint) from None
        versions.extend([version] * (len(seg.tokens) - len(versions)))
        seg.versions = versions
        seg.sent_ns, seg.done_ns = timing
        if seg.finish is None:
            raise EngineResponseError(
                f"{server} {endpoint}: the stream ended without a finish reason",
                server=server, endpoint=endpoint)
        return seg

    async def render_async(self, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]] | None = None, *,
                           add_generation_prompt: bool = True, rid: str = "",
                           template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The prompt ids the server's chat template renders ``messages`` into (vLLM:
        ``/tokenize``), from the server ``rid`` is routed to.

        Raises:
            ConfigError: the flavour has no render endpoint.
            EngineError: the server failed.
        """
        request = self.backend.render_request(
            messages, tools, add_generation_prompt=add_generation_prompt, model=self._model,
            template_kwargs=template_kwargs)
        await self._ensure_open()
        server = self.router.choose(route_key(rid, {}) if rid else "")
        body = await self._http.request_json(server, request.method, request.endpoint,
                                             payload=request.payload,
                                             timeout=self.config.timeouts.request)
        try:
            return self.backend.parse_render(body)
        except PARSE_ERRORS as exc:
            raise self._bad_body(server, exc, body, request.endpoint) from None

    # -- observability -----------------------------------------------------------------

    async def health_async(self) -> dict[str, bool]:
        """Ask every server's health endpoint now (does not change the rotation)."""
        timeout = self.config.timeouts.health
        results = await asyncio.gather(*(self._health.check(s, timeout) for s in self.servers))
        return {s: err is None for s, err in zip(self.servers, results, strict=True)}

    async def server_metrics_async(self) -> pd.DataFrame:
        """Scrape every server's ``/metrics`` into columns server, metric, labels, value.

        Raises:
            EngineError: a server does not serve metrics (SGLang needs
                ``--enable-metrics``) or is unreachable.
        """
        return await self._control.metrics_async()

    def scrape_targets(self) -> tuple[ScrapeTarget, ...]:
        """Every server's metrics endpoint, with this engine's config (api key,
        transport)."""
        return tuple(ScrapeTarget(s, self.backend.metrics_endpoint, self.config)
                     for s in self.servers)


class RemoteSGLangEngine(RemoteInfEngine):
    """An engine over SGLang servers (native ``/generate`` API).

    Args:
        addresses: ``host:port`` strings (or one comma-separated string).
        config: engine settings.
        name: a short name for traces.
    """

    def __init__(self, addresses: str | Sequence[str], *, config: EngineConfig | None = None,
                 name: str | None = None) -> None:
        super().__init__(addresses, SGLangBackend(), config=config, name=name)


class RemotevLLMEngine(RemoteInfEngine):
    """An engine over vLLM servers (OpenAI-compatible ``/v1/completions``).

    ``pause_generation`` / ``continue_generation`` need the dev-mode ``/pause`` and
    ``/resume`` (``VLLM_SERVER_DEV_MODE=1``, vLLM ≥ 0.12); ``update_weights_from_disk`` has no
    stock endpoint and raises :class:`~rollout_kit.ConfigError`.
    """

    def __init__(self, addresses: str | Sequence[str], *, config: EngineConfig | None = None,
                 name: str | None = None) -> None:
        super().__init__(addresses, VLLMBackend(), config=config, name=name)


def make_engine(flavour: str, addresses: str | Sequence[str], *,
                config: EngineConfig | None = None, name: str | None = None) -> RemoteInfEngine:
    """An engine over ``addresses`` speaking ``flavour`` (a name of the flavour registry,
    :func:`~rollout_kit.engines.flavour_names`, or an alias of one)."""
    return RemoteInfEngine(addresses, backend_for(flavour), config=config, name=name)
