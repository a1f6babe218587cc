"""The servers' state beside the timeline, against the real vLLM 0.32 CPU server (started with
``--enable-prefix-caching --enable-prompt-tokens-details``): the scraped series are
non-empty, running / waiting requests rise during a batch of concurrent requests, the KV
cache usage moves, and a repeated long prefix comes back with cached tokens > 0.

Waits are for conditions (a number of scrapes), never fixed sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pandas as pd
import pytest

from rollout_kit import EngineConfig, GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit.analysis import server_series
from rollout_kit.testing import VLLMCPUServer
from rollout_kit.tracing import schema as S
from tests.sim.helpers import until

pytestmark = pytest.mark.vllm_cpu

# about 300 tokens of the tiny model's byte-level BPE: several KV blocks
PREFIX = "You are a careful assistant. Answer briefly and check each step twice. " * 6


def _wf(tokens: int) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=1, max_new_tokens=tokens, ignore_eos=True, logprobs=False))


def _scrapes(frame: pd.DataFrame) -> int:
    return int(frame[S.TS].nunique())


def _until(cond: Callable[[], bool], what: str,
           timeout: float = 30.0) -> Coroutine[Any, Any, None]:
    return until(cond, what, timeout, every=0.02)  # the condition builds a frame


def _saw_a_batch(wide: pd.DataFrame) -> bool:
    """One scrape found at least 2 requests running and at least 8 in the queue."""
    if not {"running", "waiting"} <= set(wide.columns):
        return False
    running = wide["running"]
    return bool(((running >= 2) & (running + wide["waiting"].fillna(0) >= 8)).any())


async def test_series_follow_a_batch_and_the_prefix_cache(
        vllm_cpu_server: VLLMCPUServer) -> None:
    async with RolloutController(vllm=[vllm_cpu_server.address], engine_config=EngineConfig(),
                                 scrape_interval=2.0) as ctl:
        await _until(lambda: _scrapes(ctl.server_metrics()) >= 2, "two scrapes before")
        # a batch of concurrent requests, long enough (seconds on 2 cores) for scrapes to see
        # it. A busy server answers /metrics late (a 2 s interval gives each scrape 1.6 s) and
        # scrapes can time out, so while the batch runs the test scrapes too, and a batch
        # that ended unseen is sent again: it waits for a scrape that saw a batch, not for time
        # (the same condition the queue assertion below makes: a scrape that caught the batch
        # while its first requests were still being admitted shows too shallow a queue)
        def saw_the_batch() -> bool:
            return _saw_a_batch(server_series(ctl.server_metrics(), wide=True))

        assert ctl.scraper is not None
        target = ctl.scraper.targets[0]
        for _ in range(4):
            batch = asyncio.ensure_future(ctl.rollout_batch_async(
                [f"{i}: tell a story" for i in range(96)], _wf(900)))
            while not batch.done() and not saw_the_batch():
                await ctl.scraper.scrape_once_async(target)
                await asyncio.sleep(0.05)
            results = await batch
            assert all(r.ok for r in results)
            if saw_the_batch():
                break
        frame = ctl.server_metrics()
        assert saw_the_batch(), (ctl.scraper.stats,
                                 frame.groupby("metric", observed=True)["value"].max())
        # the same long prefix twice, one after the other: the second hits the cache
        for ask in ("first question?", "second question?"):
            again = await ctl.rollout_batch_async([PREFIX + ask], _wf(4))
            assert again[0].ok
        n = _scrapes(ctl.server_metrics())
        await _until(lambda: _scrapes(ctl.server_metrics()) >= n + 2, "two scrapes after")
        sessions = ctl.sessions()
        frame = ctl.server_metrics()
        assert ctl.scraper is not None
        stats = ctl.scraper.stats[vllm_cpu_server.address]
    assert stats["malformed"] == 0 and stats["stopped"] is None and stats["scrapes"] >= 4

    series = server_series(frame)
    by = series.groupby("series", observed=True)["value"]
    found = set(by.groups)
    assert {"running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate",
            "prompt_tokens_per_s", "generation_tokens_per_s", "ttft_s",
            "preemptions_per_s"} <= found
    # the batch shows in the queue: requests running (and waiting) on the server
    wide = server_series(frame, wide=True)
    assert _saw_a_batch(wide), wide[["running", "waiting"]].max()
    assert wide["running"].iloc[0] == 0  # idle before the batch
    # the KV cache fills during the batch and empties after it
    assert wide["kv_cache_usage"].max() > 0
    assert wide["kv_cache_usage"].max() > wide["kv_cache_usage"].min()
    assert by.max()["generation_tokens_per_s"] > 0 and by.max()["ttft_s"] > 0
    # the repeated prefix: cached tokens per session, and a hit rate above 0
    cached = sessions["cached_tokens"].dropna().astype(int).tolist()
    assert cached[-1] > 0, cached[-2:]
    assert by.max()["prefix_cache_hit_rate"] > 0
    # the client's time split: both parts measured on every session
    assert (sessions["in_flight_s"] > 0).all() and (sessions["client_own_s"] > 0).all()
