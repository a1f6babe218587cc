"""The RL loop: its own cost per step, and what asynchronous RL buys on a long tail.

Row 1, the loop's own cost: ``run_rl_async`` (synchronous setting, ``max_staleness=0``, no
trainer or update time) against a hand-written asyncio loop making the same calls on the same
controller — per step ``submit`` × batch, ``wait_async(batch)``, ``pause_generation_async``,
``set_version``, ``continue_generation_async`` — on one zero-latency simulated SGLang server
in its own process. Seconds per step, interleaved rounds (ours then hand-written, each on a
fresh controller), the ratio hand-written ÷ ours as the median of the rounds' own ratios
(target: ours ≤ 1.2× hand-written, i.e. ratio ≥ 0.83).

Row 2, the finding: steps/s of ``max_staleness=4`` ÷ ``max_staleness=0`` on four in-process
simulated servers with lognormal output lengths (mean 100 tokens, log-sd 1, ``time_scale``
0.1), a simulated trainer (0.25 s + 50 µs per output token) and update (0.1 s): the median
of the rounds' ratios with their spread. Not a target: it depends on the workload.

    .venv/bin/python bench/bench_rl.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import statistics
import sys
import time
from collections.abc import Sequence

from _common import Row, Size, check, run_alone, sim_process, spread

from rollout_kit import GenerationConfig, RolloutController, SingleTurnWorkflow, analysis
from rollout_kit.rl import RLConfig, SimulatedTrain, SimulatedUpdate, run_rl_async
from rollout_kit.sim import serve

__all__ = ["rows"]

RATIO_TARGET = 1 / 1.2
PROMPTS = ["What is 17+25?", "What is 6*7?"]


def reward(prompt: str, completion: str, prompt_ids: list[int], completion_ids: list[int],
           **_: object) -> float:
    del prompt, prompt_ids, completion_ids
    return float("42" in completion)


def _workflow(max_new: int) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=max_new),
                              reward_mode="inline")


async def _train(batch: object, step: int) -> None:
    del batch, step


async def ours(addresses: list[str], steps: int, batch: int) -> float:
    """Seconds per step of run_rl_async, synchronous, no trainer or update time."""
    ctl = RolloutController(sglang=addresses, scrape_interval=None)
    await ctl.initialize_async()
    t0 = time.perf_counter()
    await run_rl_async(ctl, itertools.cycle(PROMPTS), _workflow(16),
                       RLConfig(steps=steps, batch_size=batch), train=_train)
    dt = time.perf_counter() - t0
    await ctl.close_async()
    return dt / steps


async def hand_written(addresses: list[str], steps: int, batch: int) -> float:
    """Seconds per step of the same calls, written by hand."""
    ctl = RolloutController(sglang=addresses, scrape_interval=None)
    await ctl.initialize_async()
    wf = _workflow(16)
    prompts = itertools.cycle(PROMPTS)
    t0 = time.perf_counter()
    for step in range(steps):
        for _ in range(batch):
            ctl.submit(next(prompts), wf)
        results = await ctl.wait_async(batch)
        await _train(results, step)
        await ctl.pause_generation_async()
        ctl.set_version(step + 1)
        await ctl.continue_generation_async()
    dt = time.perf_counter() - t0
    await ctl.close_async()
    return dt / steps


async def _cost(url: str, steps: int, batch: int, rounds: int) -> dict[str, list[float]]:
    addresses = [url.removeprefix("http://")]
    res: dict[str, list[float]] = {"ours": [], "hand": []}
    await ours(addresses, 2, batch)  # warm-up: imports, connections, the first dispatch
    await hand_written(addresses, 2, batch)
    for _ in range(rounds):
        gc.collect()
        res["ours"].append(await ours(addresses, steps, batch))
        gc.collect()
        res["hand"].append(await hand_written(addresses, steps, batch))
    return res


SIM = {"time_scale": 0.1, "output_length": "lognormal", "output_length_sigma": 1.0,
       "mean_output_tokens": 100, "context_length": 100_000, "jitter_cv": 0.0}


async def _speedup(steps: int, batch: int, rounds: int) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {"sync": [], "async": []}
    train = SimulatedTrain(fixed_s=0.25, per_token_s=5e-5)
    update = SimulatedUpdate(seconds=0.1)
    for r in range(rounds):
        async with serve("sglang", 4, seed=r, **SIM) as servers:  # type: ignore[arg-type]
            for eta, key in ((0, "sync"), (4, "async")):
                ctl = RolloutController(sglang=servers.addresses, scrape_interval=None)
                await run_rl_async(ctl, itertools.cycle(PROMPTS), _workflow(4000),
                                   RLConfig(steps=steps, batch_size=batch, max_staleness=eta),
                                   train=train, update=update)
                await ctl.close_async()
                t = ctl.tracer.frames()
                s = analysis.rl_summary(t.steps, t.step_samples)
                res[key].append(float(s["steps_per_s"]))
    return res


def rows(size: Size = "quick") -> list[Row]:
    """Row 1 (the loop's cost per step) and row 2 (async / sync steps/s on a long tail)."""
    steps = {"smoke": 3, "quick": 20, "full": 50}[size]
    batch = {"smoke": 8, "quick": 64, "full": 256}[size]
    rounds = {"smoke": 1, "quick": 5, "full": 7}[size]
    out: list[Row] = []
    zero = ["--api", "sglang", "--zero-latency", "--max-num-seqs", "100000",
            "--max-waiting", "100000"]
    with sim_process(*zero) as (url, _):
        res = asyncio.run(_cost(url, steps, batch, rounds))
    ratios = [h / o for o, h in zip(res["ours"], res["hand"], strict=True)]
    r = statistics.median(ratios)
    ours_ms = statistics.median(res["ours"]) * 1e3
    hand_ms = statistics.median(res["hand"]) * 1e3
    out.append(Row(
        "rl", f"RL loop: ms per step ({batch} rollouts, sync, zero-latency sim)", ours_ms,
        hand_ms, "hand-written asyncio loop, same calls", r, "ours ≤ 1.2× (ratio ≥ 0.83)",
        check(r, ">=", RATIO_TARGET),
        f"ours {spread([x * 1e3 for x in res['ours']])}; hand "
        f"{spread([x * 1e3 for x in res['hand']])}; ratios {spread(ratios, '{:.2f}')}",
        f"{steps} steps per round, median of {rounds} interleaved rounds; per step: submit × "
        f"{batch}, wait, pause_generation, set_version, continue_generation"))
    s_steps = {"smoke": 2, "quick": 6, "full": 10}[size]
    s_rounds = {"smoke": 1, "quick": 3, "full": 5}[size]
    sp = asyncio.run(_speedup(s_steps, 32, s_rounds))
    speedups = [a / s for a, s in zip(sp["async"], sp["sync"], strict=True)]
    out.append(Row(
        "rl", "RL loop: async (max_staleness=4) ÷ sync steps/s, long-tail lengths",
        statistics.median(sp["async"]), statistics.median(sp["sync"]),
        "the same loop, max_staleness=0", statistics.median(speedups), "", None,
        f"speedup {spread(speedups, '{:.2f}')}; async {spread(sp['async'])} steps/s, sync "
        f"{spread(sp['sync'])} steps/s",
        f"4 sim servers, lognormal lengths (mean 100 tokens, σ 1, time_scale 0.1), "
        f"{s_steps} steps × 32, train 0.25 s + 50 µs/token, update 0.1 s; "
        f"{s_rounds} rounds (seeds)"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
