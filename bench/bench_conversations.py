"""Conversations as load (``rollout_kit.load.run_conversations_async``): are conversation
arrivals paced as offered?

One row, against the simulated vLLM server in its own process (zero latency, prefix-cache
details on, ``/v1/chat/completions`` through the ``vllm-chat`` flavour): synthetic
conversations of 4 turns (128-token messages, 16-token replies, a 256-token system prompt
shared by all) arrive at Poisson times; each next turn is sent an exponential think time
(mean 50 ms) after the previous answer. ``ours`` is the achieved conversation arrival rate
(conversations over the span of their first turns' sends, as ``LoadRun.achieved_rate``), the
baseline the offered rate of the same schedule (conversations over their scheduled span),
median over rounds. Target: within 2 % (0.98 ≤ ratio ≤ 1.02) at a rate the simulator
sustains — the note says it did (every conversation completed, and the conversation
throughput over the run).

    .venv/bin/python bench/bench_conversations.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from _common import Row, Size, cpu_seconds, print_rows, sim_process, size_from_args, spread

import rollout_kit as rk
from rollout_kit import EngineConfig, ExecutorConfig
from rollout_kit.load import Arrivals, LoadSpec, run_conversations_async, synthetic_conversations

__all__ = ["main", "rows"]

TURNS = 4
THINK = "exponential:0.05"
#: size -> (conversations per second, seconds of arrivals, rounds)
SIZES: dict[str, tuple[float, float, int]] = {
    "smoke": (20.0, 1.0, 1), "quick": (100.0, 5.0, 3), "full": (200.0, 10.0, 3)}


async def one_round(url: str, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    n = int(rate * seconds)
    convs = synthetic_conversations(n, turns=TURNS, input_len=128, output_len=16,
                                    system_prompt_len=256, think_time=THINK, seed=seed)
    ctl = rk.RolloutController(servers={"vllm-chat": [url]},
                               engine_config=EngineConfig(stream=True),
                               executor_config=ExecutorConfig(max_concurrent_rollouts=n))
    await ctl.initialize_async()
    try:
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        run = await run_conversations_async(
            ctl, convs, LoadSpec(arrivals=Arrivals(rate=rate, seed=seed)))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
    finally:
        await ctl.close_async()
    m = run.metrics()
    return {"offered": run.offered_rate, "achieved": run.achieved_rate,
            "completed": m["completed_conversations"], "n": n,
            "throughput": m["conversation_throughput"], "cache": m["cache_hit_ratio"],
            "lag_p99_ms": m["p99_send_lag_ms"], "cpu_per_turn_us": cpu / max(1, m["completed"])
            * 1e6, "wall": wall}


def rows(size: Size = "quick") -> list[Row]:
    """The pacing row (see the module docstring)."""
    rate, seconds, rounds = SIZES[size]
    args = ["--api", "vllm", "--zero-latency", "--enable-prompt-tokens-details",
            "--max-num-seqs", "4096", "--max-waiting", "65536"]
    results = []
    with sim_process(*args) as (url, _):
        for r in range(rounds):
            results.append(asyncio.run(one_round(url, rate, seconds, seed=r)))
    ratios = [x["achieved"] / x["offered"] for x in results]
    ratio = statistics.median(ratios)
    achieved = statistics.median(x["achieved"] for x in results)
    offered = statistics.median(x["offered"] for x in results)
    all_done = all(x["completed"] == x["n"] for x in results)
    note = (f"{TURNS} turns, think {THINK} s, {int(rate * seconds)} conversations a round, "
            f"{rounds} round(s); completed {'all' if all_done else 'NOT all'}; conversation "
            f"throughput {statistics.median(x['throughput'] for x in results):.1f}/s; "
            f"later-turn cache hit ratio {statistics.median(x['cache'] for x in results):.2f};"
            f" turn send lag p99 {statistics.median(x['lag_p99_ms'] for x in results):.2f} ms;"
            f" client CPU {statistics.median(x['cpu_per_turn_us'] for x in results):.0f} µs "
            "per turn")
    return [Row(bench="conversations",
                metric=f"multi-turn load: conversation arrivals achieved (Poisson "
                       f"{rate:g} conv/s, conv/s)",
                ours=achieved, baseline=offered, baseline_name="offered (same schedule)",
                ratio=ratio, target="0.98 ≤ ratio ≤ 1.02",
                met=bool(all_done and 0.98 <= ratio <= 1.02),
                spread=spread(ratios, "{:.4f}"), note=note,
                extra={"rounds": results})]


def main(argv: list[str] | None = None) -> int:
    size, _ = size_from_args(argv, __doc__ or "")
    print_rows(rows(size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
