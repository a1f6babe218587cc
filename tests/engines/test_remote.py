"""RemoteSGLangEngine / RemotevLLMEngine against the simulator (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest

from rollout_kit import (
    ConfigError,
    ControllerStateError,
    EngineBadRequestError,
    EngineConfig,
    EngineError,
    GenerationConfig,
    ModelRequest,
    NoHealthyServerError,
    RetryPolicy,
    Timeouts,
)
from rollout_kit.engines import RemoteSGLangEngine
from rollout_kit.sim import serve, serve_in_thread

from ..sim.helpers import until
from .conftest import FLAVOURS, TOK, answer, free_port, make_engine, req


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("stream", [False, True])
async def test_generate_parses_tokens_and_logprobs(flavour: str, stream: bool) -> None:
    async with serve(flavour, n=1, time_scale=0.01, answer_fn=answer("four")) as cluster, \
            make_engine(flavour, cluster.addresses, stream=stream) as engine:
        r = req(max_new_tokens=32)
        resp = await engine.generate_async(r)
    assert resp.output_tokens == [*TOK.encode("four"), TOK.eos_token_id]
    assert len(resp.output_logprobs) == len(resp.output_tokens)
    assert all(lp <= 0 and not math.isnan(lp) for lp in resp.output_logprobs)
    assert resp.output_versions == [0] * len(resp.output_tokens)
    assert resp.input_tokens == r.input_ids and resp.stop_reason == "stop"
    assert resp.server == cluster.addresses[0].removeprefix("http://")
    assert resp.n_continuations == 0 and resp.retries == 0 and resp.latency > 0
    assert "e2e_s" in resp.server_timing
    if stream:  # measured from the stream, not copied from the total latency
        assert 0 < resp.ttft < resp.latency
        assert len(resp.itl) == len(resp.output_tokens) - 1 and all(x >= 0 for x in resp.itl)
    else:
        assert math.isnan(resp.ttft) and resp.itl == []


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("stream", [False, True])
async def test_without_logprobs_ids_come_back_and_logprobs_are_nan(flavour: str,
                                                                   stream: bool) -> None:
    async with serve(flavour, n=1, time_scale=0.01, answer_fn=answer("four")) as cluster, \
            make_engine(flavour, cluster.addresses, stream=stream) as engine:
        resp = await engine.generate_async(req(max_new_tokens=32, logprobs=False))
    assert resp.output_tokens == [*TOK.encode("four"), TOK.eos_token_id]
    assert len(resp.output_logprobs) == len(resp.output_tokens)
    assert all(math.isnan(lp) for lp in resp.output_logprobs)
    assert resp.stop_reason == "stop"


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_text_prompt_gets_prompt_ids_from_server(flavour: str) -> None:
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("ok")) as cluster, \
            make_engine(flavour, cluster.addresses) as engine:
        resp = await engine.generate_async(ModelRequest(text="hello"))
    assert resp.output_tokens == [*TOK.encode("ok"), TOK.eos_token_id]
    assert resp.input_tokens == TOK.encode("hello")
    assert resp.text == "ok"


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("stream", [False, True])
async def test_abort_continue_across_pause_and_version_bump(flavour: str, stream: bool) -> None:
    long_answer = "x" * 400
    async with serve(flavour, n=2, itl_s=0.004, jitter_cv=0.0,
                     answer_fn=answer(long_answer)) as cluster, \
            make_engine(flavour, cluster.addresses, stream=stream) as engine:
        task = asyncio.create_task(engine.generate_async(req(max_new_tokens=120)))
        # some tokens are out (120 take 0.48 s): the pause aborts a partial output
        await until(lambda: any(q.n_done > 0 for s in cluster for q in s.engine.live),
                    "a first token")
        await engine.pause_generation_async()
        if flavour == "sglang":
            await engine.update_weights_from_disk_async("/ckpt/step1", 1)
        else:
            engine.set_version(1)
        await asyncio.sleep(0.05)
        assert not task.done()  # held while paused
        await engine.continue_generation_async()
        resp = await task
    # the full original budget, not what was left after the abort (AReaL #858)
    assert len(resp.output_tokens) == 120 and resp.stop_reason == "length"
    assert resp.output_tokens == TOK.encode(long_answer[:120])
    assert resp.n_continuations >= 1
    v = resp.output_versions
    first_new = v.index(1)
    assert 0 < first_new < 120 and v == [0] * first_new + [1] * (120 - first_new)
    assert engine.get_version() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_abort_fault_is_continued(flavour: str) -> None:
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("y" * 200)) as cluster, \
            make_engine(flavour, cluster.addresses) as engine:
        cluster.servers[0].faults.force("abort", 2)
        resp = await engine.generate_async(req(max_new_tokens=64))
    # partial outputs are kept and the budget is the original one
    assert resp.output_tokens == TOK.encode("y" * 64) and len(resp.output_logprobs) == 64
    assert resp.n_continuations == 2 and resp.stop_reason == "length"


FAULTS: list[tuple[str, int | None, bool]] = [
    ("error", 500, False), ("error", 502, False), ("error", 503, False), ("error", 429, False),
    ("hang", None, False), ("reset", None, False), ("reset", None, True),
    ("malformed", None, False), ("malformed", None, True), ("truncate", None, False),
    ("truncate", None, True),
]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("kind,status,stream", FAULTS)
async def test_retries_each_fault_kind(flavour: str, kind: str, status: int | None,
                                       stream: bool) -> None:
    timeouts = Timeouts(request=0.5, total=10.0, setup=5.0, health=1.0)
    async with serve(flavour, n=1, zero_latency=True, answer_fn=answer("fine")) as cluster, \
            make_engine(flavour, cluster.addresses, stream=stream,
                        timeouts=timeouts) as engine:
        plan = cluster.servers[0].faults
        plan.update(retry_after_s=0.01)
        if status is None:
            plan.force(kind)  # type: ignore[arg-type]
        else:
            plan.force(kind, status=status)  # type: ignore[arg-type]
        resp = await engine.generate_async(req(max_new_tokens=16))
    assert resp.output_tokens == [*TOK.encode("fine"), TOK.eos_token_id]
    assert resp.retries == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_no_retry_on_400(flavour: str, caplog: pytest.LogCaptureFixture) -> None:
    # a retry would be quick (10 ms) and logged: the test reads the log, not a clock
    caplog.set_level(logging.DEBUG, logger="rollout_kit.engines")
    eager = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.01)
    async with serve(flavour, n=1, zero_latency=True, context_length=64) as cluster, \
            make_engine(flavour, cluster.addresses, retry=eager) as engine:
        with pytest.raises(EngineBadRequestError) as info:
            await engine.generate_async(req("p" * 100, max_new_tokens=8, max_tokens=10_000))
    assert [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()] == []
    assert info.value.status == 400 and info.value.server in str(info.value)
    assert "p" * 100 not in str(info.value)


async def test_round_robin_spreads_and_sticky_keeps_server() -> None:
    async with serve("sglang", n=2, zero_latency=True) as cluster:
        async with make_engine("sglang", cluster.addresses) as rr:
            servers = [(await rr.generate_async(req(max_new_tokens=4))).server for _ in range(8)]
        assert servers.count(rr.servers[0]) == 4 and servers.count(rr.servers[1]) == 4
        async with make_engine("sglang", cluster.addresses, routing="sticky") as sticky:
            by_task: dict[str, set[str | None]] = {}
            for task in ("t0", "t1", "t2", "t3"):
                rs = [ModelRequest(rid=f"{task}:{i}", input_ids=[5, 6, 7],
                                   gconfig=GenerationConfig(max_new_tokens=4)) for i in range(4)]
                out = await asyncio.gather(*(sticky.generate_async(r) for r in rs))
                by_task[task] = {o.server for o in out}
        assert all(len(s) == 1 for s in by_task.values())
        assert len(set().union(*by_task.values())) == 2  # tasks still spread over servers


async def test_least_in_flight_balances_concurrent_requests() -> None:
    async with serve("vllm", n=2, time_scale=0.01) as cluster, \
            make_engine("vllm", cluster.addresses, routing="least_in_flight") as engine:
        out = await asyncio.gather(*(engine.generate_async(req(max_new_tokens=8))
                                     for _ in range(40)))
    counts = [sum(o.server == s for o in out) for s in engine.servers]
    assert sum(counts) == 40 and abs(counts[0] - counts[1]) <= 2


async def test_dead_server_leaves_rotation_and_is_probed_back() -> None:
    async with serve("sglang", n=2, zero_latency=True) as cluster, \
            make_engine("sglang", cluster.addresses) as engine:
        dead = engine.servers[1]
        await cluster.servers[1].stop()
        out = [await engine.generate_async(req(max_new_tokens=4)) for _ in range(6)]
        assert all(o.server == engine.servers[0] for o in out)
        assert engine.router.down == (dead,)
        assert (await engine.health_async()) == {engine.servers[0]: True, dead: False}
        await cluster.servers[1].start()
        for _ in range(100):
            if not engine.router.down:
                break
            await asyncio.sleep(0.02)
        assert engine.router.down == ()
        out = [await engine.generate_async(req(max_new_tokens=4)) for _ in range(4)]
        assert {o.server for o in out} == set(engine.servers)


async def test_thousand_concurrent_requests_on_one_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1,200 requests open at once on one engine: no client-side limit, no retry.

    The simulator holds every admitted sequence until all 1,200 are admitted, so they are
    provably concurrent however slowly this machine pushes them through (no race between
    sending the last request and the first ones finishing). Only the holding is timed, by
    the test's own timeout: a request timeout would measure the machine, not the engine.
    """
    n = 1200
    peak = 0

    async def watch(engine: Any) -> None:
        nonlocal peak
        while True:
            peak = max(peak, engine.router.in_flight(engine.servers[0]))
            await asyncio.sleep(0.005)

    async with serve("sglang", n=1, itl_s=0.1, jitter_cv=0.0, max_num_seqs=2048) as cluster, \
            make_engine("sglang", cluster.addresses,
                        timeouts=Timeouts(request=600, total=600, setup=5, health=1)) as engine:
        sim = cluster[0].engine
        all_admitted = asyncio.Event()
        run = sim.run

        async def held_run(seq: Any, emit: Any) -> None:
            if sim.running >= n:
                all_admitted.set()
            await all_admitted.wait()
            await run(seq, emit)

        monkeypatch.setattr(sim, "run", held_run)
        watcher = asyncio.create_task(watch(engine))
        out = await asyncio.gather(*(engine.generate_async(req(f"prompt {i}", max_new_tokens=4))
                                     for i in range(n)))
        watcher.cancel()
    assert len(out) == n and all(1 <= len(o.output_tokens) <= 4 for o in out)
    assert peak >= 1000 and all(o.retries == 0 for o in out)


async def test_initialize_unreachable_names_address_within_bound() -> None:
    port = free_port()
    timeouts = Timeouts(setup=0.5, health=0.2)
    engine = RemoteSGLangEngine(f"127.0.0.1:{port}", config=EngineConfig(timeouts=timeouts))
    # it gives up on its bound and says which; no wall clock is compared (a loaded machine
    # stretches any time), a hang would meet the test's timeout
    with pytest.raises(NoHealthyServerError, match=f"127.0.0.1:{port}") as info:
        await engine.initialize_async()
    assert "(Timeouts.refused)" in str(info.value) or "(Timeouts.setup)" in str(info.value)
    await engine.close_async()


@pytest.mark.parametrize("client,server", [("sglang", "vllm"), ("vllm", "sglang")])
async def test_wrong_flavour_gives_a_hint(client: str, server: str) -> None:
    async with serve(server, n=1, zero_latency=True) as cluster:
        engine = make_engine(client, cluster.addresses)
        try:
            with pytest.raises(EngineError) as info:
                await engine.generate_async(req(max_new_tokens=4))
        finally:
            await engine.close_async()
    other = "vLLM" if server == "vllm" else "SGLang"
    assert other in str(info.value)


async def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    from rollout_kit.tracing import Tracer

    secret = "sk-very-secret-123"
    caplog.set_level(logging.DEBUG)
    tracer = Tracer()
    async with serve("vllm", n=1, zero_latency=True, context_length=64) as cluster, \
            make_engine("vllm", cluster.addresses, api_key=secret) as engine:
        cluster.servers[0].faults.force("error", 1, status=500)
        tracer.register_task(0)
        with tracer.task_scope(0):
            async with tracer.session():
                ok = await engine.generate_async(req(max_new_tokens=4))
            with pytest.raises(EngineBadRequestError) as info:
                async with tracer.session():
                    await engine.generate_async(req("q" * 100, max_new_tokens=4))
        tracer.finalize(0, "accepted")
        texts = [repr(engine), repr(engine.config), str(info.value), repr(info.value),
                 info.value.body, caplog.text, tracer.sessions_df().to_string(), repr(ok)]
    assert all(secret not in t for t in texts)
    sessions = tracer.sessions_df()
    assert sessions["retries"].iloc[0] == 1 and sessions["http_status"].iloc[1] == 400
    assert sessions["server"].iloc[0] == engine.servers[0]


async def test_garbage_and_html_bodies_are_clear_errors() -> None:
    from aiohttp import web

    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<!DOCTYPE html><html>hello</html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", html)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with make_engine("sglang", f"127.0.0.1:{port}") as engine:
            with pytest.raises(EngineError, match="HTML") as info:
                await engine.generate_async(req(max_new_tokens=4))
        assert f"127.0.0.1:{port}" in str(info.value) and "vLLM" in str(info.value)
    finally:
        await runner.cleanup()


async def test_lifecycle_config_errors_and_observability() -> None:
    async with serve("sglang", n=2, zero_latency=True) as cluster:
        engine = make_engine("sglang", cluster.addresses)
        with pytest.raises(ConfigError, match="n_samples"):
            await engine.generate_async(req(n_samples=2))
        with pytest.raises(ConfigError, match="no room"):
            await engine.generate_async(req("abcd", max_tokens=4))
        assert await engine.health_async() == dict.fromkeys(engine.servers, True)
        metrics = await engine.server_metrics_async()
        assert list(metrics.columns) == ["server", "metric", "labels", "value"]
        assert set(metrics["server"]) == set(engine.servers)
        assert metrics["metric"].str.startswith("sglang:").any()
        await engine.close_async()
        await engine.close_async()  # idempotent
        with pytest.raises(ControllerStateError):
            await engine.generate_async(req())


def test_session_per_event_loop() -> None:
    """The engine used from two loops in turn gets a fresh session on each."""
    async def one() -> int:
        return len((await engine.generate_async(req(max_new_tokens=4))).output_tokens)

    with serve_in_thread("sglang", n=1, zero_latency=True) as cluster:
        engine = make_engine("sglang", cluster.addresses)
        first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
        try:
            assert first.run_until_complete(one()) > 0
            assert second.run_until_complete(one()) > 0
            assert first.run_until_complete(one()) > 0
        finally:
            second.run_until_complete(engine.close_async())
            for loop in (first, second):
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
