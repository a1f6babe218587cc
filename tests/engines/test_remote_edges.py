"""RemoteInfEngine at its limits and on its rare paths: the continuation budget at the edge
and one past it, TTFT across a continuation, the token budget, retries, Retry-After and the
total deadline through the engine, and what each path leaves in the trace.

Most tests run against the simulator (real HTTP on 127.0.0.1); the continuation loop's own
decisions are checked on a scripted ``_segment`` (no server)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from aiohttp import web

from rollout_kit import (
    ConfigError,
    ControllerStateError,
    EngineBadRequestError,
    EngineError,
    EngineResponseError,
    EngineServerError,
    EngineTimeoutError,
    GenerationConfig,
    ModelRequest,
    RetryPolicy,
    Timeouts,
)
from rollout_kit.engines import (
    RemoteSGLangEngine,
    RemotevLLMEngine,
    SGLangBackend,
)
from rollout_kit.engines import (
    _control as control,
)
from rollout_kit.engines import (
    _http as http,
)
from rollout_kit.engines import (
    _recording as recording,
)
from rollout_kit.engines import (
    _remote as remote,
)
from rollout_kit.engines._backend import Segment
from rollout_kit.engines._output import Output, output_budget
from rollout_kit.sim import serve
from rollout_kit.tracing import Tracer, TrajectoryDump, load_dump
from rollout_kit.tracing import schema as S

from .conftest import FLAVOURS, TOK, Proxy, answer, free_port, make_engine, req


class Traced:
    """One traced task around engine calls: ``with traced() as t: ... t.frames``."""

    def __init__(self) -> None:
        self.tracer = Tracer()
        self.tracer.register_task(0)

    async def call(self, engine: Any, r: ModelRequest) -> Any:
        with self.tracer.task_scope(0):
            async with self.tracer.session():
                return await engine.generate_async(r)

    def frames(self, status: str = "accepted") -> Any:
        self.tracer.finalize(0, status)
        return self.tracer.frames()


# -- continuations ---------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_max_continuations_at_the_edge_and_one_past(flavour: str) -> None:
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("z" * 300)) as cluster:
        async with make_engine(flavour, cluster.addresses, max_continuations=2) as engine:
            cluster.servers[0].faults.force("abort", 2)
            t = Traced()
            resp = await t.call(engine, req(max_new_tokens=64))
            assert resp.n_continuations == 2 and len(resp.output_tokens) == 64
            assert resp.output_tokens == TOK.encode("z" * 64)
            f = t.frames()
            s = f.sessions.iloc[0]
            assert s[S.CONTINUATIONS] == 2 and s[S.STOP_REASON] == "length"
            assert f.events[S.EVENT].tolist() == ["continue", "continue"]
            assert f.events[S.VERSION].tolist() == [0, 0]
            cluster.servers[0].faults.force("abort", 3)  # one more than it may continue
            t2 = Traced()
            with pytest.raises(EngineError, match=r"aborted the generation 3 times in a row "
                                                  r"\(EngineConfig.max_continuations=2\)"):
                await t2.call(engine, req(max_new_tokens=64))
            f2 = t2.frames("failed")
            s2 = f2.sessions.iloc[0]
            assert s2[S.STATUS] == "failed" and s2[S.CONTINUATIONS] == 2
            assert s2[S.SERVER] == engine.servers[0]
            assert len(f2.events) == 2  # the third abort is not continued


async def test_no_continuation_allowed() -> None:
    async with serve("sglang", n=1, zero_latency=True, answer_fn=answer("z" * 100)) as cluster, \
            make_engine("sglang", cluster.addresses, max_continuations=0) as engine:
        cluster.servers[0].faults.force("abort", 1)
        with pytest.raises(EngineError, match="1 times in a row"):
            await engine.generate_async(req(max_new_tokens=20))
        resp = await engine.generate_async(req(max_new_tokens=20))  # no abort: fine
    assert resp.n_continuations == 0 and len(resp.output_tokens) == 20


@pytest.fixture
def t0_of_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The ``perf_counter_ns`` values the engine module reads (the first: the call's t0)."""
    seen: list[int] = []

    def perf_counter_ns() -> int:
        v = time.perf_counter_ns()
        seen.append(v)
        return v

    monkeypatch.setattr(remote, "time", Proxy(time, perf_counter_ns=perf_counter_ns))
    yield seen


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_ttft_is_not_reset_at_a_continuation(flavour: str, t0_of_calls: list[int]) -> None:
    async with serve(flavour, n=1, itl_s=0.001, jitter_cv=0.0,
                     answer_fn=answer("w" * 200)) as cluster, \
            make_engine(flavour, cluster.addresses, stream=True) as engine:
        segments: list[Segment] = []
        once = engine._stream_once

        async def recorded(*args: Any) -> Segment:
            seg = await once(*args)
            segments.append(seg)
            return seg

        engine._stream_once = recorded  # type: ignore[method-assign]
        cluster.servers[0].faults.force("abort", 2)
        t = Traced()
        t0_of_calls.clear()
        resp = await t.call(engine, req(max_new_tokens=40))
    assert resp.n_continuations == 2 and len(segments) == 3
    assert all(seg.chunks for seg in segments)  # every segment streamed tokens
    first = [seg.chunks[0][0] for seg in segments]
    assert first == sorted(first) and first[0] < first[1]
    t0 = t0_of_calls[0]
    # from the call to the first token kept: the first segment's, not a continuation's
    assert resp.ttft == pytest.approx((first[0] - t0) / 1e9, rel=1e-9, abs=1e-9)
    assert 0 < resp.ttft < (first[1] - t0) / 1e9
    # inter-token gaps within each response only: none across a continuation
    assert len(resp.itl) == sum(len(seg.chunks) - 1 for seg in segments)
    f = t.frames()
    s = f.sessions.iloc[0]
    assert s[S.TTFT_S] == pytest.approx(resp.ttft)
    assert s[S.ITL_S] == pytest.approx(sum(resp.itl) / len(resp.itl))


def test_output_keeps_the_first_token_time_of_the_first_segment() -> None:
    out = Output()
    out.add(Segment(), [])  # an empty segment (aborted before prefill) has no token time
    assert out.first_token_ns is None
    a = Segment(tokens=[1, 2], logprobs=[0.0, 0.0], chunks=[(100, 1), (150, 1)],
                text="ab", cached_tokens=3, server_timing={"x": 1.0})
    b = Segment(tokens=[3, 4, 5], logprobs=[0.0] * 3, chunks=[(900, 2), (1000, 1)],
                text="cd", cached_tokens=2, server_timing={"y": 2.0})
    out.add(a, [0, 0])
    out.add(b, [1, 1, 1])
    assert out.first_token_ns == 100  # not 900: a continuation does not reset it
    assert out.itl == pytest.approx([50e-9, 100e-9])  # the 750 ns pause is left out
    assert out.tokens == [1, 2, 3, 4, 5] and out.versions == [0, 0, 1, 1, 1]
    assert out.text == "abcd" and out.has_text and out.cached_tokens == 5
    assert out.server_timing == {"x": 1.0, "y": 2.0}
    assert not Output().has_text


# -- the token budget ---------------------------------------------------------------------


def test_output_budget_edges() -> None:
    g = GenerationConfig(max_new_tokens=10, max_tokens=20)
    assert output_budget(g, 0) == 10 and output_budget(g, 10) == 10
    assert output_budget(g, 11) == 9 and output_budget(g, 19) == 1
    for prompt_len in (20, 21):
        with pytest.raises(ConfigError, match=f"the prompt has {prompt_len} tokens and "
                                              "max_tokens=20 leaves no room"):
            output_budget(g, prompt_len)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_max_tokens_at_the_edge_and_one_past(flavour: str) -> None:
    prompt = "What is 2+2?"
    n = len(TOK.encode(prompt))
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("q" * 50)) as cluster, \
            make_engine(flavour, cluster.addresses) as engine:
        one = await engine.generate_async(req(prompt, max_new_tokens=30, max_tokens=n + 1))
        assert len(one.output_tokens) == 1 and one.stop_reason == "length"
        new = await engine.generate_async(req(prompt, max_new_tokens=1))
        assert len(new.output_tokens) == 1 and new.stop_reason == "length"
        three = await engine.generate_async(req(prompt, max_new_tokens=30, max_tokens=n + 3))
        assert len(three.output_tokens) == 3
        with pytest.raises(ConfigError, match="no room"):
            await engine.generate_async(req(prompt, max_tokens=n))


# -- the continuation loop, scripted -----------------------------------------------------


class Script:
    """Stands in for ``RemoteInfEngine._segment``: answers with the given segments."""

    def __init__(self, *segments: Segment | BaseException) -> None:
        self.segments = list(segments)
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, key: str, payload: dict[str, Any], api: Any, prefer: str | None,
                       state: Any, headers: Any) -> tuple[Segment, str]:
        if "sampling_params" in payload:  # SGLang's /generate
            ids, text = payload.get("input_ids"), payload.get("text")
            room = payload["sampling_params"]["max_new_tokens"]
        else:  # vLLM's /v1/completions
            prompt = payload["prompt"]
            ids, text = (prompt, None) if isinstance(prompt, list) else (None, prompt)
            room = payload["max_tokens"]
        self.calls.append({"key": key, "ids": ids, "text": text, "room": room,
                           "prefer": prefer, "headers": headers, "endpoint": api.endpoint})
        item = self.segments.pop(0)
        if isinstance(item, BaseException):
            state.retries += 1
            raise item
        return item, f"s{len(self.calls)}:1"


def seg(tokens: list[int], finish: str, **kw: Any) -> Segment:
    return Segment(tokens=tokens, logprobs=[-0.5] * len(tokens), finish=finish,  # type: ignore[arg-type]
                   **kw)


async def scripted_engine(script: Script, flavour: str = "sglang",
                          **config: Any) -> RemoteSGLangEngine:
    engine = make_engine(flavour, "127.0.0.1:9", **config)
    engine._state = remote._State.OPENED
    engine._probe_task = asyncio.get_running_loop().create_future()  # type: ignore[assignment]
    engine._segment = script  # type: ignore[method-assign]
    return engine  # type: ignore[return-value]


async def test_an_abort_that_filled_the_budget_ends_with_length() -> None:
    script = Script(seg([1, 2, 3], "abort"), seg([4, 5], "abort"))
    engine = await scripted_engine(script)
    try:
        resp = await engine.generate_async(ModelRequest(rid="t7:0", input_ids=[9, 9],
                                                        gconfig=GenerationConfig(
                                                            max_new_tokens=5)))
    finally:
        await engine.close_async()
    assert resp.stop_reason == "length" and resp.output_tokens == [1, 2, 3, 4, 5]
    assert resp.n_continuations == 1  # the second abort needs no continuation
    assert [c["room"] for c in script.calls] == [5, 2]  # what is left of the original 5
    assert [c["ids"] for c in script.calls] == [[9, 9], [9, 9, 1, 2, 3]]
    assert [c["prefer"] for c in script.calls] == [None, "s1:1"]  # stays on its server
    assert {c["key"] for c in script.calls} == {"t7"}
    assert resp.server == "s2:1" and resp.output_logprobs == [-0.5] * 5


async def test_text_prompt_budget_comes_from_the_server_prompt_ids() -> None:
    script = Script(seg([1], "abort", text="a", prompt_ids=[7] * 8), seg([2], "stop", text="b"))
    engine = await scripted_engine(script)
    try:
        resp = await engine.generate_async(ModelRequest(
            text="hi", gconfig=GenerationConfig(max_new_tokens=50, max_tokens=10)))
    finally:
        await engine.close_async()
    # first request: the text and the whole max_new_tokens; then the ids it answered with
    assert script.calls[0]["ids"] is None and script.calls[0]["text"] == "hi"
    assert script.calls[0]["room"] == 50
    assert script.calls[1]["ids"] == [7] * 8 + [1] and script.calls[1]["text"] is None
    assert script.calls[1]["room"] == 1  # max_tokens 10 - 8 prompt tokens - 1 kept
    assert resp.input_tokens == [7] * 8 and resp.text == "ab" and resp.stop_reason == "stop"


async def test_an_error_in_a_continuation_is_traced_with_the_counts() -> None:
    boom = EngineServerError("s2:1 /generate answered HTTP 500: x", status=500, server="s2:1")
    script = Script(seg([1, 2], "abort"), boom)
    engine = await scripted_engine(script)
    t = Traced()
    try:
        with pytest.raises(EngineServerError):
            await t.call(engine, ModelRequest(rid="r", input_ids=[1],
                                              gconfig=GenerationConfig(max_new_tokens=8)))
    finally:
        await engine.close_async()
    f = t.frames("failed")
    s = f.sessions.iloc[0]
    assert s[S.SERVER] == "s2:1" and s[S.CONTINUATIONS] == 1 and s[S.RETRIES] == 1
    assert s["rid"] == "r" and len(f.events) == 1
    assert s[S.STATUS] == "failed" and pd.isna(s[S.COMPLETION_TOKENS])  # none delivered


@pytest.mark.parametrize("record_text", [False, True])
async def test_engine_trace_attributes_of_a_plain_call(record_text: bool) -> None:
    script = Script(seg([1, 2, 3], "stop", text="abc"))
    engine = await scripted_engine(script, record_text=record_text)
    t = Traced()
    try:
        resp = await t.call(engine, ModelRequest(rid="q:1", input_ids=[4, 5],
                                                 gconfig=GenerationConfig(max_new_tokens=8)))
    finally:
        await engine.close_async()
    s = t.frames().sessions.iloc[0]
    assert (s[S.PROMPT_TOKENS], s[S.COMPLETION_TOKENS], s[S.CONTINUATIONS], s[S.RETRIES]) == \
        (2, 3, 0, 0)
    assert s[S.STOP_REASON] == "stop" and s["rid"] == "q:1" and s[S.SERVER] == "s1:1"
    if record_text:
        assert s["output_text"] == "abc"
    else:
        assert "output_text" not in t.tracer.sessions_df().columns
    assert math.isnan(s[S.TTFT_S])  # not streamed: no TTFT recorded
    assert resp.text == "abc" and math.isnan(resp.ttft) and resp.latency > 0


# -- retries, Retry-After and deadlines through the engine -------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_max_retries_through_the_engine_edge_and_one_past(flavour: str) -> None:
    policy = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002)
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine(flavour, cluster.addresses, retry=policy) as engine:
        plan = cluster.servers[0].faults
        plan.force("error", 2, status=500)
        t = Traced()
        resp = await t.call(engine, req(max_new_tokens=8))
        assert resp.retries == 2
        assert t.frames().sessions.iloc[0][S.RETRIES] == 2
        plan.force("error", 3, status=500)
        t2 = Traced()
        with pytest.raises(EngineServerError):
            await t2.call(engine, req(max_new_tokens=8))
        s = t2.frames("failed").sessions.iloc[0]
        assert s[S.RETRIES] == 2 and s["http_status"] == 500


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_retry_after_is_capped_through_the_engine(flavour: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(http, "asyncio", Proxy(asyncio, sleep=sleep))
    policy = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.02)
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine(flavour, cluster.addresses, retry=policy) as engine:
        plan = cluster.servers[0].faults
        plan.update(retry_after_s=30)  # longer than the whole budget (FAST_TIMEOUTS: 20 s)
        plan.force("error", 1, status=503)
        resp = await engine.generate_async(req(max_new_tokens=8))
    assert resp.retries == 1 and slept == [0.02]  # the policy's cap, not the server's 30 s


async def test_total_deadline_ends_the_call_without_retrying() -> None:
    timeouts = Timeouts(request=5.0, total=0.3, setup=5.0, health=1.0)
    async with serve("sglang", n=1, zero_latency=True) as cluster, \
            make_engine("sglang", cluster.addresses, timeouts=timeouts) as engine:
        cluster.servers[0].faults.force("hang", 1)
        t = Traced()
        with pytest.raises(EngineTimeoutError):
            await t.call(engine, req(max_new_tokens=4))
        s = t.frames("failed").sessions.iloc[0]
    assert s[S.RETRIES] == 0  # the one attempt had the whole (short) budget
    assert s[S.SERVER] == engine.servers[0]


async def test_bad_request_is_traced_with_its_status() -> None:
    async with serve("vllm", n=1, zero_latency=True, context_length=32) as cluster, \
            make_engine("vllm", cluster.addresses) as engine:
        t = Traced()
        with pytest.raises(EngineBadRequestError):
            await t.call(engine, req("p" * 60, max_new_tokens=8))
        s = t.frames("failed").sessions.iloc[0]
    assert s["http_status"] == 400 and s[S.RETRIES] == 0 and s[S.CONTINUATIONS] == 0


# -- the call's clock: latency and TTFT by hand -------------------------------------------


async def test_latency_and_ttft_on_a_fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([1_000_000_000, 3_500_000_000])  # the call's t0, then its end
    monkeypatch.setattr(remote, "time", Proxy(time, perf_counter_ns=lambda: next(ticks)))
    script = Script(seg([1, 2], "stop", chunks=[(2_000_000_000, 1), (2_250_000_000, 1)],
                        cached_tokens=3))
    engine = await scripted_engine(script, stream=True)
    t = Traced()
    try:
        resp = await t.call(engine, ModelRequest(input_ids=[4],
                                                 gconfig=GenerationConfig(max_new_tokens=8)))
    finally:
        await engine.close_async()
    assert resp.latency == 2.5 and resp.ttft == 1.0 and resp.itl == [0.25]
    assert resp.cached_tokens == 3
    assert resp.text is None  # the segment had no text: None, not ""
    s = t.frames().sessions.iloc[0]
    assert s[S.TTFT_S] == 1.0 and s[S.ITL_S] == 0.25


# -- server control: versions, pause, weights, the model, metrics ------------------------


def test_set_version_at_its_edges() -> None:
    engine = make_engine("sglang", "127.0.0.1:9")
    engine.set_version(0)
    assert engine.get_version() == 0
    engine.set_version(3)
    for bad in (-1, True, 1.5, "2"):
        with pytest.raises(ConfigError, match=f"^version must be an int >= 0, got {bad!r}$"):
            engine.set_version(bad)
    assert engine.get_version() == 3


def test_names_and_repr() -> None:
    mine = RemoteSGLangEngine("127.0.0.1:9", name="mine")
    theirs = RemotevLLMEngine(["127.0.0.1:9", "127.0.0.1:10"], name="theirs")
    assert (mine.name, theirs.name) == ("mine", "theirs")
    assert RemoteSGLangEngine("127.0.0.1:9").name == "sglang@127.0.0.1:9"
    assert repr(theirs) == ("RemotevLLMEngine(name='theirs', servers=['127.0.0.1:9', "
                            "'127.0.0.1:10'], routing='round_robin', state='unopened')")


async def test_a_closed_engine_refuses_control_calls() -> None:
    engine = make_engine("sglang", "127.0.0.1:9")
    await engine.close_async()
    with pytest.raises(ControllerStateError,
                       match=r"^engine sglang@127\.0\.0\.1:9 is closed; create a new one$"):
        await engine.pause_generation_async()
    assert engine.generation_paused is False  # reset when the pause failed


async def _ok(_: web.Request) -> web.Response:
    return web.json_response({})


async def test_pause_is_retried_logged_and_flagged(server: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    async def pause(request: web.Request) -> web.Response:
        calls.append(request.method)
        return web.Response(status=503, text="busy") if len(calls) == 1 else \
            web.json_response({})

    await server("/health", _ok)
    await server("/continue_generation", _ok)
    addr = await server("/pause_generation", pause)
    caplog.set_level(logging.DEBUG, logger="rollout_kit.engines")
    async with make_engine("sglang", addr) as engine:
        await engine.pause_generation_async()
        assert engine.generation_paused is True and calls == ["POST", "POST"]
        await engine.continue_generation_async()
        assert engine.generation_paused is False
    assert f"retrying /pause_generation on {addr} in" in caplog.text


async def test_a_refused_pause_leaves_generation_unpaused(server: Any) -> None:
    async def refuse(_: web.Request) -> web.Response:
        return web.Response(status=400, text="no")

    await server("/health", _ok)
    addr = await server("/pause_generation", refuse)
    async with make_engine("sglang", addr) as engine:
        with pytest.raises(EngineBadRequestError):
            await engine.pause_generation_async()
        assert engine.generation_paused is False


async def test_weights_from_disk_reach_every_server_with_the_version() -> None:
    async with serve("sglang", n=2, zero_latency=True) as cluster, \
            make_engine("sglang", cluster.addresses) as engine:
        await engine.update_weights_from_disk_async("/ckpt/7", 7)
        assert engine.get_version() == 7
        assert [s.weight_label for s in cluster.servers] == ["7", "7"]


async def test_a_failed_weight_update_names_the_server_and_keeps_the_version(
        server: Any) -> None:
    async def weights(_: web.Request) -> web.Response:
        return web.json_response({"success": False, "message": "no such file /ckpt/9"})

    await server("/health", _ok)
    addr = await server("/update_weights_from_disk", weights)
    async with make_engine("sglang", addr) as engine:
        with pytest.raises(EngineResponseError) as info:
            await engine.update_weights_from_disk_async("/ckpt/9", 9)
        assert engine.get_version() == 0
    assert str(info.value) == f"{addr} /update_weights_from_disk failed: no such file /ckpt/9"
    assert (info.value.server, info.value.endpoint) == (addr, "/update_weights_from_disk")


async def test_the_model_is_discovered_from_a_healthy_server() -> None:
    dead = f"127.0.0.1:{free_port()}"
    timeouts = Timeouts(request=5.0, total=20.0, setup=0.3, health=0.2)
    async with serve("vllm", n=1, zero_latency=True, model_name="sim/model-x") as cluster, \
            make_engine("vllm", [dead, *cluster.addresses], timeouts=timeouts) as engine:
        assert engine.router.down == (dead,)
        assert engine.model == "sim/model-x"


async def test_a_models_list_without_a_model_is_a_clear_error(server: Any) -> None:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    await server("/health", _ok)
    addr = await server("/v1/models", models)
    engine = make_engine("vllm", addr)
    try:
        with pytest.raises(EngineResponseError) as info:
            await engine.initialize_async()
    finally:
        await engine.close_async()
    assert str(info.value) == (f"{addr} /v1/models lists no model (IndexError); set "
                               "EngineConfig.model: {'object': 'list', 'data': []}")
    assert (info.value.server, info.value.endpoint) == (addr, "/v1/models")


async def test_a_models_list_of_another_kind_of_server_gives_the_hint(server: Any) -> None:
    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<html>hi</html>", content_type="text/html")

    await server("/health", _ok)
    addr = await server("/v1/models", html)
    engine = make_engine("vllm", addr)
    try:
        with pytest.raises(EngineError, match="is it an SGLang server"):
            await engine.initialize_async()
    finally:
        await engine.close_async()


async def test_control_requests_are_bounded_by_the_request_timeout(server: Any) -> None:
    gate = asyncio.Event()

    async def hang(_: web.Request) -> web.Response:
        await gate.wait()
        return web.json_response({})

    await server("/health", _ok)
    await server("/metrics", hang)
    addr = await server("/v1/models", hang)
    timeouts = Timeouts(request=0.2, total=20.0, setup=5.0, health=1.0)
    try:
        engine = make_engine("vllm", addr, timeouts=timeouts)
        with pytest.raises(EngineTimeoutError):
            await asyncio.wait_for(engine.initialize_async(), 20)
        await engine.close_async()
        async with make_engine("sglang", addr, timeouts=timeouts) as sg:
            with pytest.raises(EngineTimeoutError):
                await asyncio.wait_for(sg.server_metrics_async(), 20)
    finally:
        gate.set()


async def test_metrics_that_are_not_utf8_or_not_prometheus(server: Any) -> None:
    body = b'x_total{l="a\xffb"} 2\n'

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    await server("/health", _ok)
    addr = await server("/metrics", metrics)
    async with make_engine("sglang", addr) as engine:
        df = await engine.server_metrics_async()
        assert df.to_dict("records") == [{"server": addr, "metric": "x_total",
                                          "labels": {"l": "a\ufffdb"}, "value": 2.0}]
        body = b"<html>no metrics here</html>"
        with pytest.raises(EngineResponseError) as info:
            await engine.server_metrics_async()
    assert str(info.value).startswith(f"{addr} /metrics: not Prometheus text (")
    assert (info.value.server, info.value.endpoint) == (addr, "/metrics")


# -- bodies that do not follow the API ----------------------------------------------------

_HINT_SG = SGLangBackend.wrong_flavour_hint


def _cut(s: str, limit: int) -> str:
    return f"{s[:limit]}… [{len(s) - limit} more chars]"


async def test_a_body_off_the_api_names_the_error_and_the_body(server: Any) -> None:
    body = {"meta_info": {"finish_reason": {"type": "y" * 200}}, "output_ids": [1]}

    async def generate(_: web.Request) -> web.Response:
        return web.json_response(body)

    await server("/health", _ok)
    addr = await server("/generate", generate)
    async with make_engine("sglang", addr) as engine:
        with pytest.raises(EngineResponseError) as info:
            await engine.generate_async(req(max_new_tokens=4))
    err = "unknown finish reason '" + "y" * 200 + "'"
    assert str(info.value) == (
        f"{addr} /generate answered with a body that does not follow the sglang API "
        f"(ValueError: {_cut(err, 120)}): {_cut(repr(body), 200)}. {_HINT_SG}")
    assert (info.value.server, info.value.endpoint) == (addr, "/generate")


async def test_a_body_that_is_not_json_names_the_endpoint(server: Any) -> None:
    async def generate(_: web.Request) -> web.Response:
        return web.Response(text="not json at all", content_type="application/json")

    await server("/health", _ok)
    addr = await server("/generate", generate)
    async with make_engine("sglang", addr) as engine:
        with pytest.raises(EngineResponseError) as info:
            await engine.generate_async(req(max_new_tokens=4))
    assert (info.value.server, info.value.endpoint) == (addr, "/generate")
    assert f"{addr} /generate" in str(info.value)


def _sse(*events: object) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for e in events:
            await resp.write(b"data: " + json.dumps(e).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    return handler


_LONG_EVENT = {"meta_info": {"completion_tokens": 2}, "output_ids": [1], "text": "z" * 300}
_STREAM_BAD: list[tuple[list[object], str]] = [
    ([{"x": 1}], "(KeyError: 'meta_info'): {'x': 1}. "),
    ([_LONG_EVENT], "(ValueError: stream event lists 1 items but completion_tokens=2 after 0 "
                    f"tokens): {_cut(repr(_LONG_EVENT), 200)}. "),
]
# (parser.result() cannot fail once every event was fed: _add keeps tokens and logprobs
# of equal length, so the "<stream>" branch of _stream_once is defensive)


@pytest.mark.parametrize("events,detail", _STREAM_BAD)
async def test_a_stream_off_the_api_names_the_error_and_the_event(
        server: Any, events: list[object], detail: str) -> None:
    await server("/health", _ok)
    addr = await server("/generate", _sse(*events))
    async with make_engine("sglang", addr, stream=True) as engine:
        with pytest.raises(EngineResponseError) as info:
            await engine.generate_async(req(max_new_tokens=4))
    assert str(info.value) == (f"{addr} /generate answered with a body that does not follow "
                               f"the sglang API {detail}{_HINT_SG}")
    assert (info.value.server, info.value.endpoint) == (addr, "/generate")


async def test_a_stream_without_a_finish_reason(server: Any) -> None:
    await server("/health", _ok)
    addr = await server("/generate", _sse({"meta_info": {"completion_tokens": 1},
                                           "output_ids": [1], "text": "a"}))
    async with make_engine("sglang", addr, stream=True) as engine:
        with pytest.raises(EngineResponseError) as info:
            await engine.generate_async(req(max_new_tokens=4))
    assert str(info.value) == f"{addr} /generate: the stream ended without a finish reason"
    assert (info.value.server, info.value.endpoint) == (addr, "/generate")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_streamed_or_whole_call_to_another_flavour_gives_the_hint(stream: bool) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster, \
            make_engine("sglang", cluster.addresses, stream=stream) as engine:
        with pytest.raises(EngineError, match="is it a vLLM"):
            await engine.generate_async(req(max_new_tokens=4))


# -- the retry path: which server, its timeout, its headers -------------------------------


def _spy_started(engine: Any) -> list[str]:
    """The servers each attempt went to, in order."""
    seen: list[str] = []
    started = engine.router.started

    def spy(server: str) -> None:
        seen.append(server)
        started(server)

    engine.router.started = spy
    return seen


async def test_a_retry_leaves_every_failed_server_and_is_remembered() -> None:
    policy = RetryPolicy(max_retries=4, initial_delay=0.001, max_delay=0.002)
    async with serve("sglang", n=3, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine("sglang", cluster.addresses, routing="sticky", retry=policy) as engine:
        for s in cluster.servers:
            s.faults.force("error", 1, status=500)
        seen = _spy_started(engine)
        resp = await engine.generate_async(ModelRequest(
            rid="t1:0", input_ids=[1, 2], gconfig=GenerationConfig(max_new_tokens=4)))
        # three servers fail in turn (each once); the fourth attempt may go back to one
        assert len(set(seen[:3])) == 3 and resp.retries == 3 and resp.server == seen[3]
        again = await engine.generate_async(ModelRequest(
            rid="t1:1", input_ids=[1, 2], gconfig=GenerationConfig(max_new_tokens=4)))
        assert again.server == resp.server and again.retries == 0  # sticky: where it ended


async def test_a_refused_retry_takes_the_server_out_of_rotation() -> None:
    policy = RetryPolicy(max_retries=3, initial_delay=0.001, max_delay=0.002)
    async with serve("sglang", n=2, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine("sglang", cluster.addresses, routing="sticky", retry=policy,
                        health_probe_interval=3600.0) as engine:
        first = engine.router.choose("t1")  # the task's server from now on
        i = engine.servers.index(first)
        cluster.servers[i].faults.force("error", 1, status=500)
        await cluster.servers[1 - i].stop()
        resp = await engine.generate_async(ModelRequest(
            rid="t1:0", input_ids=[1, 2], gconfig=GenerationConfig(max_new_tokens=4)))
    assert engine.router.down == (engine.servers[1 - i],)
    assert resp.server == first and resp.retries == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_retry_has_its_timeout_and_the_traceparent(
        stream: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts = Timeouts(request=0.2, total=20.0, setup=5.0, health=1.0)
    policy = RetryPolicy(max_retries=3, initial_delay=0.001, max_delay=0.002)
    async with serve("sglang", n=1, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine("sglang", cluster.addresses, stream=stream, timeouts=timeouts,
                        retry=policy) as engine:
        sim = cluster.servers[0].engine
        parents: list[str | None] = []
        run = sim.run

        async def recorded(seq: Any, emit: Any) -> None:
            parents.append(seq.trace_parent)
            await run(seq, emit)

        monkeypatch.setattr(sim, "run", recorded)
        cluster.servers[0].faults.force("hang", 2)  # the first attempt and the first retry
        t = Traced()
        resp = await asyncio.wait_for(t.call(engine, req(max_new_tokens=4)), 20)
        assert resp.retries == 2 and resp.output_tokens
        cluster.servers[0].faults.force("error", 1, status=500)
        resp = await t.call(engine, req(max_new_tokens=4))
        assert resp.retries == 1
    assert len(parents) == 2 and all(p is not None and p.startswith("00-") for p in parents)


# -- waiting while paused: both polls, their backoff ---------------------------------------


class PollSleeps:
    """``asyncio.sleep`` of the engine module: records each delay, and on the ``n``-th runs
    ``then`` (which ends the pause), so the number of polls is fixed."""

    def __init__(self, n: int, then: Callable[[], Awaitable[None]]) -> None:
        self.n, self.then = n, then
        self.delays: list[float] = []
        self._sleep = asyncio.sleep

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        if len(self.delays) == self.n:
            await self.then()
        await self._sleep(0)


def _after_first_run(sim: Any, monkeypatch: pytest.MonkeyPatch,
                     then: Callable[[], Awaitable[None]]) -> None:
    """Run ``then`` once, on the server, after its first sequence ran (before it answers)."""
    run = sim.run
    done: list[bool] = []

    async def wrapped(seq: Any, emit: Any) -> None:
        await run(seq, emit)
        if not done:
            done.append(True)
            await then()

    monkeypatch.setattr(sim, "run", wrapped)


async def test_vllm_continuation_polls_is_paused_with_backoff(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with serve("vllm", n=1, zero_latency=True, answer_fn=answer("z" * 100)) as cluster, \
            make_engine("vllm", cluster.addresses, pause_poll_interval=0.3) as engine:
        sim = cluster.servers[0].engine

        async def resume() -> None:
            sim.resume()

        sleeps = PollSleeps(3, resume)
        monkeypatch.setattr(control, "asyncio", Proxy(asyncio, sleep=sleeps))  # the pause wait
        # paused by someone else (not this engine): only /is_paused tells
        _after_first_run(sim, monkeypatch, lambda: sim.pause("abort"))
        cluster.servers[0].faults.force("abort", 1)
        resp = await engine.generate_async(req(max_new_tokens=40))
    assert sleeps.delays == [0.3, 0.6, 1.0]  # doubled, capped at 1 s; resumed at the third
    assert resp.n_continuations == 1 and len(resp.output_tokens) == 40


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_continuation_waits_for_continue_generation(
        flavour: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with serve(flavour, n=1, zero_latency=True,
                     answer_fn=answer("z" * 100)) as cluster, \
            make_engine(flavour, cluster.addresses, pause_poll_interval=0.3) as engine:
        sleeps = PollSleeps(99, engine.continue_generation_async)  # records any poll
        monkeypatch.setattr(control, "asyncio", Proxy(asyncio, sleep=sleeps))  # the pause wait
        _after_first_run(cluster.servers[0].engine, monkeypatch,
                         engine.pause_generation_async)
        cluster.servers[0].faults.force("abort", 1)
        call = asyncio.ensure_future(engine.generate_async(req(max_new_tokens=40)))
        while engine._control._resumed is None and not call.done():  # until it waits
            await asyncio.sleep(0)
        assert not call.done() and engine._control.paused
        await engine.continue_generation_async()
        resp = await call
    # the engine's own pause wakes the continuation when continue_generation ends it (no
    # polling, so it resumes at once); then (vLLM) /is_paused says no at once
    assert sleeps.delays == []
    assert resp.n_continuations == 1 and len(resp.output_tokens) == 40


# -- the trajectory dump of a call, field by field ----------------------------------------


async def test_the_dump_record_of_each_call_on_a_fake_clock(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # each call reads perf_counter_ns for its t0, its end and the dump's start_wall
    ticks = iter([1_000_000_000, 3_500_000_000, 3_500_000_000,
                  10_000_000_000, 10_500_000_000])
    clock = Proxy(time, perf_counter_ns=lambda: next(ticks), time=lambda: 2_000.0)
    monkeypatch.setattr(remote, "time", clock)
    monkeypatch.setattr(recording, "time", clock)  # the record's start_wall
    boom = EngineServerError("s9:1 /v1/completions answered HTTP 500: x", status=500,
                             server="s9:1")  # another server than the aborted segment's
    script = Script(seg([1, 2], "stop", text="ab", chunks=[(2_000_000_000, 2)]),
                    seg([3], "abort"), boom)
    engine = await scripted_engine(script, "vllm", model="the-model")
    tracer = Tracer(dump=TrajectoryDump(tmp_path))
    tracer.register_task(0)
    try:
        with tracer.task_scope(0):
            async with tracer.session():
                await engine.generate_async(ModelRequest(
                    rid="t0:0", input_ids=[4], gconfig=GenerationConfig(max_new_tokens=8)))
            async with tracer.session():
                with pytest.raises(EngineServerError):
                    await engine.generate_async(ModelRequest(
                        rid="t0:1", input_ids=[5], gconfig=GenerationConfig(max_new_tokens=8)))
    finally:
        await engine.close_async()
    tracer.finalize(0, "accepted")
    tracer.flush()
    ok, failed = (row for _, row in load_dump(tmp_path).iterrows())
    assert (ok["rid"], ok["engine"], ok["flavour"], ok["model"]) == \
        ("t0:0", engine.name, "vllm", "the-model")
    assert (ok["status"], ok["stop_reason"], ok["output_text"], ok["server"]) == \
        ("ok", "stop", "ab", "s1:1")
    assert ok["latency_s"] == 2.5 and ok["ttft_s"] == 1.0 and ok["start_wall"] == 1_997.5
    assert (failed["status"], failed["server"]) == ("failed", "s9:1")
    assert ok["seed_source"] == failed["seed_source"] == "derived"
    assert ok["segments"] == [{"prefix": 0, "max_new_tokens": 8, "n_tokens": 2,
                               "stop_reason": "stop", "server": "s1:1", "version": 0}]
    assert failed["segments"] == [{"prefix": 0, "max_new_tokens": 8, "n_tokens": 1,
                                   "stop_reason": "abort", "server": "s2:1", "version": 0}]
    assert pd.isna(failed["stop_reason"])
    assert pd.isna(failed["output_text"])  # no text came back: missing, not ""
    assert failed["output_ids"] == [3] and math.isnan(failed["ttft_s"])
    assert math.isnan(failed["latency_s"]) and failed["start_wall"] == 1_999.5
    assert "HTTP 500" in failed["error"]


async def test_versions_are_stamped_as_stream_tokens_arrive(server: Any) -> None:
    fed = asyncio.Event()

    async def generate(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = {"meta_info": {"completion_tokens": 1}, "output_ids": [1], "text": "a"}
        await resp.write(b"data: " + json.dumps(first).encode() + b"\n\n")
        await fed.wait()  # the engine has the first token
        engine.set_version(1)
        last = {"meta_info": {"completion_tokens": 2, "finish_reason": {"type": "stop"}},
                "output_ids": [1, 2], "text": "ab"}
        await resp.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    await server("/health", _ok)
    addr = await server("/generate", generate)
    engine = make_engine("sglang", addr, stream=True)
    make_parser = engine.backend.stream_parser

    def spied() -> Any:
        parser = make_parser()
        feed = parser.feed

        def fed_once(event: Any, t_ns: int) -> None:
            feed(event, t_ns)
            fed.set()

        parser.feed = fed_once  # type: ignore[method-assign]
        return parser

    engine._api = engine._api._replace(stream_parser=spied)
    async with engine:
        resp = await engine.generate_async(req(max_new_tokens=4))
    assert resp.output_tokens == [1, 2] and resp.output_versions == [0, 1]


async def test_a_retried_task_stays_sticky_to_the_server_that_answered() -> None:
    policy = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002)
    async with serve("sglang", n=2, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine("sglang", cluster.addresses, routing="sticky", retry=policy) as engine:
        first = engine.router.choose("t1")
        i = engine.servers.index(first)
        cluster.servers[i].faults.force("error", 1, status=500)
        resp = await engine.generate_async(ModelRequest(
            rid="t1:0", input_ids=[1, 2], gconfig=GenerationConfig(max_new_tokens=4)))
        assert resp.server == engine.servers[1 - i] and resp.retries == 1
        again = await engine.generate_async(ModelRequest(
            rid="t1:1", input_ids=[1, 2], gconfig=GenerationConfig(max_new_tokens=4)))
    assert again.server == engine.servers[1 - i]  # the task moved with its retry


async def test_too_many_aborts_name_the_server_and_endpoint() -> None:
    script = Script(seg([1], "abort"), seg([2], "abort"))
    engine = await scripted_engine(script, max_continuations=1)
    try:
        with pytest.raises(EngineError) as info:
            await engine.generate_async(ModelRequest(input_ids=[1], gconfig=GenerationConfig(
                max_new_tokens=8)))
    finally:
        await engine.close_async()
    assert str(info.value) == ("s2:1 aborted the generation 2 times in a row "
                               "(EngineConfig.max_continuations=1)")
    assert (info.value.server, info.value.endpoint) == ("s2:1", "/generate")


async def test_the_route_key_of_the_metadata_and_one_sample_per_call() -> None:
    script = Script(seg([1], "stop"))
    engine = await scripted_engine(script)
    try:
        await engine.generate_async(ModelRequest(rid="t3:1", input_ids=[1],
                                                 metadata={"route_key": "conversation-9"}))
        with pytest.raises(ConfigError) as info:
            await engine.generate_async(ModelRequest(input_ids=[1], gconfig=GenerationConfig(
                n_samples=2)))
    finally:
        await engine.close_async()
    assert script.calls[0]["key"] == "conversation-9"
    assert str(info.value) == ("generate_async takes n_samples=1 (got 2); send one request per "
                               "sample")


# -- small promises of the engine object ----------------------------------------------------


async def test_engine_defaults_names_and_refusals() -> None:
    both = RemoteSGLangEngine(["127.0.0.1:9", "127.0.0.1:10"])
    assert both.name == "sglang@127.0.0.1:9,127.0.0.1:10"
    assert both.generation_paused is False  # False, not just falsy, before any pause
    with pytest.raises(ConfigError, match=r"^config must be an EngineConfig, got dict$"):
        RemoteSGLangEngine("127.0.0.1:9", config={})  # type: ignore[arg-type]
    await both.close_async()
    with pytest.raises(ControllerStateError, match=r"^engine sglang@127\.0\.0\.1:9,127\.0\.0\.1"
                                                   r":10 is closed; create a new one$"):
        await both.initialize_async()


async def test_a_continuation_stays_on_its_server_and_in_flight_counts_return_to_zero() -> None:
    async with serve("sglang", n=2, zero_latency=True, answer_fn=answer("z" * 100)) as cluster, \
            make_engine("sglang", cluster.addresses) as engine:
        assert engine._probe_task is not None
        assert engine._probe_task.get_name() == f"rollout_kit health probe {engine.name}"
        for s in cluster.servers:
            s.faults.force("abort", 1)
        seen = _spy_started(engine)
        resp = await engine.generate_async(req(max_new_tokens=30))
        assert resp.n_continuations == 1 and len(seen) == 2 and seen[0] == seen[1]
        assert [engine.router.in_flight(s) for s in engine.servers] == [0, 0]


async def test_a_streamed_call_of_one_chunk_has_no_itl() -> None:
    script = Script(seg([1, 2], "stop", chunks=[(5, 2)]))
    engine = await scripted_engine(script, stream=True)
    t = Traced()
    try:
        resp = await t.call(engine, ModelRequest(input_ids=[4]))
    finally:
        await engine.close_async()
    assert resp.itl == [] and math.isnan(t.frames().sessions.iloc[0][S.ITL_S])


async def test_an_address_nobody_listens_on_fails_in_seconds_for_every_task() -> None:
    """Tasks queued behind a failed start get its error at once, not a new wait each."""
    import rollout_kit as rk

    dead = f"127.0.0.1:{free_port()}"
    ctl = rk.RolloutController(sglang=[dead])
    try:
        t0 = time.monotonic()
        results = await ctl.rollout_batch_async(["hi"] * 20, rk.SingleTurnWorkflow(
            lambda *args, **kw: 1.0))
        took = time.monotonic() - t0
    finally:
        await ctl.close_async()
    assert {r.reason for r in results} == {"no_healthy_server"}
    assert dead in str(results[0].error) and "Timeouts.refused" in str(results[0].error)
    # one Timeouts.refused (2 s) wait for the batch, not 20 of them or a 60 s setup wait
    assert took < Timeouts().setup / 2
