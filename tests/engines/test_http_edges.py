"""rollout_kit.engines._http at the edges: the retry policy at each limit (on a fake clock, no
timing bounds), Retry-After and its cap, the error mapping, and the HTTP client against a
tiny aiohttp server on 127.0.0.1 (chunked SSE, early ends, headers)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rollout_kit import (
    EngineBadRequestError,
    EngineConfig,
    EngineConnectionError,
    EngineError,
    EngineOverloadedError,
    EngineResponseError,
    EngineServerError,
    EngineStatusError,
    EngineTimeoutError,
    EngineUnreachableError,
    NoHealthyServerError,
    RetryPolicy,
    Timeouts,
)
from rollout_kit.engines import _http as http
from rollout_kit.engines._http import (
    HttpClient,
    RetryState,
    SSEEvent,
    call_with_retries,
    error_message_of,
    is_connect_failure,
    is_retryable,
    json_headers,
    make_status_error,
    parse_json,
    server_name,
)
from rollout_kit.engines._transport import AiohttpTransport
from rollout_kit.engines._transport.aiohttp_transport import aiohttp_error as engine_error
from rollout_kit.engines._transport.base import base_url

from .conftest import Proxy, free_port

# -- a fake clock for the retry loop -------------------------------------------------------


class FakeClock:
    """``time.monotonic`` that only moves when the retry loop sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(http, "time", Proxy(time, monotonic=c.monotonic))
    monkeypatch.setattr(http, "asyncio", Proxy(asyncio, sleep=c.sleep))
    monkeypatch.setattr(http, "random", Proxy(http.random, random=lambda: 0.5))
    return c


def status(code: int, retry_after: float | None = None) -> EngineStatusError:
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return make_status_error(code, b"x", server="s:1", endpoint="/e", headers=headers)


def failing(errors: list[BaseException], result: str = "ok"
            ) -> tuple[Callable[[int, float], Awaitable[str]], list[tuple[int, float]]]:
    """An attempt that raises ``errors`` in turn, then returns ``result``; and its calls."""
    calls: list[tuple[int, float]] = []

    async def attempt(i: int, timeout: float) -> str:
        calls.append((i, timeout))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return attempt, calls


NO_JITTER = RetryPolicy(max_retries=3, initial_delay=0.1, max_delay=1.0, multiplier=2.0,
                        jitter=0.0)

# -- RetryPolicy.delay, directly ---------------------------------------------------------


def test_retry_after_is_capped_at_the_max_delay() -> None:
    p = RetryPolicy(initial_delay=0.2, max_delay=5.0, jitter=0.25)
    assert p.delay(0, 100.0) == 5.0  # capped
    assert p.delay(0, 5.0) == 5.0 and p.delay(0, 2.0) == 2.0 and p.delay(2, 0.0) == 0.0
    assert p.delay(0, 2.0, rand=0.99) == 2.0  # no jitter on a server's own wait
    assert p.delay(0, -1.0) == pytest.approx(0.2)  # a negative Retry-After is ignored


def test_backoff_doubles_up_to_the_max_with_jitter_around_it() -> None:
    p = RetryPolicy(initial_delay=0.2, max_delay=5.0, multiplier=2.0, jitter=0.25)
    assert p.delay(0) == pytest.approx(0.2)  # rand 0.5: the middle
    assert p.delay(0, rand=0.0) == pytest.approx(0.15)
    assert p.delay(0, rand=1.0) == pytest.approx(0.25)
    assert [p.delay(i) for i in range(6)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0])
    assert p.delay(9, rand=1.0) == pytest.approx(6.25)  # the cap, then the jitter
    p3 = RetryPolicy(initial_delay=0.1, max_delay=9.0, multiplier=3.0, jitter=0.0)
    assert p3.delay(2, rand=0.9) == pytest.approx(0.9)


# -- call_with_retries at its limits (fake clock: no sleeping, no timing bounds) ----------


async def test_retry_after_cap_holds_on_the_engine_path(clock: FakeClock) -> None:
    policy = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.5)
    attempt, calls = failing([status(503, retry_after=100)])
    state = RetryState()
    # the server asks for 100 s, the budget is 1 s: the cap (0.5 s) still fits
    assert await call_with_retries(attempt, policy=policy, request_timeout=5,
                                   total_timeout=1.0, state=state) == "ok"
    assert clock.sleeps == [0.5] and state.retries == 1 and state.last_status == 503
    assert [i for i, _ in calls] == [0, 1]


async def test_retry_after_below_the_cap_is_honoured(clock: FakeClock) -> None:
    attempt, _ = failing([status(429, retry_after=0.25), status(503)])
    await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5, total_timeout=10)
    assert clock.sleeps == pytest.approx([0.25, 0.2])  # then the backoff of retry 1


@pytest.mark.parametrize("max_retries", [0, 1, 3])
async def test_max_retries_at_the_edge_and_one_past(clock: FakeClock, max_retries: int) -> None:
    policy = RetryPolicy(max_retries=max_retries, initial_delay=0.1, max_delay=1.0, jitter=0)
    errors: list[BaseException] = [status(502) for _ in range(max_retries)]
    attempt, calls = failing(errors)
    state = RetryState()
    assert await call_with_retries(attempt, policy=policy, request_timeout=5,
                                   total_timeout=100, state=state) == "ok"  # the last retry
    assert state.retries == max_retries and [i for i, _ in calls] == list(range(max_retries + 1))
    assert clock.sleeps == pytest.approx([0.1 * 2**i for i in range(max_retries)])
    attempt, calls = failing([*errors, status(502)])  # one failure more than it may retry
    with pytest.raises(EngineServerError):
        await call_with_retries(attempt, policy=policy, request_timeout=5, total_timeout=100)
    assert len(calls) == max_retries + 1


async def test_a_backoff_reaching_the_deadline_is_not_slept(clock: FakeClock) -> None:
    policy = RetryPolicy(max_retries=5, initial_delay=1.0, max_delay=1.0, jitter=0)
    attempt, calls = failing([status(500)] * 3)
    with pytest.raises(EngineServerError):  # 1 s backoff, 1 s left: not worth it
        await call_with_retries(attempt, policy=policy, request_timeout=5, total_timeout=1.0)
    assert len(calls) == 1 and clock.sleeps == []
    attempt, calls = failing([status(500)] * 3)
    with pytest.raises(EngineServerError):
        await call_with_retries(attempt, policy=policy, request_timeout=5, total_timeout=1.5)
    # one retry fits; the second attempt only gets what is left of the budget
    assert calls == [(0, 1.5), (1, pytest.approx(0.5))] and clock.sleeps == [1.0]


async def test_attempt_timeouts_are_bounded_by_the_budget(clock: FakeClock) -> None:
    attempt, calls = failing([status(500)] * 2)
    await call_with_retries(attempt, policy=NO_JITTER, request_timeout=0.3, total_timeout=10)
    assert [t for _, t in calls] == [0.3, 0.3, 0.3]
    late, calls = failing([])
    await call_with_retries(late, policy=NO_JITTER, request_timeout=0.3, total_timeout=10,
                            started=clock.now - 20)  # the budget is already spent
    assert calls == [(0, 1e-3)]  # never a timeout of zero or less


async def test_first_error_from_the_caller_and_started(clock: FakeClock) -> None:
    attempt, calls = failing([])
    state = RetryState()
    assert await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5,
                                   total_timeout=10, state=state,
                                   first_error=status(502), started=clock.now) == "ok"
    assert calls == [(1, 5)] and state.retries == 1 and state.last_status == 502
    attempt, calls = failing([])
    with pytest.raises(EngineBadRequestError):  # not retryable: no attempt at all
        await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5,
                                total_timeout=10, first_error=status(400))
    assert calls == []
    attempt, calls = failing([])
    with pytest.raises(EngineServerError):  # the caller's attempt began 10 s ago: no budget
        await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5,
                                total_timeout=10, first_error=status(502),
                                started=clock.now - 10)
    assert calls == []


async def test_last_status_survives_a_later_error_without_one(clock: FakeClock) -> None:
    attempt, _ = failing([status(502), EngineConnectionError("refused", server="s:1")])
    state = RetryState()
    await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5, total_timeout=10,
                            state=state)
    assert state.retries == 2 and state.last_status == 502


async def test_which_errors_are_retried(clock: FakeClock) -> None:
    custom = RetryPolicy(max_retries=3, initial_delay=0.1, max_delay=1.0,
                         retry_statuses=frozenset({418}))
    for exc, retried in [
        (status(418), True), (status(503), False), (EngineResponseError("bad"), True),
        (EngineTimeoutError("slow"), True), (EngineConnectionError("refused"), True),
        (NoHealthyServerError("none"), False), (EngineError("other"), False),
    ]:
        assert is_retryable(exc, custom) is retried, exc
        attempt, calls = failing([exc])
        if retried:
            await call_with_retries(attempt, policy=custom, request_timeout=5,
                                    total_timeout=10)
        else:
            with pytest.raises(type(exc)):
                await call_with_retries(attempt, policy=custom, request_timeout=5,
                                        total_timeout=10)
        assert len(calls) == (2 if retried else 1), exc
    default = RetryPolicy()
    assert [c for c in (400, 404, 408, 429, 500, 502, 503, 504, 501)
            if is_retryable(status(c), default)] == [408, 429, 500, 502, 503, 504]


async def test_other_exceptions_are_never_retried(clock: FakeClock) -> None:
    attempt, calls = failing([ValueError("bug")])
    with pytest.raises(ValueError, match="bug"):
        await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5, total_timeout=10)
    assert len(calls) == 1 and clock.sleeps == []


async def test_retry_log_line(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rollout_kit.engines")
    attempt, _ = failing([status(503)])
    await call_with_retries(attempt, policy=NO_JITTER, request_timeout=5, total_timeout=10,
                            what="/generate")
    assert [r.getMessage() for r in caplog.records] == [
        "retrying /generate in 0.100s after EngineOverloadedError (retry 1/3)"]


# -- error mapping -----------------------------------------------------------------------


@pytest.mark.parametrize("code,cls", [
    (399, EngineBadRequestError), (400, EngineBadRequestError), (407, EngineBadRequestError),
    (408, EngineServerError), (409, EngineBadRequestError), (428, EngineBadRequestError),
    (429, EngineOverloadedError), (430, EngineBadRequestError), (499, EngineBadRequestError),
    (500, EngineServerError), (502, EngineServerError), (503, EngineOverloadedError),
    (504, EngineServerError),
])
def test_status_classes_at_each_boundary(code: int, cls: type) -> None:
    assert type(status(code)) is cls


def test_status_error_message_body_hint_and_retry_after() -> None:
    e = make_status_error(500, b'{"error": {"message": "boom"}}', server="h:1",
                          endpoint="/generate")
    assert str(e) == "h:1 /generate answered HTTP 500: boom"
    assert e.body == '{"error": {"message": "boom"}}' and e.retry_after is None
    assert (e.server, e.endpoint, e.status) == ("h:1", "/generate", 500)
    hinted = make_status_error(404, "nope", server="h:1", endpoint="/x", hint="use vLLM")
    assert str(hinted) == "h:1 /x answered HTTP 404: nope. use vLLM"
    long = make_status_error(400, "y" * 5000, server="h:1", endpoint="/x")
    assert "… [" in str(long) and "more chars]" in str(long)
    for header, value in [("2.5", 2.5), ("0", 0.0), ("-1", None), ("soon", None),
                          ("Wed, 21 Oct 2015 07:28:00 GMT", None)]:
        got = make_status_error(503, "", server="h", endpoint="/e",
                                headers={"Retry-After": header}).retry_after
        assert got == value, header
    assert make_status_error(503, "", server="h", endpoint="/e", headers={}).retry_after is None
    assert make_status_error(503, "", server="h", endpoint="/e",
                             headers={"Other": "1"}).retry_after is None


@pytest.mark.parametrize("body,message", [
    (b'{"error": {"detail": "inner detail"}}', "inner detail"),
    (b'{"error": {"message": 5, "detail": "d"}}', "d"),
    (b'{"error": {"message": 5}}', '{"error": {"message": 5}}'),
    (b'{"error": 5}', '{"error": 5}'),
    (b'{"detail": {"loc": 1}}', "{'loc': 1}"),
    (b'[1, 2]', "[1, 2]"),
    (b"  plain text \n", "plain text"),
    ("a str body", "a str body"),
    (b"\xff\xfe bad utf8", "\ufffd\ufffd bad utf8"),
])
def test_error_message_of_other_shapes(body: bytes | str, message: str) -> None:
    assert error_message_of(body) == message


def test_addresses_with_schemes_and_spaces() -> None:
    assert server_name(" https://h:1/ ") == "h:1" and server_name("h:2") == "h:2"
    assert server_name("http://h:3//") == "h:3"
    assert base_url("https://h:1/") == "https://h:1" and base_url(" h:1/ ") == "http://h:1"
    assert base_url("http://h:4") == "http://h:4"
    assert json_headers({"traceparent": "00-x"}) == {"Content-Type": "application/json",
                                                     "traceparent": "00-x"}


def test_engine_error_mapping() -> None:
    t = engine_error(TimeoutError(), "h:1", "/g")
    assert type(t) is EngineTimeoutError
    assert str(t) == "h:1 /g: no complete answer within the timeout"
    assert (t.server, t.endpoint) == ("h:1", "/g")
    st = engine_error(aiohttp.ServerTimeoutError("read"), "h:1", "/g")
    assert type(st) is EngineTimeoutError
    cut = engine_error(aiohttp.ClientPayloadError("x"), "h:1", "/g")
    assert type(cut) is EngineConnectionError
    assert str(cut) == "h:1 /g: the response body was cut off (ClientPayloadError)"
    refused = engine_error(aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
        ConnectionRefusedError(111, "refused")), "h:1", "/g")
    assert type(refused) is EngineUnreachableError and is_connect_failure(refused)
    other = engine_error(aiohttp.ServerDisconnectedError("gone"), "h:1", "/g")
    assert type(other) is EngineConnectionError and str(other).startswith(
        "h:1 /g: connection failed (ServerDisconnectedError: ")
    assert len(str(engine_error(aiohttp.ClientError("z" * 1000), "h", "/g"))) < 300
    assert not is_connect_failure(other) and not is_connect_failure(ValueError())


def test_parse_json_bodies() -> None:
    assert parse_json(b'{"a": 1}', server="h", endpoint="/g") == {"a": 1}
    with pytest.raises(EngineResponseError) as info:
        parse_json(b"   <!DOCTYPE html><html>", server="h:1", endpoint="/g", hint="wrong port?")
    assert str(info.value).startswith("h:1 /g returned an HTML page: ")
    assert str(info.value).endswith(". wrong port?")
    assert info.value.server == "h:1" and info.value.endpoint == "/g"
    with pytest.raises(EngineResponseError, match="returned an HTML page"):
        parse_json(b"<HTML><body>", server="h", endpoint="/g")
    with pytest.raises(EngineResponseError) as info3:
        parse_json(b"q" * 500, server="h", endpoint="/g")
    assert "a body that is not JSON" in str(info3.value) and "more chars" in str(info3.value)
    assert not str(info3.value).endswith(". ")


@pytest.mark.parametrize("event,cls,code", [
    ({"error": {"code": 503, "message": "busy"}}, EngineOverloadedError, 503),
    ({"error": {"code": 600}}, EngineBadRequestError, 400),
    ({"error": {"code": 399}}, EngineBadRequestError, 400),
    ({"error": {"code": 599}}, EngineServerError, 599),
    ({"error": {"code": 400}}, EngineBadRequestError, 400),
    ({"error": {"code": "500", "retryable": True}}, EngineServerError, 500),
    ({"error": {"retryable": False}}, EngineBadRequestError, 400),
    ({"error": "plain"}, EngineBadRequestError, 400),
])
def test_stream_error_events(event: dict[str, Any], cls: type, code: int) -> None:
    import orjson

    line = b"data: " + orjson.dumps(event)
    with pytest.raises(EngineStatusError) as info:
        http._sse_event(line, 1, "h:1", "/g", "")
    assert type(info.value) is cls and info.value.status == code
    assert info.value.server == "h:1" and info.value.endpoint == "/g"


def test_sse_lines() -> None:
    assert http._sse_event(b": comment", 1, "h", "/g", "") is None
    assert http._sse_event(b"event: x", 1, "h", "/g", "") is None
    assert http._sse_event(b"data: [DONE]", 1, "h", "/g", "") is http._END
    assert http._sse_event(b"data:[DONE]  ", 1, "h", "/g", "") is http._END
    ev = http._sse_event(b'data:{"a":1}', 7, "h", "/g", "")
    assert ev == SSEEvent(7, {"a": 1})
    with pytest.raises(EngineResponseError) as info:
        http._sse_event(b"data: {nope", 1, "h:1", "/g", "the hint")
    assert str(info.value) == "h:1 /g sent a stream event that is not JSON: '{nope'. the hint"
    with pytest.raises(EngineResponseError) as info2:
        http._sse_event(b"data: {nope", 1, "h:1", "/g", "")
    assert str(info2.value).endswith("'{nope'")


# -- the client against a tiny server -----------------------------------------------------


MakeClient = Callable[..., HttpClient]


@pytest.fixture(params=["loop", "aiohttp"])
def make_client(request: pytest.FixtureRequest) -> MakeClient:
    """``make_client(**config)``: an HttpClient over each transport in turn."""

    def make(**config: Any) -> HttpClient:
        return HttpClient(EngineConfig(transport=request.param, **config))

    return make


async def _chunks(request: web.Request, parts: list[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for p in parts:
        await resp.write(p)
        await asyncio.sleep(0)
    await resp.write_eof()
    return resp


async def test_sse_split_lines_and_a_last_line_without_newline(server: Any,
                                                               make_client: MakeClient) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b'data: {"i": 0}\n\nda', b'ta: {"i": 1}\n', b": ping\n",
                                       b'data: {"i": 2}\ndata: [DONE]'])

    addr = await server("/s", handler)
    client = make_client()
    try:
        events = [e async for e in client.stream_sse(addr, "/s", {"p": 1}, timeout=5)]
    finally:
        await client.close_async()
    assert [e.data for e in events] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert all(e.t_ns > 0 for e in events)
    assert [e.t_ns for e in events] == sorted(e.t_ns for e in events)
    req = server.seen[0]
    assert req.method == "POST" and req.headers["Content-Type"] == "application/json"


async def test_sse_stream_ending_early_or_erroring(server: Any, make_client: MakeClient) -> None:
    async def no_done(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b'data: {"i": 0}\n', b'data: {"i": 1}'])

    async def busy(_: web.Request) -> web.StreamResponse:
        return web.Response(status=503, text="paused", headers={"Retry-After": "3"})

    async def after_done(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b'data: {"i": 0}\ndata: [DONE]\ndata: {"i": 9}\n'])

    addr = await server("/early", no_done)
    await server("/busy", busy)
    await server("/done", after_done)
    client = make_client()
    try:
        got: list[Any] = []
        with pytest.raises(EngineResponseError, match=r"ended before 'data: \[DONE\]'"):
            async for e in client.stream_sse(addr, "/early", {}, timeout=5):
                got.append(e)
        assert [e.data for e in got] == [{"i": 0}, {"i": 1}]  # a last line without newline
        assert all(isinstance(e.t_ns, int) and e.t_ns > 0 for e in got)
        with pytest.raises(EngineOverloadedError) as info:
            async for _ in client.stream_sse(addr, "/busy", {}, timeout=5, hint="h!"):
                pass
        assert info.value.retry_after == 3.0 and "h!" not in str(info.value)
        assert [e.data async for e in client.stream_sse(addr, "/done", {}, timeout=5)] == [
            {"i": 0}]
        with pytest.raises(EngineBadRequestError) as info2:
            async for _ in client.stream_sse(addr, "/missing", {}, timeout=5, hint="h!"):
                pass
        assert str(info2.value).endswith(". h!")  # 404: the hint is given
    finally:
        await client.close_async()


async def test_sse_sends_the_headers_given(server: Any, make_client: MakeClient) -> None:
    async def ok(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b"data: [DONE]\n"])

    addr = await server("/s", ok)
    client = make_client(api_key="sk-1")
    try:
        assert [e async for e in client.stream_sse(
            addr, "/s", {}, timeout=5, headers={"X-One": "1"})] == []
    finally:
        await client.close_async()
    req = server.seen[0]
    assert req.headers["X-One"] == "1" and req.headers["Authorization"] == "Bearer sk-1"


async def test_request_statuses_hints_and_bodies(server: Any, make_client: MakeClient) -> None:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(body=body or b" \n", content_type="application/json")

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=int(request.query["s"]), text="nope")

    addr = await server("/echo", echo)
    await server("/fail", fail)
    client = make_client()
    try:
        assert await client.request_json(addr, "POST", "/echo", payload={"a": [1]},
                                         timeout=5) == {"a": [1]}
        assert await client.request_json(addr, "GET", "/echo", timeout=5) is None  # blank
        assert await client.request(addr, "GET", "/echo", timeout=5) == b" \n"
        for code, hinted in [(404, True), (405, True), (400, False), (500, False)]:
            with pytest.raises(EngineStatusError) as info:
                await client.request(addr, "GET", "/fail", params={"s": str(code)},
                                     timeout=5, hint="try vLLM")
            assert info.value.status == code
            assert str(info.value).endswith(". try vLLM") is hinted, code
    finally:
        await client.close_async()
    posted = server.seen[0]
    assert posted.headers["Content-Type"] == "application/json"
    assert "Content-Type" not in server.seen[1].headers  # no payload: not said to be JSON
    assert "Authorization" not in posted.headers  # no api key configured


async def test_request_headers_and_bad_json(server: Any, make_client: MakeClient) -> None:
    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<html>hi</html>", content_type="text/html")

    addr = await server("/h", html)
    client = make_client()
    try:
        await client.request(addr, "POST", "/h", payload={"x": 1}, timeout=5,
                             headers={"X-Only": "1"})
        with pytest.raises(EngineResponseError, match=r"HTML page.*\. the hint$"):
            await client.request_json(addr, "GET", "/h", timeout=5, hint="the hint")
    finally:
        await client.close_async()
    sent = server.seen[0]
    assert sent.headers["X-Only"] == "1"
    assert sent.headers.get("Content-Type") != "application/json"  # sent as given


async def _refused(addr: str, make_client: MakeClient) -> tuple[Any, Any]:
    """The errors of a plain request and of a stream to ``addr``, where nothing listens."""
    client = make_client(timeouts=Timeouts(connect=2.0, request=5.0))
    try:
        with pytest.raises(EngineConnectionError) as info:
            await client.request(addr, "GET", "/health", timeout=2)
        with pytest.raises(EngineConnectionError) as info2:
            async for _ in client.stream_sse(addr, "/g", {}, timeout=2):
                pass
    finally:
        await client.close_async()
    return info, info2


async def test_refused_connection_is_a_connect_failure(make_client: MakeClient) -> None:
    addr = f"127.0.0.1:{free_port()}"
    info, info2 = await _refused(addr, make_client)
    for exc in (info.value, info2.value):
        assert is_connect_failure(exc) and str(exc).startswith(f"cannot connect to {addr} (")
        assert isinstance(exc, EngineUnreachableError)
        assert isinstance(exc.__cause__, OSError)  # aiohttp's ClientConnectorError is one


async def _hanging(server: Any) -> tuple[str, asyncio.Event]:
    """A ``/hang`` route that answers only once the returned gate is set."""
    gate = asyncio.Event()

    async def hang(_: web.Request) -> web.Response:
        await gate.wait()
        return web.Response(text="{}")

    return await server("/hang", hang), gate


async def test_a_request_past_its_timeout_is_a_timeout(server: Any,
                                                       make_client: MakeClient) -> None:
    addr, gate = await _hanging(server)
    client = make_client()
    try:
        with pytest.raises(EngineTimeoutError) as info:
            await client.request(addr, "GET", "/hang", timeout=0.05)
    finally:
        gate.set()
        await client.close_async()
    assert info.value.server == addr and info.value.endpoint == "/hang"


async def test_aiohttp_session_reuse_timeouts_and_close() -> None:
    t = AiohttpTransport(max_connections=7, connect_timeout=3.0)
    assert repr(HttpClient(EngineConfig(), t)) == \
        "HttpClient(AiohttpTransport(max_connections=7))"
    s1 = t._current()
    assert t._current() is s1 and s1.connector is not None
    assert s1.connector.limit == 7 and s1.connector.limit_per_host == 0
    t30 = t._timeout(30.0)
    assert t._timeout(30.0) is t30 and t30.total == 30.0 and t30.sock_connect == 3.0
    assert t._timeout(2.0).total == 2.0
    await t.close_async()
    assert s1.closed
    s2 = t._current()  # a new one after close
    assert s2 is not s1 and not s2.closed
    await t.close_async()
    await t.close_async()  # idempotent
    assert t.connections_in_use == 0


def test_client_headers_add_the_api_key() -> None:
    plain = HttpClient(EngineConfig())
    assert plain._headers(None, False) == {}
    assert plain._headers(None, True) == {"Content-Type": "application/json"}
    keyed = HttpClient(EngineConfig(api_key="k"))
    assert keyed._headers(None, False) == {"Authorization": "Bearer k"}
    assert keyed._headers({"X": "1"}, True) == {"X": "1", "Authorization": "Bearer k"}
    assert "k" not in repr(keyed)
    assert repr(plain) == "HttpClient(LoopTransport(max_connections=0))"


# -- more of the client: chunk boundaries, error attributes, other loops ------------------


async def test_sse_lines_split_across_network_chunks(server: Any, make_client: MakeClient) -> None:
    """The server sends the next chunk only once the client has the previous event, so each
    chunk boundary really is one (mid-line, and a last line without its newline)."""
    gates = [asyncio.Event() for _ in range(3)]

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part, gate in zip([b'data: {"i": 0}\nda', b'ta: {"i": 1}\n', b'data: {"i": 2}\n',
                               b"data: [DONE]"], [*gates, None], strict=True):
            await resp.write(part)
            if gate is not None:
                await gate.wait()
        await resp.write_eof()
        return resp

    addr = await server("/s", handler)
    client = make_client()
    got: list[Any] = []
    try:
        async for e in client.stream_sse(addr, "/s", {}, timeout=5):
            got.append(e)
            gates[len(got) - 1].set()  # event k is out: the server sends the next chunk
    finally:
        for g in gates:
            g.set()
        await client.close_async()
    assert [e.data for e in got] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert all(isinstance(e.t_ns, int) and e.t_ns > 0 for e in got)


async def test_stream_errors_name_server_endpoint_and_hint(server: Any,
                                                           make_client: MakeClient) -> None:
    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.query.get("s", "400")), text="no")

    async def mid_error(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b'data: {"i": 0}\n', b'data: {"error": {"code": 503}}\n'])

    async def bad_json(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b"data: " + b"{" * 500 + b"\n"])

    async def bad_tail(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b'data: {"i": 0}\ndata: {x'])

    addr = await server("/status", status)
    await server("/mid", mid_error)
    await server("/bad", bad_json)
    await server("/tail", bad_tail)
    client = make_client()

    async def drain(endpoint: str, **kw: Any) -> None:
        async for _ in client.stream_sse(addr, endpoint, {}, timeout=5, **kw):
            pass

    try:
        for code, cls, hinted in [(400, EngineBadRequestError, False),
                                  (405, EngineBadRequestError, True),
                                  (406, EngineBadRequestError, False)]:
            with pytest.raises(cls) as info:
                await drain(f"/status?s={code}", hint="the hint")
            assert info.value.status == code
            assert str(info.value).endswith(". the hint") is hinted, code
            assert (info.value.server, info.value.endpoint) == (addr, f"/status?s={code}")
        with pytest.raises(EngineBadRequestError) as plain:
            await drain("/status")
        assert str(plain.value) == f"{addr} /status answered HTTP 400: no"
        with pytest.raises(EngineBadRequestError) as nohint:
            await drain("/status?s=404")  # no hint given: none appended
        assert str(nohint.value) == f"{addr} /status?s=404 answered HTTP 404: no"
        with pytest.raises(EngineOverloadedError) as mid:
            await drain("/mid", hint="h")
        assert (mid.value.server, mid.value.endpoint) == (addr, "/mid")
        with pytest.raises(EngineResponseError) as bad:
            await drain("/bad", hint="h")
        assert (bad.value.server, bad.value.endpoint) == (addr, "/bad")
        assert str(bad.value).endswith("… [300 more chars]'. h")  # 200 shown of 500
        with pytest.raises(EngineResponseError) as tail:
            await drain("/tail", hint="h")
        assert (tail.value.server, tail.value.endpoint) == (addr, "/tail")
        assert str(tail.value) == f"{addr} /tail sent a stream event that is not JSON: '{{x'. h"
    finally:
        await client.close_async()


async def test_stream_ending_early_names_server_and_endpoint(server: Any,
                                                             make_client: MakeClient) -> None:
    async def no_done(request: web.Request) -> web.StreamResponse:
        return await _chunks(request, [b'data: {"i": 0}\n'])

    addr = await server("/e", no_done)
    client = make_client()
    try:
        with pytest.raises(EngineResponseError) as info:
            async for _ in client.stream_sse(addr, "/e", {}, timeout=5):
                pass
    finally:
        await client.close_async()
    assert (info.value.server, info.value.endpoint) == (addr, "/e")
    assert str(info.value) == f"{addr} /e: the event stream ended before 'data: [DONE]'"


async def test_timeouts_reach_every_kind_of_request(server: Any, make_client: MakeClient) -> None:
    addr, gate = await _hanging(server)
    client = make_client()
    try:
        with pytest.raises(EngineTimeoutError):
            await client.request_json(addr, "GET", "/hang", timeout=0.05)
        with pytest.raises(EngineTimeoutError) as info:
            async for _ in client.stream_sse(addr, "/hang", {}, timeout=0.05):
                pass
        assert (info.value.server, info.value.endpoint) == (addr, "/hang")
    finally:
        gate.set()
        await client.close_async()


async def test_request_messages_attributes_params_and_hints(server: Any,
                                                            make_client: MakeClient) -> None:
    async def echo_query(request: web.Request) -> web.Response:
        return web.json_response(dict(request.query))

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=int(request.query["s"]), text="nope")

    async def text(_: web.Request) -> web.Response:
        return web.Response(body=b"\xff not json")

    addr = await server("/q", echo_query)
    await server("/fail", fail)
    await server("/text", text)
    client = make_client()
    try:
        assert await client.request_json(addr, "GET", "/q", params={"a": "1"},
                                         timeout=5) == {"a": "1"}
        with pytest.raises(EngineServerError) as e500:
            await client.request(addr, "GET", "/fail", params={"s": "500"}, timeout=5,
                                 hint="the hint")
        assert str(e500.value) == f"{addr} /fail answered HTTP 500: nope"  # no hint for 500
        assert (e500.value.server, e500.value.endpoint) == (addr, "/fail")
        with pytest.raises(EngineBadRequestError) as e404:
            await client.request(addr, "GET", "/fail", params={"s": "404"}, timeout=5)
        assert str(e404.value) == f"{addr} /fail answered HTTP 404: nope"  # no hint given
        with pytest.raises(EngineBadRequestError) as j404:
            await client.request_json(addr, "GET", "/fail", params={"s": "404"}, timeout=5,
                                      hint="the hint")
        assert str(j404.value).endswith(". the hint")
        with pytest.raises(EngineBadRequestError) as j404b:
            await client.request_json(addr, "GET", "/fail", params={"s": "404"}, timeout=5)
        assert str(j404b.value) == f"{addr} /fail answered HTTP 404: nope"
        with pytest.raises(EngineResponseError) as bad:
            await client.request_json(addr, "GET", "/text", timeout=5)
        assert (bad.value.server, bad.value.endpoint) == (addr, "/text")
        assert str(bad.value) == f"{addr} /text returned a body that is not JSON: '\ufffd not json'"
    finally:
        await client.close_async()


def test_error_bodies_that_are_not_utf8_or_long() -> None:
    e = make_status_error(500, b"\xff\xfe", server="h", endpoint="/e")
    assert e.body == "\ufffd\ufffd" and str(e) == "h /e answered HTTP 500: \ufffd\ufffd"
    with pytest.raises(EngineResponseError) as info:
        parse_json(b"\xff" + b"q" * 500, server="h", endpoint="/g")
    assert str(info.value) == ("h /g returned a body that is not JSON: '\ufffd"
                               + "q" * 199 + "… [301 more chars]'")
    with pytest.raises(EngineResponseError) as info2:
        http._sse_event(b"data: \xff{", 1, "h:1", "/g", "")
    assert str(info2.value) == "h:1 /g sent a stream event that is not JSON: '\ufffd{'"
    assert (info2.value.server, info2.value.endpoint) == ("h:1", "/g")
    long = engine_error(aiohttp.ClientError("z" * 1000), "h:1", "/g")
    assert str(long) == ("h:1 /g: connection failed (ClientError: " + "z" * 200
                         + "… [800 more chars])")
    for exc in (long, engine_error(aiohttp.ClientPayloadError("x"), "h:1", "/g")):
        assert (exc.server, exc.endpoint) == ("h:1", "/g")


async def test_refused_message_quotes_the_os_error(make_client: MakeClient) -> None:
    addr = f"127.0.0.1:{free_port()}"
    info, info2 = await _refused(addr, make_client)
    cause = info.value.__cause__
    os_error = cause.os_error if isinstance(cause, aiohttp.ClientConnectorError) else cause
    assert isinstance(os_error, ConnectionRefusedError)
    assert str(info.value) == f"cannot connect to {addr} (/health): {os_error}"
    assert (info.value.server, info.value.endpoint) == (addr, "/health")
    assert (info2.value.server, info2.value.endpoint) == (addr, "/g")


async def test_retry_jitter_uses_a_random_draw(clock: FakeClock,
                                               monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(http, "random", Proxy(http.random, random=lambda: 0.0))
    caplog.set_level(logging.DEBUG, logger="rollout_kit.engines")
    policy = RetryPolicy(max_retries=3, initial_delay=0.2, max_delay=1.0, jitter=0.25)
    attempt, _ = failing([status(500)])
    await call_with_retries(attempt, policy=policy, request_timeout=5, total_timeout=10)
    assert clock.sleeps == pytest.approx([0.15])  # the low end of the jitter, not the middle
    assert caplog.records[0].getMessage().startswith("retrying request in 0.150s")


def test_close_async_closes_the_sessions_of_other_loops() -> None:
    import threading

    client = AiohttpTransport()

    async def make() -> aiohttp.ClientSession:
        return client._current()

    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    stopped = asyncio.new_event_loop()
    closed_first = asyncio.new_event_loop()
    current = asyncio.new_event_loop()
    try:
        s_running = asyncio.run_coroutine_threadsafe(make(), running).result(10)
        s_stopped = stopped.run_until_complete(make())  # its loop will not run again
        s_closed = closed_first.run_until_complete(make())
        s_current = current.run_until_complete(make())
        closed_first.run_until_complete(s_closed.close())  # closed since: skipped
        assert len({id(s) for s in (s_running, s_stopped, s_closed, s_current)}) == 4
        current.run_until_complete(client.close_async())
        assert s_current.closed and s_stopped.closed  # closed here / detached
        for _ in range(1000):  # closed on its own loop, soon
            if s_running.closed:
                break
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0.001), running).result(10)
        assert s_running.closed
        assert client._session is None and client._stale == []
    finally:
        running.call_soon_threadsafe(running.stop)
        thread.join(10)
        for loop in (running, stopped, closed_first, current):
            loop.close()


async def test_session_tuning() -> None:
    client = AiohttpTransport(read_bufsize=2**20)
    s = client._current()
    try:
        assert s._read_bufsize == 2**20  # type: ignore[attr-defined]
        assert s.connector is not None and s.connector._keepalive_timeout == 75.0  # type: ignore[attr-defined]
    finally:
        await client.close_async()
