"""Tasks/s through RolloutController (tracing on) vs a bare aiohttp loop, same simulator.

Both clients send the same SGLang ``/generate`` requests (prompt ids, 16 new tokens) to one
zero-latency simulated server running in a separate process, at the same concurrency, in
one run, alternating rounds. Prints a table: tasks/s of each, the ratio (target >= 0.85)
and the controller's per-task overhead in microseconds ((T_ctl - T_bare) / N).

    .venv/bin/python bench/bench_controller.py [--quick] [--tasks N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

from rollout_kit.config import ExecutorConfig, GenerationConfig
from rollout_kit.controller import RolloutController
from rollout_kit.io import ModelRequest

PROMPT = list(range(10, 42))
MAX_NEW = 16
GCONFIG = GenerationConfig(max_new_tokens=MAX_NEW)


class OneGenerate:
    """The minimal workflow: one agenerate per task."""

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        del data
        resp = await engine.agenerate(ModelRequest(input_ids=PROMPT, gconfig=GCONFIG))
        return resp.output_tokens


async def bare(addr: str, n: int, conc: int) -> float:
    payload = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": MAX_NEW,
                                                        "temperature": 1.0},
               "return_logprob": True, "stream": False}
    sem = asyncio.Semaphore(conc)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one() -> None:
            async with sem, s.post(f"http://{addr}/generate", json=payload) as r:
                r.raise_for_status()
                body = await r.json()
                _ = [x[1] for x in body["meta_info"]["output_token_logprobs"]]

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0


async def controller(addr: str, n: int, conc: int) -> float:
    ctl = RolloutController(sglang=[addr],
                            executor_config=ExecutorConfig(max_concurrent_rollouts=conc))
    async with ctl:
        await ctl.rollout_batch_async([0] * 8, OneGenerate())  # warm the session
        t0 = time.perf_counter()
        wf = OneGenerate()
        for i in range(n):
            ctl.submit(i, wf)
        res = await ctl.wait_async(n)
        dt = time.perf_counter() - t0
        assert all(r.ok for r in res) and len(ctl.traces()) == n + 8
    return dt


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_health(addr: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.get(f"http://{addr}/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("simulator did not come up")


async def main_async(args: argparse.Namespace, addr: str) -> None:
    await wait_health(addr)
    await bare(addr, 200, args.concurrency)  # warm-up
    t_bare: list[float] = []
    t_ctl: list[float] = []
    for _ in range(args.rounds):
        t_bare.append(await bare(addr, args.tasks, args.concurrency))
        t_ctl.append(await controller(addr, args.tasks, args.concurrency))
    b, c = statistics.median(t_bare), statistics.median(t_ctl)
    n = args.tasks
    print(f"\n{n} tasks, concurrency {args.concurrency}, {args.rounds} rounds (median), "
          "zero-latency SGLang simulator in a separate process")
    print(f"{'client':<28}{'tasks/s':>10}{'s/run':>10}")
    print(f"{'bare aiohttp loop':<28}{n / b:>10.0f}{b:>10.3f}")
    print(f"{'RolloutController (traced)':<28}{n / c:>10.0f}{c:>10.3f}")
    print(f"ratio controller/bare: {b / c:.3f}  (target >= 0.85)")
    print(f"controller overhead per task: {(c - b) / n * 1e6:.0f} us")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run (1000 tasks, 2 rounds)")
    p.add_argument("--tasks", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.tasks, args.rounds = 1000, 2
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rollout_kit", "sim", "--api", "sglang",
                             "--port", str(port), "--zero-latency",
                             "--max-num-seqs", "100000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        asyncio.run(main_async(args, f"127.0.0.1:{port}"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
