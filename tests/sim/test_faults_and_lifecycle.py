"""Every fault kind in both flavours, stop/restart on the same port, the latency model,
serve_in_thread and the CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import aiohttp
import orjson
import pytest

from rollout_kit import ConfigError
from rollout_kit.sim import FaultPlan, SimConfig, SimServer, serve, serve_in_thread

from .helpers import post, sse, until

pytestmark = pytest.mark.timeout(60)

GEN = {
    "sglang": ("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 20,
                                                                   "ignore_eos": True}}),
    "vllm": ("/v1/completions", {"prompt": "hello", "max_tokens": 20, "ignore_eos": True}),
}


def _tokens(api: str, body: dict) -> int:
    if api == "sglang":
        return len(body["output_ids"])
    return body["usage"]["completion_tokens"]


@pytest.mark.parametrize("api", ["sglang", "vllm"])
async def test_fault_kinds(api: str) -> None:
    path, body = GEN[api]
    async with serve(api, time_scale=0.01) as c, aiohttp.ClientSession() as s:
        srv = c[0]
        url = c.url + path
        # error with Retry-After, forced for exactly the next 2 requests
        srv.set_faults(force={"kind": "error", "count": 2, "status": 503}, retry_after_s=2)
        for _ in range(2):
            async with s.post(url, json=body) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "2"
                err = await r.json()
                assert err.get("code", (err.get("error") or {}).get("code")) == 503
        st, ok = await post(s, url, body)
        assert st == 200 and _tokens(api, ok) == 20
        # 500 / 429 through the admin route
        async with s.post(c.url + "/sim/faults",
                          json={"force": {"kind": "error", "status": 429}}) as r:
            assert r.status == 200 and (await r.json())["forced"][0]["status"] == 429
        async with s.post(url, json=body) as r:
            assert r.status == 429 and "Retry-After" in r.headers
        # malformed JSON body (HTTP 200)
        srv.set_faults(force={"kind": "malformed"})
        async with s.post(url, json=body) as r:
            raw = await r.read()
            assert r.status == 200
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(raw)
        # truncated stream: no [DONE]
        srv.set_faults(force={"kind": "truncate"})
        st, events = await sse(s, url, {**body, "stream": True})
        assert st == 200 and events and "[DONE]" not in events
        # malformed SSE event
        srv.set_faults(force={"kind": "malformed"})
        async with s.post(url, json={**body, "stream": True}) as r:
            raw = await r.read()
        first = raw.split(b"\n\n")[0][len(b"data: "):]
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(first)
        # connection reset, non-stream and mid-stream
        srv.set_faults(force={"kind": "reset", "count": 2})
        with pytest.raises(aiohttp.ClientError):
            async with s.post(url, json=body) as r:
                await r.read()
        got_some = False
        with pytest.raises(aiohttp.ClientError):
            async with s.post(url, json={**body, "stream": True}) as r:
                async for _line in r.content:
                    got_some = True
        assert got_some
        # abort fault: partial output with an abort finish reason
        srv.set_faults(force={"kind": "abort"})
        st, res = await post(s, url, body)
        assert st == 200 and _tokens(api, res) == 10
        if api == "sglang":
            assert res["meta_info"]["finish_reason"]["type"] == "abort"
        else:
            assert res["choices"][0]["finish_reason"] == "abort"
        # slow first byte
        srv.set_faults(force={"kind": "slow_first_byte"}, slow_first_byte_s=0.3)
        t0 = time.perf_counter()
        st, _ = await post(s, url, body)
        assert st == 200 and time.perf_counter() - t0 >= 0.3
        # hang: no answer until the client gives up
        hanging = _count_hangs(srv)
        srv.set_faults(force={"kind": "hang"})

        async def hung() -> None:
            async with s.post(url, json=body,
                              timeout=aiohttp.ClientTimeout(total=0.3)) as r:
                await r.read()

        req = asyncio.create_task(hung())
        await until(lambda: hanging[0] == 1, "the server hangs on the request")
        with pytest.raises(asyncio.TimeoutError):
            await req
        # the client gave up: the server drops the hung handler, holding no slot
        await until(lambda: hanging[0] == 0, "the server dropped the hung request")
        assert srv.engine.running == 0 and not srv.engine.live
        async with s.get(c.url + "/sim/state") as r:
            state = await r.json()
        assert state["faults"]["forced"] == [] and state["running"] == 0
        # invalid admin input is a 400, never a crash
        async with s.post(c.url + "/sim/faults", json={"error_rate": 7}) as r:
            assert r.status == 400 and "error_rate" in (await r.json())["error"]
        st, ok = await post(s, url, body)
        assert st == 200


def _count_hangs(srv: SimServer) -> list[int]:
    """``[n]``: how many requests hang in ``srv`` now (a pass-through wrapper on its
    engine's ``hang``)."""
    count = [0]
    inner = srv.engine.hang

    async def hang() -> None:
        count[0] += 1
        try:
            await inner()
        finally:
            count[0] -= 1

    srv.engine.hang = hang  # type: ignore[method-assign]
    return count


async def test_seeded_error_rate_is_deterministic() -> None:
    async def statuses() -> list[int]:
        cfg = SimConfig(zero_latency=True, faults=FaultPlan(error_rate=0.5, seed=11,
                                                            error_statuses=(500, 502)))
        out = []
        async with serve("vllm", config=cfg) as c, aiohttp.ClientSession() as s:
            for _ in range(30):
                async with s.post(c.url + "/v1/completions",
                                  json={"prompt": "x", "max_tokens": 1}) as r:
                    out.append(r.status)
        return out

    a, b = await statuses(), await statuses()
    assert a == b and {200, 500, 502} <= set(a)


async def test_stop_and_restart_on_same_port() -> None:
    async with serve("sglang", 2, time_scale=0.01) as c, aiohttp.ClientSession() as s:
        srv = c[0]
        port = srv.port
        st, _ = await post(s, c.url + "/update_weights_from_disk", {"model_path": "/x"})
        inflight = asyncio.create_task(post(s, srv.url + "/generate", {
            "text": "a", "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}))
        # in flight: stop() drops its connection before this loop runs anything else
        await until(lambda: srv.engine.running == 1, "the request runs")
        await srv.stop()
        with pytest.raises(aiohttp.ClientError):
            await inflight
        with pytest.raises(aiohttp.ClientConnectionError):
            async with s.get(srv.url + "/health") as r:
                await r.read()
        async with s.get(c[1].url + "/health") as r:  # the other server is unaffected
            assert r.status == 200
        await srv.start()
        assert srv.port == port and srv.weight_version == 1
        async with s.get(srv.url + "/health") as r:
            assert r.status == 200
        st, body = await post(s, srv.url + "/generate", {"text": "a",
                                                         "sampling_params": {"max_new_tokens": 2}})
        assert st == 200 and body["meta_info"]["weight_version"] == "1"


async def test_latency_model_sanity() -> None:
    cfg = dict(time_scale=0.1, jitter_cv=0.0, prefill_overhead_s=0.01,
               prefill_per_token_s=0.0005, itl_s=0.005, max_num_seqs=2, load_factor=1.0)
    async with serve("vllm", **cfg) as c, aiohttp.ClientSession() as s:
        url = c.url + "/v1/completions"
        _, short = await post(s, url, {"prompt": "x" * 10, "max_tokens": 5, "ignore_eos": True})
        _, long = await post(s, url, {"prompt": "y" * 1000, "max_tokens": 5,
                                      "ignore_eos": True})
        ts, tl = short["sim_timing"], long["sim_timing"]
        assert tl["prefill_s"] > ts["prefill_s"] * 5  # TTFT grows with the prompt
        assert ts["prefill_s"] == pytest.approx((0.01 + 10 * 0.0005) * 0.1, rel=0.05)
        assert ts["decode_s"] == pytest.approx(4 * 0.005 * 0.1, rel=0.05)
        # 4 sequences on 2 slots: two of them queue. One request with 4 prompts (streamed,
        # for each sequence's own sim_timing), so all four arrive before any is admitted;
        # 4 separate requests could arrive so far apart on a busy machine that none queues.
        st, events = await sse(s, url, {"prompt": ["z"] * 4, "max_tokens": 200,
                                        "ignore_eos": True, "stream": True})
        timings = [e["sim_timing"] for e in events if e != "[DONE]" and "sim_timing" in e]
        assert st == 200 and len(timings) == 4
        service = min(t["prefill_s"] + t["decode_s"] for t in timings)
        assert service == pytest.approx((0.01 + 0.0005 + 199 * 0.005) * 0.1, rel=0.05)
        queues = sorted(t["queue_s"] for t in timings)
        # the two queued ones waited for a slot: at least the service time of the one ahead
        # (a slot frees only when its sequence ends), whatever the machine's load
        assert queues[2] >= service - 1e-6
        # the two admitted at once waited for no one: only the scheduling gap between
        # arrival and admission, far below a service time (0.1 s)
        assert queues[1] < service
        for t in timings:
            assert t["e2e_s"] >= t["queue_s"] + t["prefill_s"] + t["decode_s"] - 1e-6


async def test_load_factor_slows_decode() -> None:
    base = dict(time_scale=0.1, jitter_cv=0.0, itl_s=0.005, max_num_seqs=8, load_factor=3.0)
    async with serve("sglang", **base) as c, aiohttp.ClientSession() as s:
        body = {"text": "x", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
        _, alone = await post(s, c.url + "/generate", body)
        # 8 sequences in one request start together (8 separate requests may not overlap on
        # a busy machine): the last admitted decodes with all 8 running
        _, crowd = await post(s, c.url + "/generate", {**body, "text": ["x"] * 8})
        assert len(crowd) == 8
        solo = alone["meta_info"]["sim_timing"]["decode_s"]
        busy = max(r["meta_info"]["sim_timing"]["decode_s"] for r in crowd)
        assert busy > solo * 2


def test_serve_in_thread_and_config_errors() -> None:
    import urllib.request

    with serve_in_thread("vllm", 2, zero_latency=True) as c:
        assert len(c.urls) == 2 and len(set(c.addresses)) == 2
        req = urllib.request.Request(c.urls[1] + "/v1/completions", method="POST",
                                     data=b'{"prompt": "hi", "max_tokens": 3}',
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert orjson.loads(r.read())["usage"]["completion_tokens"] <= 3
        c[0].stop_threadsafe()
        c[0].start_threadsafe()
        with urllib.request.urlopen(c.urls[0] + "/health", timeout=5) as r:
            assert r.status == 200
    with pytest.raises(ConfigError), serve_in_thread("vllm", no_such_field=1):
        pass


def test_cli_prints_urls_and_stops_on_sigterm() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollout_kit", "sim", "--api", "vllm", "--num-servers", "2",
         "--zero-latency", "--max-num-seqs", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(2)]
        assert all(u.startswith("http://127.0.0.1:") for u in urls)
        import urllib.request

        with urllib.request.urlopen(urls[1] + "/version", timeout=5) as r:
            assert orjson.loads(r.read())["version"] == "0.32.0"
    finally:
        proc.terminate()
        rc = proc.wait(timeout=10)
    assert rc == 0


@pytest.mark.parametrize("api", ["sglang", "vllm"])
async def test_zero_latency_stream_is_one_write_with_the_same_events(api: str) -> None:
    """A zero-latency server sends a stream's events in one write at the end; the events,
    and what the stream faults do to them, are those of a server with latency."""
    path, body = GEN[api]
    stream = {**body, "stream": True}
    async with serve(api, zero_latency=True) as z, serve(api, time_scale=0.001) as t, \
            aiohttp.ClientSession() as s:
        writes: list[int] = []
        original = aiohttp.web.StreamResponse.write

        async def counting(self: aiohttp.web.StreamResponse, data: bytes) -> None:
            writes.append(len(data))
            await original(self, data)

        aiohttp.web.StreamResponse.write = counting  # type: ignore[method-assign]
        try:
            st, zero_events = await sse(s, z.url + path, stream)
        finally:
            aiohttp.web.StreamResponse.write = original  # type: ignore[method-assign]
        assert st == 200 and writes == []  # everything went out with the end of the body
        st, timed_events = await sse(s, t.url + path, stream)
        assert st == 200 and len(zero_events) == len(timed_events) > 20
        assert zero_events[-1] == timed_events[-1] == "[DONE]"
        # a reset mid-stream still delivers the events before the cut
        z[0].set_faults(force={"kind": "reset"})
        got: list[bytes] = []
        with pytest.raises(aiohttp.ClientError):
            async with s.post(z.url + path, json=stream) as r:
                async for line in r.content:
                    got.append(line)
        assert any(line.startswith(b"data: {") for line in got)
        # truncate: the events, without [DONE]
        z[0].set_faults(force={"kind": "truncate"})
        st, events = await sse(s, z.url + path, stream)
        assert st == 200 and events and "[DONE]" not in events
