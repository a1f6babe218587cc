"""Ray scale-out benchmark: CPU-bound rewards in-process vs on Ray workers, dispatch overhead.

Starts one zero-latency SGLang simulator (subprocess) and a local Ray instance, then in the
same run measures:

1. tasks/s of a workflow that generates once and spends 5 ms of pure Python on its reward,
   with 1 in-process worker (plain ``RolloutController``; the GIL caps it at one core) and
   with N Ray workers (``RayScheduler``);
2. the per-task dispatch overhead of Ray mode with a trivial workflow (no generation, no
   reward): throughput-based (wall / tasks with many in flight) and round trip (one at a
   time), against the in-process controller.

Usage::

    python bench/bench_ray.py [--quick] [--tasks 400] [--workers 2] [--reward-ms 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from typing import Any

from rollout_kit.config import GenerationConfig
from rollout_kit.controller import RolloutController
from rollout_kit.io import ModelRequest


def burn(seconds: float) -> float:
    """Pure-Python busy work for ``seconds`` (holds the GIL)."""
    end = time.perf_counter() + seconds
    acc = 0.0
    while time.perf_counter() < end:
        for i in range(200):
            acc += i * 0.5
    return acc


class CpuRewardWorkflow:
    """One short generation, then a CPU-bound reward of ``reward_s`` seconds."""

    def __init__(self, reward_s: float) -> None:
        self.reward_s = reward_s
        self.gconfig = GenerationConfig(max_new_tokens=8)

    async def arun_episode(self, engine: Any, data: Any) -> dict[str, Any]:
        resp = await engine.agenerate(ModelRequest(text=f"task {data}", gconfig=self.gconfig))
        burn(self.reward_s)
        return {"tokens": resp.output_len, "pid": os.getpid()}


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


async def measure(ctl: RolloutController, n: int, reward_s: float) -> dict[str, float]:
    await ctl.initialize_async()
    cpu, triv = CpuRewardWorkflow(reward_s), TrivialWorkflow()
    await throughput(ctl, cpu, max(8, n // 10))  # warm-up (connections, imports)
    await throughput(ctl, triv, 50)
    out = {
        "cpu_tasks_s": await throughput(ctl, cpu, n),
        "trivial_tasks_s": await throughput(ctl, triv, 5 * n),
        "trivial_rtt_ms": 1e3 * await round_trip(ctl, triv, max(20, n // 4)),
    }
    await ctl.aclose()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (about 20 s)")
    ap.add_argument("--tasks", type=int, default=None, help="CPU-bound tasks per mode")
    ap.add_argument("--workers", type=int, default=2, help="Ray worker actors")
    ap.add_argument("--reward-ms", type=float, default=5.0, help="CPU per reward (ms)")
    args = ap.parse_args()
    n = args.tasks or (80 if args.quick else 400)

    import ray

    from rollout_kit.ray_scheduler import RayScheduler

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    proc, url = start_sim()
    try:
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.2",  # Ray maps 127.0.0.1 to the interface IP
                 configure_logging=False)
        reward_s = args.reward_ms / 1e3
        local = asyncio.run(measure(RolloutController(sglang=[url]), n, reward_s))
        sched = RayScheduler(num_workers=args.workers)
        remote = asyncio.run(measure(RolloutController(sglang=[url], scheduler=sched), n,
                                     reward_s))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        ray.shutdown()

    print(f"\nRay scale-out, {n} CPU-bound tasks ({args.reward_ms:g} ms pure-Python reward "
          f"each), {os.cpu_count()} cores, load avg {os.getloadavg()[0]:.2f}")
    print(f"{'mode':<24}{'cpu tasks/s':>12}{'trivial tasks/s':>17}{'trivial RTT ms':>16}")
    for name, r in (("in-process (1 worker)", local), (f"ray ({args.workers} workers)", remote)):
        print(f"{name:<24}{r['cpu_tasks_s']:>12.1f}{r['trivial_tasks_s']:>17.1f}"
              f"{r['trivial_rtt_ms']:>16.2f}")
    speedup = remote["cpu_tasks_s"] / local["cpu_tasks_s"]
    overhead_ms = 1e3 / remote["trivial_tasks_s"] - 1e3 / local["trivial_tasks_s"]
    print(f"speed-up ray/in-process (CPU-bound): {speedup:.2f}x (target >= 1.6x)")
    print(f"Ray dispatch overhead per task: {overhead_ms:.3f} ms at throughput, "
          f"{remote['trivial_rtt_ms'] - local['trivial_rtt_ms']:.2f} ms round trip")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
