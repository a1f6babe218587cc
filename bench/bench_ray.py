"""Ray scale-out benchmark: CPU-bound rewards in-process vs on Ray workers, dispatch overhead.

Starts one zero-latency SGLang simulator (subprocess) and a local Ray instance, then in the
same run measures:

1. tasks/s of a workflow that samples a group of 4 completions and spends 5 ms of pure
   Python on the reward of each sample (``--samples 1`` for one sample per task; on 2 cores
   that gave 1.48×, the driver's ~0.9 ms of Ray dispatch per task being a larger share),
   with 1 in-process worker (plain ``RolloutController``; the GIL caps it at one core) and
   with N Ray workers (``RayScheduler``);
2. the per-task dispatch overhead of Ray mode with a trivial workflow (no generation, no
   reward): throughput-based (wall / tasks with many in flight) and round trip (one at a
   time), against the in-process controller.

The Ray row (target: 2 Ray workers ≥ 1.6× one in-process worker). Skipped with a note
when ``ray`` is not installed, and at ``--smoke`` size (Ray's start-up alone takes seconds).

Usage::

    python bench/bench_ray.py [--smoke|--quick|--full] [--tasks 400] [--workers 2]
        [--reward-ms 5] [--samples 4]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import Row, Size, check, print_rows, size_from_args

from rollout_kit import GenerationConfig, ModelRequest, RolloutController

__all__ = ["rows"]

SPEEDUP_TARGET = 1.6


def burn(seconds: float) -> float:
    """Pure-Python busy work for ``seconds`` (holds the GIL)."""
    end = time.perf_counter() + seconds
    acc = 0.0
    while time.perf_counter() < end:
        for i in range(200):
            acc += i * 0.5
    return acc


class CpuRewardWorkflow:
    """A group of ``samples`` short generations (GRPO-style), then a CPU-bound reward of
    ``reward_s`` seconds per sample."""

    def __init__(self, reward_s: float, samples: int = 1) -> None:
        self.reward_s = reward_s
        self.samples = samples
        self.gconfig = GenerationConfig(max_new_tokens=8)

    async def arun_episode(self, engine: Any, data: Any) -> dict[str, Any]:
        resps = await asyncio.gather(*(
            engine.generate_async(ModelRequest(text=f"task {data}:{i}", gconfig=self.gconfig))
            for i in range(self.samples)))
        for _ in resps:
            burn(self.reward_s)
        return {"tokens": sum(r.output_len for r in resps), "pid": os.getpid()}


class TrivialWorkflow:
    """Returns its data: measures pure dispatch overhead."""

    async def arun_episode(self, engine: Any, data: Any) -> Any:  # noqa: ARG002
        return data


def start_sim() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollout_kit", "sim", "--api", "sglang", "--num-servers", "1",
         "--zero-latency", "--seed", "0"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def throughput(ctl: RolloutController, wf: Any, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        ctl.submit(i, wf)
    res = await ctl.wait_async(n, timeout=600)
    dt = time.perf_counter() - t0
    bad = [r for r in res if r.status != "accepted"]
    if bad:
        raise RuntimeError(f"{len(bad)} task(s) did not succeed: {bad[0].error!r}")
    return n / dt


async def round_trip(ctl: RolloutController, wf: Any, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        await ctl.wait_for_async(ctl.submit(i, wf), timeout=60)
    return (time.perf_counter() - t0) / n


async def measure(ctl: RolloutController, n: int, reward_s: float,
                  samples: int) -> dict[str, float]:
    await ctl.initialize_async()
    cpu, triv = CpuRewardWorkflow(reward_s, samples), TrivialWorkflow()
    await throughput(ctl, cpu, max(8, n // 10))  # warm-up (connections, imports)
    await throughput(ctl, triv, 50)
    out = {
        "cpu_tasks_s": await throughput(ctl, cpu, n),
        "trivial_tasks_s": await throughput(ctl, triv, 5 * n),
        "trivial_rtt_ms": 1e3 * await round_trip(ctl, triv, max(20, n // 4)),
    }
    await ctl.close_async()
    return out


def rows(size: Size = "quick", tasks: int | None = None, workers: int = 2,
         reward_ms: float = 5.0, samples: int = 4) -> list[Row]:
    """Row 8: CPU-bound tasks/s on ``workers`` Ray workers vs one in-process worker.

    Each task is a group of ``samples`` generations with a ``reward_ms`` pure-Python reward
    per sample (GRPO-style groups: the issue's "5 ms of pure Python per sample")."""
    name = (f"tasks/s, {samples} samples × {reward_ms:g} ms CPU-bound reward, {workers} Ray "
            "workers vs 1 in-process")
    if importlib.util.find_spec("ray") is None:
        return [Row("ray", name, None, note="skipped: ray is not installed "
                    "(pip install 'rollout-kit[ray]')")]
    if size == "smoke":
        return [Row("ray", name, None, note="skipped at --smoke size (Ray start-up)")]
    n = tasks or {"smoke": 40, "quick": 100, "full": 300}[size]
    rounds = 1 if size == "quick" else 3
    import ray

    from rollout_kit.workers import RayScheduler

    ray.cloudpickle.register_pickle_by_value(  # type: ignore[no-untyped-call]
        sys.modules[__name__])
    proc, url = start_sim()
    local: list[dict[str, float]] = []
    remote: list[dict[str, float]] = []
    try:
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.2",  # Ray maps 127.0.0.1 to the interface IP
                 configure_logging=False)
        reward_s = reward_ms / 1e3
        for _ in range(rounds):
            local.append(asyncio.run(measure(RolloutController(sglang=[url]), n, reward_s,
                                             samples)))
            sched = RayScheduler(num_workers=workers)
            remote.append(asyncio.run(measure(RolloutController(sglang=[url], scheduler=sched),
                                              n, reward_s, samples)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        ray.shutdown()
    speedups = [r["cpu_tasks_s"] / loc["cpu_tasks_s"] for r, loc in zip(remote, local,
                                                                         strict=True)]
    sp = statistics.median(speedups)
    r_rate = statistics.median(r["cpu_tasks_s"] for r in remote)
    l_rate = statistics.median(r["cpu_tasks_s"] for r in local)
    r_triv = statistics.median(r["trivial_tasks_s"] for r in remote)
    l_triv = statistics.median(r["trivial_tasks_s"] for r in local)
    r_rtt = statistics.median(r["trivial_rtt_ms"] for r in remote)
    l_rtt = statistics.median(r["trivial_rtt_ms"] for r in local)
    return [
        Row("ray", name, r_rate, l_rate, "1 in-process worker", sp,
            f"ratio ≥ {SPEEDUP_TARGET}", check(sp, ">=", SPEEDUP_TARGET),
            f"ratio {min(speedups):.2f}–{max(speedups):.2f}",
            f"{n} tasks × {rounds} round(s); {os.cpu_count()} cores shared with the driver "
            "and the simulator"),
        Row("ray", "dispatch overhead per task (ms), trivial workflow", 1e3 / r_triv,
            1e3 / l_triv, "in-process", None, "", None, "",
            f"round trip one at a time: {r_rtt:.2f} ms vs {l_rtt:.2f} ms in-process"),
    ]


def main(argv: list[str] | None = None) -> int:
    def add(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--tasks", type=int, default=None, help="CPU-bound tasks per mode")
        ap.add_argument("--workers", type=int, default=2, help="Ray worker actors")
        ap.add_argument("--reward-ms", type=float, default=5.0, help="CPU per reward (ms)")
        ap.add_argument("--samples", type=int, default=4, help="samples (rewards) per task")

    size, args = size_from_args(argv, __doc__ or "", add)
    print_rows(rows(size, args.tasks, args.workers, args.reward_ms, args.samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
