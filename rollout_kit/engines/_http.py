"""The HTTP layer of the engines: JSON and server-sent events over a transport.

It owns

* :class:`HttpClient`, which is given a :class:`~._transport.Transport` (the pooled
  connections, per event loop) and adds JSON bodies, the API key, status errors and SSE;
* :func:`make_status_error`, the one status → class factory (the transports map their
  own connection failures to :mod:`rollout_kit._errors` classes);
* :func:`call_with_retries`, retries as policy (:class:`~rollout_kit.RetryPolicy`):
  exponential backoff with jitter, ``Retry-After``, a total deadline;
* an SSE reader that stamps each event with ``perf_counter_ns`` when it arrives.

Error messages name the server, the endpoint, the status and a *truncated* body; they never
contain a whole prompt or the API key.

Usage::

    client = HttpClient(EngineConfig())
    body = await client.request_json("127.0.0.1:30000", "GET", "/health", timeout=5)
    await client.close_async()
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlencode

import orjson

from .._config import EngineConfig, RetryPolicy
from .._errors import (
    EngineBadRequestError,
    EngineConnectionError,
    EngineError,
    EngineOverloadedError,
    EngineResponseError,
    EngineServerError,
    EngineStatusError,
    EngineUnreachableError,
    truncate,
)
from ._transport import Reply, Transport, make_transport

logger = logging.getLogger("rollout_kit.engines")

T = TypeVar("T")

_JSON_HEADERS = {"Content-Type": "application/json"}
_DONE = b"[DONE]"


def server_name(address: str) -> str:
    """``host:port`` of an address given as ``host:port`` or ``http://host:port[/]``."""
    a = address.strip()
    for prefix in ("http://", "https://"):
        if a.startswith(prefix):
            a = a[len(prefix):]
    return a.rstrip("/")


# -- error mapping --------------------------------------------------------------------


def error_message_of(body: bytes | str) -> str:
    """The human message inside an error body, for both servers' nested and flat shapes.

    ``{"error": {"message": ...}}`` (vLLM ≥ 0.10.1, SGLang ValueError), flat
    ``{"object": "error", "message": ...}``, ``{"error": "<str>"}`` (SGLang 0.5.23 contract
    gate, vLLM RL routes), FastAPI ``{"detail": ...}``, or the raw text.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.strip()
    if isinstance(obj, dict):
        inner = obj.get("error", obj)
        if isinstance(inner, str):
            return inner
        if isinstance(inner, dict):
            for key in ("message", "detail"):
                if isinstance(inner.get(key), str):
                    return str(inner[key])
        if "detail" in obj:
            return str(obj["detail"])
    return text.strip()


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    raw = headers.get("retry-after", headers.get("Retry-After"))  # a transport's: lower case
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None  # an HTTP date: not worth parsing for a local server
    return value if value >= 0 else None


def make_status_error(status: int, body: bytes | str, *, server: str, endpoint: str,
                      headers: Mapping[str, str] | None = None,
                      hint: str = "") -> EngineStatusError:
    """The one status → class factory.

    429/503 → :class:`EngineOverloadedError` (with ``retry_after`` from ``Retry-After``),
    5xx and 408 → :class:`EngineServerError`, other 4xx → :class:`EngineBadRequestError`.
    The message names server, endpoint and status and quotes a truncated body.
    """
    cls: type[EngineStatusError]
    if status in (429, 503):
        cls = EngineOverloadedError
    elif status >= 500 or status == 408:
        cls = EngineServerError
    else:
        cls = EngineBadRequestError
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    detail = truncate(error_message_of(text))
    message = f"{server} {endpoint} answered HTTP {status}: {detail}"
    if hint:
        message = f"{message}. {hint}"
    return cls(message, status=status, body=text, server=server, endpoint=endpoint,
               retry_after=_retry_after(headers))


def is_connect_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means the server could not be reached at all (refused, no route)."""
    return isinstance(exc, EngineUnreachableError)


def parse_json(body: bytes, *, server: str, endpoint: str, hint: str = "") -> Any:
    """Decode a 2xx JSON body or raise :class:`EngineResponseError` quoting a truncated body."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace")
        looks_html = text.lstrip()[:15].lower().startswith(("<!doctype", "<html"))
        what = "an HTML page" if looks_html else "a body that is not JSON"
        message = f"{server} {endpoint} returned {what}: {truncate(text, 200)!r}"
        if hint:
            message = f"{message}. {hint}"
        raise EngineResponseError(message, server=server, endpoint=endpoint) from None


# -- retries ----------------------------------------------------------------------------


@dataclass(slots=True)
class RetryState:
    """What :func:`call_with_retries` did: retries made and the last failure's status."""

    retries: int = 0
    last_status: int | None = None


def is_retryable(exc: BaseException, policy: RetryPolicy) -> bool:
    """Connection errors, timeouts, malformed 2xx bodies and ``policy.retry_statuses``."""
    if isinstance(exc, EngineStatusError):
        return exc.status in policy.retry_statuses
    return isinstance(exc, EngineConnectionError | EngineResponseError)


async def call_with_retries(attempt: Callable[[int, float], Awaitable[T]], *,
                            policy: RetryPolicy, request_timeout: float, total_timeout: float,
                            state: RetryState | None = None, what: str = "request",
                            first_error: EngineError | None = None,
                            started: float | None = None) -> T:
    """Run ``attempt(i, timeout)`` until it succeeds, retrying per ``policy``.

    Args:
        attempt: one try; gets the 0-based attempt number and its timeout in seconds.
        policy: which errors to retry and how long to back off.
        request_timeout: the bound of one attempt.
        total_timeout: the bound of all attempts and backoffs together.
        state: filled with the number of retries and the last error status.
        what: a name for log lines.
        first_error: the error of an attempt 0 the caller already made itself (its fast
            path); the loop goes on from there.
        started: ``time.monotonic()`` when that first attempt began.

    Raises:
        EngineError: the last error, when it is not retryable or the budget is spent.
    """
    st = state if state is not None else RetryState()
    deadline = (time.monotonic() if started is None else started) + total_timeout
    pending = first_error
    while True:
        remaining = deadline - time.monotonic()
        try:
            if pending is not None:
                exc, pending = pending, None
                raise exc
            return await attempt(st.retries, min(request_timeout, max(remaining, 1e-3)))
        except EngineError as exc:
            if isinstance(exc, EngineStatusError):
                st.last_status = exc.status
            retry_after = exc.retry_after if isinstance(exc, EngineStatusError) else None
            delay = policy.delay(st.retries, retry_after, random.random())
            remaining = deadline - time.monotonic()
            if (not is_retryable(exc, policy) or st.retries >= policy.max_retries
                    or delay >= remaining):
                raise
            logger.debug("retrying %s in %.3fs after %s (retry %d/%d)", what, delay,
                         type(exc).__name__, st.retries + 1, policy.max_retries)
            await asyncio.sleep(delay)
            st.retries += 1


# -- the client -------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class SSEEvent:
    """One ``data:`` event of a server-sent-event stream and when it arrived."""

    t_ns: int
    data: Any


class HttpClient:
    """JSON requests and SSE streams over a :class:`~._transport.Transport`.

    Args:
        config: the engine's config (transport, connection limit, timeouts, api key).
        transport: the transport to use (default: the one ``config.transport`` names).
    """

    def __init__(self, config: EngineConfig, transport: Transport | None = None) -> None:
        self._config = config
        self.transport = transport if transport is not None else make_transport(config)
        auth = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._auth = auth
        self._json = {**_JSON_HEADERS, **auth}

    def __repr__(self) -> str:
        return f"HttpClient({self.transport!r})"

    @property
    def connections_in_use(self) -> int:
        """Connections handed out to a request and not yet back."""
        return self.transport.connections_in_use

    async def close_async(self) -> None:
        """Close the transport's connections (those of other, still-open loops there)."""
        await self.transport.close_async()

    def _headers(self, headers: Mapping[str, str] | None, has_body: bool) -> Mapping[str, str]:
        if headers is None:
            return self._json if has_body else self._auth
        return {**headers, **self._auth} if self._auth else headers

    async def request(self, server: str, method: str, endpoint: str, *,
                      payload: Any = None, params: Mapping[str, str] | None = None,
                      timeout: float, hint: str = "",
                      headers: Mapping[str, str] | None = None) -> bytes:
        """One attempt; returns the raw 2xx body or raises a mapped :class:`EngineError`.

        ``headers`` are sent as given (``json_headers`` adds the JSON content type); by
        default a request with a payload says it is JSON.
        """
        return (await self.exchange(server, method, endpoint, payload=payload, params=params,
                                    timeout=timeout, hint=hint, headers=headers)).body

    async def exchange(self, server: str, method: str, endpoint: str, *,
                       payload: Any = None, params: Mapping[str, str] | None = None,
                       timeout: float, hint: str = "",
                       headers: Mapping[str, str] | None = None) -> Reply:
        """:meth:`request`, returning the whole 2xx :class:`~._transport.Reply` (its body and
        when the request was written and the last byte read)."""
        data = orjson.dumps(payload) if payload is not None else None
        target = f"{endpoint}?{urlencode(params)}" if params else endpoint
        reply = await self.transport.request(method, server, target, body=data,
                                             headers=self._headers(headers, data is not None),
                                             timeout=timeout)
        if reply.status >= 400:
            raise make_status_error(reply.status, reply.body, server=server,
                                    endpoint=endpoint, headers=reply.headers,
                                    hint=hint if reply.status in (404, 405) else "")
        return reply

    async def request_json(self, server: str, method: str, endpoint: str, *,
                           payload: Any = None, params: Mapping[str, str] | None = None,
                           timeout: float, hint: str = "") -> Any:
        """Like :meth:`request` and decode the body as JSON (empty body → ``None``)."""
        body = await self.request(server, method, endpoint, payload=payload, params=params,
                                  timeout=timeout, hint=hint)
        if not body.strip():
            return None
        return parse_json(body, server=server, endpoint=endpoint, hint=hint)

    async def stream_sse(self, server: str, endpoint: str, payload: Any, *, timeout: float,
                         hint: str = "", headers: Mapping[str, str] | None = None,
                         timing: list[int] | None = None) -> AsyncIterator[SSEEvent]:
        """POST ``payload`` and yield each decoded ``data:`` event with its arrival time.

        Ends at ``data: [DONE]``. A stream that closes before ``[DONE]`` raises
        :class:`EngineResponseError` (retryable); an ``{"error": ...}`` event raises the
        matching :class:`EngineStatusError`. ``timing``, when given, is set to
        ``[sent_ns, done_ns]`` once the stream ended: when the request was written and the
        last byte read.
        """
        async with self.transport.stream("POST", server, endpoint, body=orjson.dumps(payload),
                                         headers=self._headers(headers, True),
                                         timeout=timeout) as resp:
            if resp.status >= 400:
                body = await resp.read()
                raise make_status_error(resp.status, body, server=server,
                                        endpoint=endpoint, headers=resp.headers,
                                        hint=hint if resp.status in (404, 405) else "")
            # whole reads, split here: one step per network read, not two per event
            tail = b""
            ended = False
            chunks = resp.chunks()
            async for chunk in chunks:
                t_ns = time.perf_counter_ns()
                lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
                tail = lines.pop()
                for line in lines:
                    if not line:
                        continue  # the blank line that ends each event
                    event = _sse_event(line, t_ns, server, endpoint, hint)
                    if event is _END:
                        ended = True
                        break
                    if event is not None:
                        yield event
                if ended:
                    break
            else:
                if tail:  # a last line without its newline
                    event = _sse_event(tail, time.perf_counter_ns(), server, endpoint, hint)
                    ended = event is _END
                    if event is not None and not ended:
                        yield event
            if ended:
                async for _ in chunks:
                    pass  # the rest of the body (its last chunk): the connection stays open
                if timing is not None:
                    timing[:] = (resp.sent_ns, resp.done_ns)
                return
        raise EngineResponseError(
            f"{server} {endpoint}: the event stream ended before 'data: [DONE]'",
            server=server, endpoint=endpoint)


def json_headers(extra: Mapping[str, str]) -> dict[str, str]:
    """The JSON content type plus ``extra`` (e.g. a ``traceparent``), for one call."""
    return {**_JSON_HEADERS, **extra}


_END = SSEEvent(0, None)  # sentinel: ``data: [DONE]``


def _sse_event(line: bytes, t_ns: int, server: str, endpoint: str,
               hint: str) -> SSEEvent | None:
    """The event of one SSE line, ``_END`` for ``[DONE]``, ``None`` for other lines."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == _DONE:
        return _END
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        _raise_bad_event(data, server, endpoint, hint)
    if isinstance(obj, dict) and "error" in obj:
        _raise_stream_error(obj, data, server, endpoint)
    return SSEEvent(t_ns, obj)


def _raise_bad_event(data: bytes, server: str, endpoint: str, hint: str) -> NoReturn:
    message = (f"{server} {endpoint} sent a stream event that is not JSON: "
               f"{truncate(data.decode('utf-8', 'replace'), 200)!r}")
    raise EngineResponseError(f"{message}. {hint}" if hint else message,
                              server=server, endpoint=endpoint)


def _raise_stream_error(obj: dict[str, Any], raw: bytes, server: str,
                        endpoint: str) -> NoReturn:
    err = obj["error"]
    status = 400
    if isinstance(err, dict):
        code = err.get("code")
        if isinstance(code, int) and 400 <= code <= 599:
            status = code
        elif err.get("retryable") is True:
            status = 500
    raise make_status_error(status, raw, server=server, endpoint=endpoint)
