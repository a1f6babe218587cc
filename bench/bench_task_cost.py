"""A task's own cost without a network: the controller vs a hand-written asyncio pipeline.

Both sides run the same work per task in one process, in the same run: an in-process engine
whose ``generate_async`` returns a ready response (no HTTP, no sleep) and a trivial sync
reward (``completion == answer``).

* **rollout_kit**: ``RolloutController(engine)`` + ``SingleTurnWorkflow(reward)``
  (``n_samples=1``, tracing on, traces kept in memory), tasks submitted from a script in
  batches of 2,000 (a loop of ``submit``) and awaited with ``wait_async``;
* **hand-written**: a coroutine per task that awaits the same stub generate and calls the
  reward, ``asyncio.gather`` in batches of 2,000.

Reported per size (10k and 100k; 1M with ``--full``): µs per task (wall clock; there is no
I/O, so wall ≈ CPU; medians over rounds, each round ours then hand-written, back to back: 7
rounds at 10k, 3 at 100k, 1 at 1M), the ratio hand-written ÷ ours as the median of the
rounds' own ratios (higher is better for rollout_kit; the target ≤ 5× reads as ratio ≥ 0.2),
RSS growth per finished task, and the flatness (target
≤ 1.1): in each run of the largest size, the thread CPU time per task of its last 10,000
tasks ÷ that of its first 10,000 — does a task cost more once the controller has finished
many? — and, for information, µs per task at the largest size ÷ at the smallest. The second
compares runs taken minutes apart: on a shared 2-core VM the host's own drift (±20 %
between runs of the same size) is in it, while within one run the executed instructions per
task stay the same out to 1M tasks (callgrind: 2,435M / 2,428M / 2,426M per 10k tasks after
0 / 50k / 150k).

RSS growth is measured once per size in a fresh process (``--rss N``): in the process that
ran the timed rounds, memory freed by an earlier round is reused by the next one and the
growth reads as 0.

    .venv/bin/python bench/bench_task_cost.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import Row, Size, check, run_alone, spread

from rollout_kit import (
    ExecutorConfig,
    GenerationConfig,
    ModelRequest,
    ModelResponse,
    RolloutController,
)
from rollout_kit._workflows import RewardMode, SingleTurnWorkflow
from rollout_kit.engines import InferenceEngine

__all__ = ["rows"]

BATCH = 2000
RATIO_TARGET = 5.0  # ours ≤ 5× the hand-written pipeline's µs per task
FLAT_TARGET = 1.1
RSS_TARGET_B = 400
EDGE = 5  # batches at each end of a run for the flatness ratio (5 × BATCH = 10,000 tasks)
REWARD_MODE: RewardMode = "auto"  # the default: cheap rewards move onto the loop
OUT = [53]  # "5" in the byte tokenizer
ITEM = {"prompt": "What is 2+3?", "answer": "5"}


def reward(prompt: str, completion: str, *_: Any, answer: str = "", **__: Any) -> float:
    """The trivial sync reward both sides call (AReaL's signature)."""
    del prompt
    return float(completion == answer)


class InstantEngine(InferenceEngine):
    """Generates locally at once: the response is built, nothing is awaited."""

    name = "instant"

    async def initialize_async(self) -> None:
        return None

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        ids = req.input_ids or [1, 2, 3]
        return ModelResponse(input_tokens=ids, output_tokens=list(OUT),
                             output_logprobs=[-0.5], output_versions=[0],
                             stop_reason="stop", text="5", latency=0.0, ttft=math.nan,
                             server=self.name)

    async def close_async(self) -> None:
        return None

    def get_version(self) -> int:
        return 0

    def set_version(self, version: int) -> None:
        del version

    async def pause_generation_async(self) -> None:
        return None

    async def continue_generation_async(self) -> None:
        return None

    async def health_async(self) -> dict[str, bool]:
        return {self.name: True}

    async def server_metrics_async(self) -> Any:
        return None


def _rss() -> int:
    """Resident set size of this process in bytes (Linux ``/proc``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


async def _ours(n: int) -> tuple[float, float, list[float]]:
    """(µs per task, RSS bytes per finished task, CPU µs per task of each batch in order)
    for ``n`` tasks through the controller (the RSS figure means something only in a
    process that ran nothing before)."""
    engine = InstantEngine()
    ctl = RolloutController(engine, executor_config=ExecutorConfig(
        max_concurrent_rollouts=BATCH, queue_size=None))
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=4), reward_mode=REWARD_MODE)
    for _ in range(BATCH):  # warm-up (the reward's probe, first allocations)
        ctl.submit(ITEM, wf)
    await ctl.wait_async(BATCH)
    gc.collect()
    rss0, t0 = _rss(), time.perf_counter()
    done = 0
    batches: list[float] = []
    while done < n:
        k = min(BATCH, n - done)
        c0 = time.thread_time()
        for _ in range(k):
            ctl.submit(ITEM, wf)
        res = await ctl.wait_async(k)
        batches.append((time.thread_time() - c0) / k * 1e6)
        if not all(r.ok for r in res):
            raise RuntimeError(f"task cost benchmark: a task ended {res[0].status}")
        done += k
    wall = time.perf_counter() - t0
    grew = _rss() - rss0
    if len(ctl.tracer) != n + BATCH:
        raise RuntimeError("task cost benchmark: traces missing")
    await ctl.close_async()
    return wall / n * 1e6, grew / n, batches


async def _hand(n: int) -> float:
    """µs per task for the hand-written pipeline."""
    engine = InstantEngine()
    gconfig = GenerationConfig(max_new_tokens=4)

    async def one() -> float:
        resp = await engine.generate_async(ModelRequest(text=ITEM["prompt"], gconfig=gconfig))
        return reward(ITEM["prompt"], resp.text or "", resp.input_tokens, resp.output_tokens,
                      answer=ITEM["answer"])

    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(BATCH, n - done)
        out = await asyncio.gather(*(one() for _ in range(k)))
        if sum(out) != k:
            raise RuntimeError("hand-written pipeline: wrong rewards")
        done += k
    return (time.perf_counter() - t0) / n * 1e6


def _rss_fresh(n: int) -> float:
    """RSS bytes per finished task for ``n`` tasks, in a fresh interpreter."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--rss", str(n)],
                          capture_output=True, text=True, timeout=1800, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"task cost benchmark: the RSS child exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-400:]}")
    return float(proc.stdout.split()[-1])


def rows(size: Size = "quick") -> list[Row]:
    """µs per task at each size (ours and hand-written), RSS per task, flatness."""
    sizes = {"smoke": [2000], "quick": [10_000, 100_000],
             "full": [10_000, 100_000, 1_000_000]}[size]
    rounds = 1 if size == "smoke" else 3
    small_rounds = 1 if size == "smoke" else 7  # 10k rounds take a second: more of them
    out: list[Row] = []
    per: dict[int, float] = {}
    growth: list[float] = []  # per round of the largest size: late batches ÷ early ones
    for n in sizes:
        r = small_rounds if n <= 10_000 else rounds if n <= 100_000 else 1
        ours, hand = [], []
        for _ in range(r):  # interleaved
            wall, _rss_b, batches = asyncio.run(_ours(n))
            ours.append(wall)
            if n == sizes[-1] and len(batches) >= 2 * EDGE:
                growth.append(statistics.median(batches[-EDGE:])
                              / statistics.median(batches[:EDGE]))
            hand.append(asyncio.run(_hand(n)))
        mo, mh = statistics.median(ours), statistics.median(hand)
        # the ratio of each round's pair (run back to back), then their median: the host's
        # speed drifts by ±30 % over tens of seconds on a shared VM, within a pair far less
        ratios = [h / o for o, h in zip(ours, hand, strict=True)]
        rel = statistics.median(ratios)
        per[n] = mo
        tgt = n in (sizes[0], sizes[-1])
        out.append(Row("task cost", f"µs per task, {n:,} tasks, in-process engine, trivial "
                       "reward", mo, mh, "hand-written asyncio pipeline", rel,
                       f"ours ≤ {RATIO_TARGET:g}× (ratio ≥ {1 / RATIO_TARGET:.2f})" if tgt else "",
                       check(rel, ">=", 1 / RATIO_TARGET) if tgt else None,
                       f"ours {spread(ours)}; hand {spread(hand)}; ratio "
                       f"{spread(ratios, '{:.2f}')}",
                       f"ours = {1 / rel:.1f}× the hand-written pipeline (median of {r} "
                       "rounds' ratios; each round ours then hand, back to back)"))
        if n < 10_000:
            continue  # a few pages of RSS: not a per-task figure
        mb = _rss_fresh(n)
        out.append(Row("task cost", f"RSS growth per finished task, {n:,} tasks (traces in "
                       "memory)", mb, None, "", None, f"≤ {RSS_TARGET_B} B" if n == sizes[-1]
                       else "", check(mb, "<=", RSS_TARGET_B) if n == sizes[-1] else None,
                       "", "bytes; /proc/self/statm before and after the timed part, "
                       "one fresh process"))
    if growth:
        g = statistics.median(growth)
        last = sizes[-1]
        out.append(Row("task cost", f"flatness: CPU µs per task of the last {EDGE * BATCH:,} "
                       f"tasks of a {last:,}-task run ÷ of its first {EDGE * BATCH:,}", g,
                       None, "", None, f"≤ {FLAT_TARGET}", check(g, "<=", FLAT_TARGET),
                       spread(growth, "{:.2f}"),
                       f"the same run (one controller), thread CPU time per batch of "
                       f"{BATCH:,}, medians of {EDGE} batches; median of {len(growth)} "
                       "round(s)"))
    if len(sizes) > 1:
        lo, hi = per[sizes[0]], per[sizes[-1]]
        out.append(Row("task cost", f"µs per task at {sizes[-1]:,} ÷ at {sizes[0]:,} "
                       "(separate runs)", hi / lo, None, "", None, "", None, "",
                       "medians of the rows above: runs minutes apart on a shared machine, "
                       "so the host's drift is in it (information; the row above is the "
                       "target)"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows (``--rss N``: print RSS bytes per task for N tasks)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--rss":
        print(asyncio.run(_ours(int(args[1])))[1])
        return 0
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
