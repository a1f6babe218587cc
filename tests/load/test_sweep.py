"""Sweeps: one row per level run, stopping after the first saturated level.

The saturation rule is checked on hand-made metrics; the sweep itself against the simulator
with rules that cannot depend on the machine's speed (a limit nothing meets, a dead server).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from rollout_kit import ConfigError, EngineConfig, RetryPolicy, RolloutController, Timeouts
from rollout_kit.load import (
    Arrivals,
    LoadRun,
    LoadSpec,
    Saturation,
    sweep,
    sweep_async,
    synthetic,
)
from rollout_kit.sim import serve, serve_in_thread

ENGINE = EngineConfig(stream=True, retry=RetryPolicy(max_retries=0),
                      timeouts=Timeouts(connect=2.0, request=20.0, total=30.0, health=1.0))
REQS = synthetic(4, input_len=8, output_len=4)
NEVER = Saturation(min_ratio=1e-9, max_error_rate=None, min_gain=None)


@pytest.fixture
async def ctl() -> AsyncIterator[RolloutController]:
    async with serve("vllm", 1, zero_latency=True) as cluster, RolloutController(
            vllm=cluster.urls, engine_config=ENGINE) as c:
        yield c


def test_saturation_rule() -> None:
    rule = Saturation(min_ratio=0.95, max_error_rate=0.1, p99_ms={"ttft": 100.0})
    fine = {"offered_rate": 10.0, "achieved_rate": 9.9, "completion_rate": 9.6,
            "completed": 10, "error_rate": 0.0, "p99_ttft_ms": 50.0}
    assert rule.check(fine, None) is None
    assert "achieved_rate" in str(rule.check({**fine, "achieved_rate": 9.4}, None))
    assert "completion_rate" in str(rule.check({**fine, "completion_rate": 9.0}, None))
    assert "error_rate" in str(rule.check({**fine, "error_rate": 0.2}, None))
    assert "p99_ttft_ms" in str(rule.check({**fine, "p99_ttft_ms": 150.0}, None))
    assert "no request completed" in str(rule.check(
        {**fine, "completed": 0, "completion_rate": math.nan}, None))
    # concurrency levels (infinite offered rate): throughput must keep growing
    conc = {"offered_rate": math.inf, "request_throughput": 102.0, "error_rate": 0.0}
    assert rule.check(conc, None) is None
    assert "grew less" in str(rule.check(conc, {"request_throughput": 100.0}))
    assert rule.check(conc, {"request_throughput": 90.0}) is None
    with pytest.raises(ConfigError, match="unknown p99 limit 'ttfb'"):
        Saturation(p99_ms={"ttfb": 1.0})
    with pytest.raises(ConfigError, match="min_ratio"):
        Saturation(min_ratio=0.0)


async def test_one_row_per_rate_level(ctl: RolloutController) -> None:
    runs: list[LoadRun] = []
    first = ctl.ids.peek
    df = await sweep_async(ctl, REQS, rates=[200.0, 400.0, 800.0], stop=NEVER,
                           spec_template=LoadSpec(arrivals=Arrivals(seed=1), num_requests=8),
                           goodput="ttft:5000", runs=runs)
    assert list(df["level"]) == [200.0, 400.0, 800.0]
    assert df["offered_rate"].tolist() == pytest.approx([200.0, 400.0, 800.0])
    assert not df["saturated"].any() and df["stop_reason"].isna().all()
    for col in ("achieved_rate", "request_throughput", "request_goodput", "median_ttft_ms",
                "p99_e2el_ms", "error_rate", "completed", "max_concurrency"):
        assert col in df.columns
    assert (df["completed"] == 8).all()
    # the same controller: ids keep counting across levels
    ids = [i for r in runs for i in r.frame.index]
    assert ids == list(range(first, first + 24))


async def test_stops_after_the_first_saturated_level(ctl: RolloutController) -> None:
    rule = Saturation(min_ratio=1e-9, max_error_rate=None, min_gain=None,
                      p99_ms={"e2el": 1e-6})  # no request is that fast
    df = await sweep_async(ctl, REQS, concurrencies=[1, 2, 4], stop=rule,
                           spec_template=LoadSpec(num_requests=4))
    assert len(df) == 1 and bool(df["saturated"].iloc[0])
    assert df["level"].iloc[0] == 1 and df["max_concurrency"].iloc[0] == 1
    assert "p99_e2el_ms" in df["stop_reason"].iloc[0]


async def test_a_dead_server_stops_the_sweep_on_errors() -> None:
    async with serve("vllm", 1, zero_latency=True) as cluster, RolloutController(
            vllm=cluster.urls, engine_config=ENGINE) as ctl:
        await cluster.servers[0].stop()
        df = await sweep_async(ctl, REQS, rates=[100.0, 200.0],
                               stop=Saturation(min_ratio=1e-9, max_error_rate=0.5),
                               spec_template=LoadSpec(num_requests=4))
    assert len(df) == 1 and bool(df["saturated"].iloc[0])
    assert df["failed"].iloc[0] == 4 and df["error_rate"].iloc[0] == 1.0
    assert df["stop_reason"].iloc[0] == "no request completed" or "error_rate" in str(
        df["stop_reason"].iloc[0])


def test_blocking_sweep() -> None:
    with serve_in_thread("vllm", 1, zero_latency=True) as cluster:
        ctl = RolloutController(vllm=cluster.urls, engine_config=ENGINE)
        try:
            df = sweep(ctl, REQS, concurrencies=[1, 2], stop=NEVER,
                       spec_template=LoadSpec(num_requests=4))
        finally:
            ctl.close()
    assert list(df["level"]) == [1, 2]


async def test_bad_sweeps_are_one_clear_error(ctl: RolloutController) -> None:
    with pytest.raises(ConfigError, match="at least one level"):
        await sweep_async(ctl, REQS, rates=[])
    with pytest.raises(ConfigError, match="exactly one"):
        await sweep_async(ctl, REQS)
    with pytest.raises(ConfigError, match="exactly one"):
        await sweep_async(ctl, REQS, rates=[1.0], concurrencies=[1])
    with pytest.raises(ConfigError, match="rate"):
        await sweep_async(ctl, REQS, rates=[10.0, -1.0])
    with pytest.raises(ConfigError, match="max_concurrency"):
        await sweep_async(ctl, REQS, concurrencies=[0])
    with pytest.raises(ConfigError, match="unknown goodput SLO"):
        await sweep_async(ctl, REQS, rates=[1.0], goodput="latency:5")
    with pytest.raises(ConfigError, match="dataset is empty"):
        await sweep_async(ctl, [], rates=[1.0])
    assert ctl.ids.peek == 0  # nothing was sent for bad input
