"""Error mapping, retry policy, routing and Prometheus parsing, without a server."""

from __future__ import annotations

import pytest

from rollout_kit import (
    ConfigError,
    EngineBadRequestError,
    EngineConnectionError,
    EngineOverloadedError,
    EngineServerError,
    RetryPolicy,
)
from rollout_kit.engines._http import (
    RetryState,
    call_with_retries,
    error_message_of,
    make_status_error,
    server_name,
)
from rollout_kit.engines._prometheus import parse_prometheus
from rollout_kit.engines._routing import Router, route_key
from rollout_kit.engines._transport.base import base_url


@pytest.mark.parametrize("body,message", [
    (b'{"error": {"message": "nested", "type": "BadRequestError", "code": 400}}', "nested"),
    (b'{"object": "error", "message": "flat", "code": 400}', "flat"),
    (b'{"error": "string form"}', "string form"),
    (b'{"detail": "Not Found"}', "Not Found"),
    (b"Internal Server Error", "Internal Server Error"),
])
def test_error_message_shapes(body: bytes, message: str) -> None:
    assert error_message_of(body) == message


@pytest.mark.parametrize("status,cls", [
    (429, EngineOverloadedError), (503, EngineOverloadedError), (500, EngineServerError),
    (502, EngineServerError), (408, EngineServerError), (400, EngineBadRequestError),
    (404, EngineBadRequestError),
])
def test_status_factory(status: int, cls: type) -> None:
    exc = make_status_error(status, b"x" * 5000, server="h:1", endpoint="/generate",
                            headers={"Retry-After": "2"})
    assert type(exc) is cls and exc.status == status and exc.retry_after == 2.0
    assert "h:1" in str(exc) and "/generate" in str(exc) and str(status) in str(exc)
    assert len(str(exc)) < 600 and len(exc.body) < 400


def test_addresses() -> None:
    assert server_name("http://127.0.0.1:8/") == "127.0.0.1:8"
    assert base_url("127.0.0.1:8") == "http://127.0.0.1:8"


async def test_retries_then_success_and_no_retry_on_400() -> None:
    policy = RetryPolicy(max_retries=3, initial_delay=0.001, max_delay=0.01)
    calls: list[float] = []

    async def flaky(i: int, timeout: float) -> str:
        calls.append(timeout)
        if i < 2:
            raise make_status_error(502, b"bad gateway", server="s", endpoint="/e")
        return "ok"

    state = RetryState()
    assert await call_with_retries(flaky, policy=policy, request_timeout=1.0,
                                   total_timeout=5.0, state=state) == "ok"
    assert state.retries == 2 and len(calls) == 3 and state.last_status == 502

    n = 0

    async def bad(i: int, timeout: float) -> str:
        nonlocal n
        n += 1
        raise make_status_error(400, b"no", server="s", endpoint="/e")

    with pytest.raises(EngineBadRequestError):
        await call_with_retries(bad, policy=policy, request_timeout=1, total_timeout=5)
    assert n == 1


async def test_retries_exhausted_and_total_deadline() -> None:
    policy = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.01)
    n = 0

    async def down(i: int, timeout: float) -> str:
        nonlocal n
        n += 1
        raise EngineConnectionError("refused", server="s")

    with pytest.raises(EngineConnectionError):
        await call_with_retries(down, policy=policy, request_timeout=1, total_timeout=5)
    assert n == 3
    slow = RetryPolicy(max_retries=5, initial_delay=1.0, max_delay=1.0)
    n = 0
    with pytest.raises(EngineConnectionError):  # the backoff would pass the total deadline
        await call_with_retries(down, policy=slow, request_timeout=1, total_timeout=0.5)
    assert n == 1


def test_router_round_robin_and_down() -> None:
    r = Router(["a", "b", "c"], "round_robin")
    assert [r.choose() for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]
    r.mark_down("b")
    assert {r.choose() for _ in range(6)} == {"a", "c"}
    assert r.choose(exclude=["a"]) == "c"
    r.mark_down("a")
    r.mark_down("c")
    assert r.choose() in {"a", "b", "c"}  # all down: still tries rather than failing
    r.mark_up("b")
    assert r.healthy == ("b",) and r.choose(exclude=["b"]) == "b"


def test_router_least_in_flight_and_sticky() -> None:
    r = Router(["a", "b"], "least_in_flight")
    r.started("a")
    assert r.choose() == "b" and r.in_flight("a") == 1
    r.started("b")
    r.started("b")
    assert r.choose() == "a"
    for server in ("b", "b", "a"):
        r.finished(server)
    assert r.in_flight("a") == r.in_flight("b") == 0
    one = Router(["only"], "least_in_flight")
    one.mark_down("only")
    assert one.choose(exclude=["only"]) == "only"  # the one server, down or excluded
    s = Router(["a", "b", "c"], "sticky", sticky_capacity=2)
    first = {k: s.choose(k) for k in ("t1", "t2")}
    assert all(s.choose(k) == v for k, v in first.items() for _ in range(3))
    s.mark_down(first["t1"])
    moved = s.choose("t1")
    assert moved != first["t1"] and s.choose("t1") == moved
    s.choose("t3")  # evicts the least recently used key
    assert s.sticky_server("t2") is None


def test_route_key() -> None:
    assert route_key("task7:0") == route_key("task7:3") == "task7"
    assert route_key("abc") == "abc" and route_key(":x") == ":x"
    assert route_key("task7:0", {"route_key": "k"}) == "k"


def test_router_rejects_bad_servers() -> None:
    with pytest.raises(ConfigError):
        Router([], "round_robin")
    with pytest.raises(ConfigError):
        Router(["a", "a"], "round_robin")


def test_prometheus_parse() -> None:
    text = (
        "# HELP vllm:num_requests_running Number of requests.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a \\"q\\""} 7\n'
        "plain_metric 1.5e3 1700000000\n"
    )
    s = parse_prometheus(text)
    assert [x.metric for x in s] == ["vllm:num_requests_running",
                                     "vllm:e2e_request_latency_seconds_bucket", "plain_metric"]
    assert s[0].labels == {"engine": "0", "model_name": "m"} and s[0].value == 3.0
    assert s[1].labels["le"] == "+Inf" and s[1].labels["model_name"] == 'a "q"'
    assert s[2].value == 1500.0
    with pytest.raises(ValueError):
        parse_prometheus('x{a="1" 2\n')
