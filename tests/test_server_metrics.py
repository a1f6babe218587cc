"""The servers' state over a run: the scraper, the server metrics frame (saved and loaded),
the named series, the cached tokens per session and the split of the client's overhead.

Everything here runs against the simulators (both flavours) and tiny aiohttp servers for
what they do not do (no ``/metrics``, text that is not Prometheus, a ``/metrics`` that
hangs); ``tests/realserver/test_server_state.py`` runs against the real vLLM CPU server.
Waits are for conditions (the frame has N scrapes), never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from aiohttp import web

from rollout_kit import ConfigError, GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit.analysis import server_series
from rollout_kit.engines import MetricsScraper
from rollout_kit.engines._scrape import MIN_TIMEOUT_S, ScrapeTarget, keep_samples
from rollout_kit.otel import OtlpReceiver, join_server_spans
from rollout_kit.sim import serve
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import Tracer, load_traces
from rollout_kit.tracing import schema as S
from rollout_kit.tracing.server_metrics import KEPT_METRICS, SCRAPE_FAILED, SERIES_NAMES
from tests.sim.helpers import until

FLAVOURS = ["vllm", "sglang"]
LONG = "the same long system prompt that every request of this batch shares. " * 4


def _wf(n: int = 2, tokens: int = 16) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=n, max_new_tokens=tokens, ignore_eos=True))


def _until(cond: Callable[[], bool], what: str,
           timeout: float = 20.0) -> Coroutine[Any, Any, None]:
    return until(cond, what, timeout, every=0.01)  # the condition builds a frame


def _scrapes(frame: pd.DataFrame) -> int:
    """Scrapes in a server metrics frame: distinct (server, ts)."""
    return int(frame[[S.TS, S.SERVER]].drop_duplicates().shape[0])


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), "0.5", True])
def test_a_bad_interval_is_refused_at_construction(bad: Any) -> None:
    with pytest.raises(ConfigError, match="scrape_interval must be a number of seconds > 0"):
        RolloutController(sglang=["127.0.0.1:1"], scrape_interval=bad)


def test_the_scraper_checks_its_interval_and_timeout() -> None:
    with pytest.raises(ConfigError, match="interval"):
        MetricsScraper([], lambda *a: None, interval=0)
    with pytest.raises(ConfigError, match="timeout"):
        MetricsScraper([], lambda *a: None, interval=0.5, timeout=0)
    s = MetricsScraper([ScrapeTarget("a:1"), ScrapeTarget("a:1")], lambda *a: None,
                       interval=0.5)
    # a busy server answers late: at least MIN_TIMEOUT_S, longer intervals 0.8 of theirs
    assert s.timeout == pytest.approx(MIN_TIMEOUT_S) and len(s.targets) == 1
    assert MetricsScraper([], lambda *a: None, interval=10).timeout == pytest.approx(8.0)
    assert MetricsScraper([], lambda *a: None, interval=0.5, timeout=3).timeout == 3


def test_none_scrapes_nothing(sim_servers: Any) -> None:
    cluster = sim_servers("vllm")
    with RolloutController(vllm=cluster.addresses, engine_config=fast_engine_config(),
                           scrape_interval=None) as ctl:
        ctl.rollout_batch(["x"], _wf(1, 2))
        assert ctl.scraper is None
        assert ctl.server_metrics().empty


# -- parsing ---------------------------------------------------------------------------------

TEXT = """# HELP vllm:num_requests_running Number of requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running_other{engine="0"} 9.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1.0
vllm:time_to_first_token_seconds_sum{engine="0"} 0.5
vllm:time_to_first_token_seconds_count{engine="0"} 2.0
vllm:prompt_tokens_total 12.0
"""


def test_keep_samples_keeps_the_named_ones_with_compact_labels() -> None:
    got = keep_samples(TEXT)
    assert got == [("vllm:num_requests_running", "engine=0,model_name=m", 3.0),
                   ("vllm:time_to_first_token_seconds_sum", "engine=0", 0.5),
                   ("vllm:time_to_first_token_seconds_count", "engine=0", 2.0),
                   ("vllm:prompt_tokens_total", "", 12.0)]
    assert "vllm:time_to_first_token_seconds_bucket" not in KEPT_METRICS
    assert keep_samples("# only comments\nother_metric 1\n") == []


@pytest.mark.parametrize("text", [
    "vllm:num_requests_running{engine=\"0\" 3\n",  # a kept line, broken
    "<html><body>not metrics {{{</body></html>\n",  # nothing kept, not Prometheus either
])
def test_keep_samples_refuses_text_that_is_not_prometheus(text: str) -> None:
    with pytest.raises(ValueError):
        keep_samples(text)


# -- against the simulators -------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_frame_fills_during_a_run_and_is_saved_and_loaded(
        flavour: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    async with serve(flavour, n=2, time_scale=0.05) as cluster:
        ctl = RolloutController(engine_config=fast_engine_config(), trace_path=path,
                                scrape_interval=0.05, **{flavour: cluster.addresses})
        async with ctl:
            results = await ctl.rollout_batch_async([LONG + "a story"] * 8, _wf(4, 32))
            assert all(r.ok for r in results)
            # while the controller lives the frame keeps growing: wait for 3 more scrapes
            # of each server
            before = _scrapes(ctl.server_metrics())
            await _until(lambda: _scrapes(ctl.server_metrics()) >= before + 6,
                         "six more scrapes")
            live = ctl.server_metrics()
            assert ctl.scraper is not None
            stats = ctl.scraper.stats
            assert set(stats) == set(cluster.addresses)
            assert all(s["scrapes"] >= 3 and s["malformed"] == 0 and s["stopped"] is None
                       for s in stats.values())
        assert ctl.scraper is not None and not ctl.scraper.running
    assert list(live.columns) == list(S.SERVER_METRIC_COLUMNS)
    assert set(live[S.SERVER].astype(str)) == set(cluster.addresses)
    assert set(live[S.METRIC].astype(str)) <= KEPT_METRICS
    assert live[S.TS].is_monotonic_increasing
    # on the trace clock: inside the run's span of tasks
    tasks = ctl.traces()
    assert live[S.TS].min() < tasks["end_ts"].max()
    # saved with the traces: the JSONL log and its Parquet form load to the same frame
    frame = ctl.tracer.server_metrics_df()
    from_jsonl = load_traces(path).server_metrics
    from_parquet = load_traces(tmp_path / "trace.parquet").server_metrics
    assert len(from_jsonl) == len(frame) >= len(live)
    for loaded in (from_jsonl, from_parquet):
        pd.testing.assert_frame_equal(loaded.astype({c: str for c in (S.SERVER, S.METRIC,
                                                                        S.LABELS)}),
                                      frame.astype({c: str for c in (S.SERVER, S.METRIC,
                                                                      S.LABELS)}),
                                      check_exact=False, atol=2e-9)
    # named series, from either form
    series = server_series(from_parquet)
    assert list(series.columns) == ["ts", "server", "series", "value"]
    found = set(series["series"].astype(str))
    assert {"running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate",
            "prompt_tokens_per_s", "generation_tokens_per_s", "ttft_s"} <= found
    if flavour == "vllm":
        assert "preemptions_per_s" in found  # SGLang's retraction counter is newer
    by = series.groupby("series", observed=True)["value"]
    assert by.max()["running"] >= 1
    assert by.max()["generation_tokens_per_s"] > 0
    assert by.max()["kv_cache_usage"] > 0
    assert 0 < by.max()["prefix_cache_hit_rate"] <= 1
    wide = server_series(from_parquet, wide=True)
    assert set(wide.index.names) == {"server", "ts"} and "running" in wide.columns


async def test_a_load_run_is_scraped_without_an_explicit_initialize() -> None:
    from rollout_kit.load import Arrivals, LoadSpec, run_load_async, synthetic

    async with serve("vllm", n=2, time_scale=0.05) as cluster:
        ctl = RolloutController(engine_config=fast_engine_config(), scrape_interval=0.05,
                                vllm=cluster.addresses)
        try:
            run = await run_load_async(ctl, synthetic(40, input_len=16, output_len=24),
                                       LoadSpec(arrivals=Arrivals(rate=200.0, seed=1)))
            assert (run.frame["status"] == "accepted").all()
            await _until(lambda: _scrapes(ctl.server_metrics()) >= 4, "four scrapes")
        finally:
            await ctl.close_async()
    series = server_series(ctl.tracer.server_metrics_df())
    # scraping began with the first request: the counters moved between two scrapes
    assert series.loc[series["series"] == "generation_tokens_per_s", "value"].max() > 0


def test_a_trace_without_metrics_loads_with_an_empty_frame(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl")
    tr.register_task(0)
    tr.finalize(0, "accepted")
    tr.close()
    for name in ("t.jsonl", "t.parquet"):
        frame = load_traces(tmp_path / name).server_metrics
        assert frame.empty and list(frame.columns) == list(S.SERVER_METRIC_COLUMNS)
    assert server_series(frame).empty


def test_metrics_travel_with_drained_records() -> None:
    a, b = Tracer(), Tracer()
    a.record_server_metrics("s:1", [("vllm:num_requests_running", "", 2.0),
                                    ("vllm:prompt_tokens_total", "engine=0", float("nan"))])
    assert b.ingest(a.drain_records()) == 0
    got = b.server_metrics_df()
    assert got[S.METRIC].astype(str).tolist() == ["vllm:num_requests_running",
                                                   "vllm:prompt_tokens_total"]
    assert got[S.VALUE].iloc[0] == 2.0 and np.isnan(got[S.VALUE].iloc[1])
    assert a.server_metrics_df().empty


def test_series_rates_survive_a_counter_reset() -> None:
    rows = []
    for ts, v in ((0.0, 10.0), (1.0, 30.0), (2.0, 5.0), (3.0, 15.0)):
        rows.append((ts, "s", "vllm:generation_tokens_total", "", v))
    frame = pd.DataFrame(rows, columns=list(S.SERVER_METRIC_COLUMNS))
    got = server_series(frame)
    assert got["value"].tolist() == [20.0, 5.0, 10.0]  # the restart counts from zero
    assert got["series"].astype(str).unique().tolist() == ["generation_tokens_per_s"]
    assert list(got["series"].cat.categories) == list(SERIES_NAMES)


def test_a_ratio_whose_denominator_did_not_move_is_nan_not_zero() -> None:
    """No prefix-cache query and no first token between two scrapes: the hit rate and the
    mean TTFT of that interval are undefined, not 0 (a 0 would read as "all misses")."""
    counters = {"vllm:prefix_cache_hits_total": (0.0, 5.0, 5.0, 7.0),
                "vllm:prefix_cache_queries_total": (0.0, 10.0, 10.0, 14.0),
                "vllm:time_to_first_token_seconds_sum": (0.0, 1.0, 1.0, 1.5),
                "vllm:time_to_first_token_seconds_count": (0.0, 4.0, 4.0, 6.0)}
    rows = [(float(ts), "s", metric, "", v) for metric, values in counters.items()
            for ts, v in enumerate(values)]
    frame = pd.DataFrame(rows, columns=list(S.SERVER_METRIC_COLUMNS))
    got = server_series(frame)
    for name in ("prefix_cache_hit_rate", "ttft_s"):
        one = got[got["series"] == name]
        assert one["ts"].tolist() == [1.0, 2.0, 3.0], name
        first, idle, last = one["value"].tolist()
        assert first == last == (0.5 if name == "prefix_cache_hit_rate" else 0.25), name
        assert np.isnan(idle), (name, idle)
    wide = server_series(frame, wide=True)
    assert wide.loc[("s", 2.0), ["prefix_cache_hit_rate", "ttft_s"]].isna().all()


# -- cached prompt tokens per session ---------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_cached_tokens_are_a_sessions_column(flavour: str) -> None:
    extra = {"prompt_tokens_details": True} if flavour == "vllm" else {}
    async with serve(flavour, zero_latency=True, **extra) as cluster:
        async with RolloutController(engine_config=fast_engine_config(), scrape_interval=None,
                                     **{flavour: cluster.addresses}) as ctl:
            await ctl.rollout_batch_async([LONG + "first"], _wf(1, 4))
            await ctl.rollout_batch_async([LONG + "second"], _wf(1, 4))
            sessions = ctl.sessions()
    cached = sessions["cached_tokens"].tolist()
    assert cached[0] == 0 and cached[1] > 0  # the repeated prefix came from the cache


# -- where the client's time goes -------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_client_own_and_in_flight_split_the_generate_time(stream: bool) -> None:
    async with serve("vllm", time_scale=0.05) as cluster:
        async with RolloutController(engine_config=fast_engine_config(stream=stream),
                                     scrape_interval=None, vllm=cluster.addresses) as ctl:
            await ctl.rollout_batch_async(["a", "b"], _wf(2, 16))
            s = ctl.sessions()
    assert (s["in_flight_s"] > 0).all() and (s["client_own_s"] > 0).all()
    # one call per session, no retry: its generate span holds both parts
    assert ((s["client_own_s"] + s["in_flight_s"]) <= s["generate_s"] + 1e-6).all()


@pytest.mark.parametrize("transport", ["loop", "aiohttp"])
async def test_server_frontend_is_in_flight_outside_the_server_span(transport: str) -> None:
    with OtlpReceiver() as rx:
        async with serve("vllm", time_scale=0.05, otlp_traces_endpoint=rx.endpoint) as cl:
            async with RolloutController(
                    engine_config=fast_engine_config(transport=transport),
                    scrape_interval=None, vllm=cl.addresses) as ctl:
                await ctl.rollout_batch_async(["a", "b"], _wf(2, 8))
                await rx.wait_for_async(4, trace_prefix=ctl.tracer.trace_prefix)
                view = join_server_spans(ctl.sessions(), rx.spans(),
                                         trace_prefix=ctl.tracer.trace_prefix,
                                         wall_epoch=ctl.tracer.wall_epoch)
    s = view.sessions
    assert (s["server_spans"] == 1).all()
    assert (s["server_frontend_s"] >= 0).all()
    assert np.allclose(s["server_frontend_s"], s["in_flight_s"] - s["server_e2e_s"])
    # the old column stays, and holds both parts
    assert (s["client_overhead_s"] >= s["server_frontend_s"]).all()


# -- bad input ------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SG_BODY = {"text": "ok", "output_ids": [1, 2],
           "meta_info": {"id": "x", "finish_reason": {"type": "length", "length": 2},
                         "prompt_tokens": 3, "completion_tokens": 2, "cached_tokens": 0,
                         "output_token_logprobs": [[-0.5, 1, None], [-0.5, 2, None]]}}


@pytest.fixture
async def fake_sglang() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """``await fake_sglang(metrics_handler)`` -> ``host:port`` of an SGLang-shaped server
    whose ``/metrics`` is ``metrics_handler``."""
    runners: list[web.AppRunner] = []

    async def start(metrics: Handler) -> str:
        async def ok(_r: web.Request) -> web.StreamResponse:
            return web.Response(text="")

        async def generate(_r: web.Request) -> web.StreamResponse:
            return web.json_response(SG_BODY)

        app = web.Application()
        app.router.add_get("/health", ok)
        app.router.add_post("/generate", generate)
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for r in runners:
        await r.cleanup()


async def test_a_server_without_metrics_gets_one_note_and_is_no_longer_scraped(
        fake_sglang: Any, caplog: pytest.LogCaptureFixture) -> None:
    hits: list[int] = []

    async def missing(_r: web.Request) -> web.StreamResponse:
        hits.append(1)
        return web.Response(status=404, text="Not Found")

    address = await fake_sglang(missing)
    caplog.set_level(logging.WARNING, logger="rollout_kit.engines")
    async with RolloutController(engine_config=fast_engine_config(), scrape_interval=0.02,
                                 sglang=[address]) as ctl:
        assert ctl.scraper is not None
        scraper = ctl.scraper
        await _until(lambda: not scraper.running, "the scraper to stop")
        results = await ctl.rollout_batch_async(["a", "b"], _wf(1, 2))  # the run goes on
        assert all(r.ok for r in results)
        stats = scraper.stats[address]
    assert hits == [1] and stats["stopped"] and stats["failed"] == 1
    notes = [r for r in caplog.records if "/metrics" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.WARNING
    assert address in notes[0].getMessage()


async def test_malformed_text_is_counted_and_skipped(fake_sglang: Any) -> None:
    async def garbage(_r: web.Request) -> web.StreamResponse:
        return web.Response(text="sglang:num_running_reqs{a=\"1\" 3\n<html>{{{\n")

    address = await fake_sglang(garbage)
    async with RolloutController(engine_config=fast_engine_config(), scrape_interval=0.02,
                                 sglang=[address]) as ctl:
        assert ctl.scraper is not None
        scraper = ctl.scraper
        await _until(lambda: scraper.stats[address]["malformed"] >= 3, "three bad scrapes")
        assert scraper.running  # it keeps trying: the next answer may be fine
        frame = ctl.server_metrics()
    # only the failures are in the frame: the lanes show a gap, not a value
    assert set(frame[S.METRIC].astype(str)) == {SCRAPE_FAILED}
    assert set(frame[S.LABELS].astype(str)) == {"reason=malformed"}
    assert len(frame) >= 3 and (frame[S.VALUE] == 1).all()


async def test_a_hanging_metrics_endpoint_never_delays_requests(fake_sglang: Any) -> None:
    forever = asyncio.Event()
    hanging = 0

    async def hang(_r: web.Request) -> web.StreamResponse:
        nonlocal hanging
        hanging += 1
        await forever.wait()
        return web.Response(text="")

    address = await fake_sglang(hang)
    # a long interval: the first scrape hangs for its whole timeout (96 s), so a batch that
    # waited for it could not end before that scrape failed; no clock is read
    try:
        async with RolloutController(engine_config=fast_engine_config(),
                                     scrape_interval=120.0, sglang=[address]) as ctl:
            assert ctl.scraper is not None
            scraper = ctl.scraper
            await _until(lambda: hanging >= 1, "a scrape hanging")
            results = await ctl.rollout_batch_async(["x"] * 20, _wf(1, 2))
            assert all(r.ok for r in results)
            stats = scraper.stats[address]
            assert hanging == 1 and stats["failed"] == 0 and stats["scrapes"] == 0  # hangs
    finally:
        forever.set()  # the fake server's handlers end: it shuts down at once


async def test_a_hanging_metrics_endpoint_costs_one_timeout_per_interval(
        fake_sglang: Any) -> None:
    forever = asyncio.Event()

    async def hang(_r: web.Request) -> web.StreamResponse:
        await forever.wait()
        return web.Response(text="")

    address = await fake_sglang(hang)
    try:
        async with RolloutController(engine_config=fast_engine_config(), scrape_interval=0.1,
                                     sglang=[address]) as ctl:
            assert ctl.scraper is not None
            scraper = ctl.scraper
            assert scraper.timeout == MIN_TIMEOUT_S > scraper.interval
            await _until(lambda: scraper.stats[address]["failed"] >= 1, "a scrape timeout")
            # generations while scrapes of the same server hang: none waits for them
            results = await ctl.rollout_batch_async(["x"] * 20, _wf(1, 2))
            assert all(r.ok for r in results)
            await _until(lambda: scraper.stats[address]["failed"] >= 2, "two timeouts")
            assert scraper.running and scraper.stats[address]["stopped"] is None
            frame = ctl.server_metrics()
    finally:
        forever.set()
    # each failed scrape is a row of its own, saying why
    assert set(frame[S.LABELS].astype(str)) == {"reason=timeout"} and len(frame) >= 2


# -- size ---------------------------------------------------------------------------------


def test_an_hour_at_2hz_against_4_servers_stays_small_and_loads_back(tmp_path: Path) -> None:
    """A synthetic run: 4 servers, one scrape each every 0.5 s for an hour, each scrape the
    samples the simulator's vLLM exposition keeps; held in memory, saved, loaded back. How
    fast it loads is a benchmark (``bench/bench_server_state.py``), not a test's bound."""
    names = sorted(m for m in KEPT_METRICS if m.startswith("vllm:"))
    names.remove("vllm:request_success_total")
    samples = [(m, "engine=0,model_name=m", 1.0) for m in names]
    samples += [("vllm:request_success_total", f"engine=0,finished_reason={r},model_name=m",
                 1.0) for r in ("stop", "length", "abort")]
    tr = Tracer(path=tmp_path / "t.jsonl")
    scrapes = 3600 * 2
    t0 = tr.epoch_ns
    for i in range(scrapes):
        for s in range(4):
            tr.record_server_metrics(f"10.0.0.{s}:8000", samples, t0 + i * 500_000_000 + s)
    buf = tr._store.server_metrics
    rows = len(buf)
    assert rows == scrapes * 4 * len(samples)
    assert buf.nbytes() <= 50e6
    frame = tr.server_metrics_df()
    assert frame.memory_usage(deep=True).sum() <= 50e6
    tr.close()
    for name in ("t.parquet", "t.jsonl"):
        loaded = load_traces(tmp_path / name).server_metrics
        assert len(loaded) == rows, name
