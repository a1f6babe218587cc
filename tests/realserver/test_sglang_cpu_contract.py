"""The SGLang 0.5.23 HTTP contract the client relies on, pinned against the real CPU server.

Raw aiohttp where the fact is the server's (``meta_info``'s stamps, ``/abort_request`` by rid,
``/pause_generation`` → ``/continue_generation``, ``/metrics``, the chat ids), then the
client on top where it reads them (the scraped series, the ``sglang-chat`` flavour).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from rollout_kit import (
    EngineConfig,
    GenerationConfig,
    ModelRequest,
    RolloutController,
    SingleTurnWorkflow,
)
from rollout_kit.analysis import server_series
from rollout_kit.engines import make_engine
from rollout_kit.testing import SGLangCPUServer
from rollout_kit.tracing import schema as S
from tests.sim.helpers import until

pytestmark = pytest.mark.sglang_cpu

PROMPT = [0, 50, 60, 70, 80]
#: how far apart the Unix clocks of SGLang's processes may be (each converts its own
#: monotonic stamps)
CLOCKS = 0.05
STAMPS = ("request_received_ts", "api_server_dispatch_finish_ts", "forward_entry_time",
          "prefill_finished_time", "request_finished_ts", "response_sent_to_client_ts")


@pytest.fixture
async def http(sglang_cpu_server: SGLangCPUServer) -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(base_url=sglang_cpu_server.url, timeout=timeout) as s:
        yield s


def _body(tokens: int, **extra: Any) -> dict[str, Any]:
    return {"input_ids": PROMPT, "sampling_params": {
        "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}, **extra}


async def _post(http: aiohttp.ClientSession, path: str, body: Any) -> Any:
    """POST, expect 200; the JSON answer (``None`` for an empty one, as control routes give)."""
    async with http.post(path, json=body) as resp:
        text = await resp.text()
        assert resp.status == 200, text
        return await resp.json(content_type=None) if text else None


async def test_meta_info_carries_the_servers_timeline(http: aiohttp.ClientSession) -> None:
    """The stamps the session join reads, in order, around the client's own clock."""
    t0 = time.time()
    out = await _post(http, "/generate", _body(8))
    t1 = time.time()
    meta = out["meta_info"]
    stamps = [meta[k] for k in STAMPS]
    assert t0 - 0.05 <= stamps[0] and stamps[-1] <= t1 + 0.05, (t0, stamps, t1)
    received, dispatched, entry, prefilled, finished, sent = stamps
    # two processes stamp them, each turning its monotonic clock into Unix time with its own
    # offset: the front end (received, dispatched, finished, sent) and the scheduler (entry,
    # prefilled); in order within each, within CLOCKS across them (6 ms apart was seen)
    assert received <= dispatched <= finished <= sent and entry <= prefilled
    assert dispatched - CLOCKS <= entry and prefilled <= finished + CLOCKS
    assert meta["e2e_latency"] == pytest.approx(finished - received, abs=2e-3)
    assert 0 <= meta["queue_time"] <= entry - received + 1e-3
    assert 0 < meta["first_token_latency"] <= meta["e2e_latency"]
    assert meta["num_retractions"] == 0 and meta["completion_tokens"] == 8
    assert meta["weight_versions"] == [{"version": meta["weight_version"], "start": 0,
                                        "end": 8}]


async def test_abort_request_by_rid(http: aiohttp.ClientSession) -> None:
    rid = "rk-contract-abort"
    task = asyncio.create_task(_post(http, "/generate", _body(900, rid=rid)))
    # an abort of a rid the server does not hold yet is a no-op: repeat until one lands
    while not task.done():
        await _post(http, "/abort_request", {"rid": rid})
        done, _ = await asyncio.wait({task}, timeout=0.2)
        if done:
            break
    out = await task
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "abort"
    assert len(out["output_ids"]) < 900 and meta["completion_tokens"] == len(out["output_ids"])


async def test_pause_generation_aborts_and_continue_resumes(
        http: aiohttp.ClientSession) -> None:
    """``/pause_generation`` (abort mode) returns in-flight requests with their partial
    output and ``finish_reason.type == "abort"``; after ``/continue_generation`` the server
    serves again."""
    task = asyncio.create_task(_post(http, "/generate", _body(900)))
    try:
        while not task.done():
            await _post(http, "/pause_generation", {"mode": "abort"})
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if done:
                break
            await _post(http, "/continue_generation", {})
    finally:
        await _post(http, "/continue_generation", {})
    out = await task
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(out["output_ids"]) < 900
    again = await _post(http, "/generate", _body(4))
    assert again["meta_info"]["finish_reason"]["type"] == "length"


async def test_metrics_are_scraped_and_named(sglang_cpu_server: SGLangCPUServer) -> None:
    """The controller's scrapes of ``sglang:*`` become the named series."""
    wf_cfg = GenerationConfig(max_new_tokens=32, ignore_eos=True, logprobs=False)
    async with RolloutController(sglang=[sglang_cpu_server.address],
                                 engine_config=EngineConfig(), scrape_interval=0.5) as ctl:
        wf = SingleTurnWorkflow(lambda *a, **k: 0.0, wf_cfg)
        res = await ctl.rollout_batch_async([{"input_ids": [0, 9, i]} for i in range(12)], wf)
        assert all(r.ok for r in res)
        n = ctl.server_metrics()[S.TS].nunique()
        await until(lambda: ctl.server_metrics()[S.TS].nunique() >= n + 2, "2 scrapes", 30)
        frame = ctl.server_metrics()
    assert frame[S.METRIC].astype(str).str.startswith("sglang:").any()
    series = server_series(frame)
    found = set(series["series"].astype(str))
    assert {"running", "waiting", "kv_cache_usage", "prompt_tokens_per_s",
            "generation_tokens_per_s", "ttft_s"} <= found, found
    by = series.groupby("series", observed=True)["value"].max()
    assert by["generation_tokens_per_s"] > 0 and by["prompt_tokens_per_s"] > 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_sglang_chat_ids(sglang_cpu_server: SGLangCPUServer, stream: bool) -> None:
    """The ``sglang-chat`` flavour on ``/v1/chat/completions``: plain answers carry the
    prompt's and the completion's token ids (``response_token_ids``), equal to what
    ``/generate`` makes of the same rendered prompt; streamed answers carry none."""
    g = GenerationConfig(max_new_tokens=6, ignore_eos=True, temperature=0.0)
    async with make_engine("sglang-chat", sglang_cpu_server.address,
                           config=EngineConfig(stream=stream)) as engine:
        resp = await engine.generate_async(ModelRequest(
            messages=[{"role": "user", "content": "What is 2 + 2?"}], gconfig=g))
        assert resp.completion_tokens == 6 and resp.stop_reason == "length"
        if stream:
            assert resp.token_source == "none" and resp.output_tokens == []
            return
        assert resp.token_source == "server" and len(resp.output_tokens) == 6
        assert len(resp.input_tokens) == resp.prompt_tokens > 0
        # greedy: the native API continues the same ids the same way
        same = await engine.generate_async(ModelRequest(input_ids=resp.input_tokens,
                                                        gconfig=g))
    assert same.output_tokens == resp.output_tokens


def test_the_server_listens_on_loopback_only(sglang_cpu_server: SGLangCPUServer) -> None:
    """Every process of the server (launcher, scheduler, detokenizer) listens on 127.0.0.1:
    torch.distributed's default TCP store would listen on every interface (``::``)."""
    import psutil

    assert sglang_cpu_server.pid is not None
    root = psutil.Process(sglang_cpu_server.pid)
    listening = [(p.name(), c.laddr.ip, c.laddr.port)
                 for p in (root, *root.children(recursive=True))
                 for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(ip == "127.0.0.1" for _, ip, _ in listening), listening


def test_an_idle_server_leaves_the_cores_alone(sglang_cpu_server: SGLangCPUServer) -> None:
    """Without ``--sleep-on-idle`` the scheduler polls its sockets in a busy loop: one core at
    100 % for the whole session the server is shared by (about 2 of these 3 s even with two
    CPU burners beside it). With it, the idle server's processes use a few milliseconds."""
    import psutil

    assert sglang_cpu_server.pid is not None
    root = psutil.Process(sglang_cpu_server.pid)
    tree = [root, *root.children(recursive=True)]

    def cpu_seconds() -> float:
        return sum(t.user + t.system for t in (p.cpu_times() for p in tree))

    before, start = cpu_seconds(), time.monotonic()
    time.sleep(3.0)
    used, wall = cpu_seconds() - before, time.monotonic() - start
    assert used < 0.25 * wall, f"the idle server used {used:.2f} CPU s in {wall:.1f} s"
