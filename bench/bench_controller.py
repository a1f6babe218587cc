"""RolloutController vs a bare aiohttp loop: throughput and event-loop health (rows 1 and 9).

Row 1: tasks/s through ``RolloutController`` (tracing on) vs a bare aiohttp loop (one shared
session, semaphore, orjson) sending the same SGLang ``/generate`` request to one
zero-latency simulator in its own process, at concurrency 64 / 256 / 1024, interleaved
rounds, medians. The client's CPU time per task is printed too: when the simulator (one
core) is the bottleneck, both clients reach the same rate and only the CPU column shows the
controller's extra cost.

Row 9: the maximum event-loop lag seen by a 10 ms ticker (wake-up time minus the time it
asked for) while 1,000 tasks are in flight: the submission of all tasks and their whole
run, against a simulator with 0.5 s ± 50 % latency (a rollout's steady state), and against a
zero-latency simulator (saturated; stress case). The controller's tasks are submitted two
ways: by a loop of ``submit`` in one step (it holds the loop for the whole loop) and by
``rollout_batch_async`` (it yields every ``SUBMIT_SLICE`` submits). Same for the bare loop
(``gather`` of all tasks at once).

    .venv/bin/python bench/bench_controller.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import orjson
from _common import (
    Row,
    Size,
    check,
    cpu_seconds,
    pct,
    run_alone,
    sim_process,
    spread,
)

from rollout_kit import ExecutorConfig, GenerationConfig, ModelRequest, RolloutController

__all__ = ["rows"]

PROMPT = list(range(10, 42))
MAX_NEW = 16
GCONFIG = GenerationConfig(max_new_tokens=MAX_NEW)
RATIO_TARGET = 0.85
LAG_TARGET_MS = 20.0
PAYLOAD = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 1.0},
           "return_logprob": True, "stream": False}


class OneGenerate:
    """The minimal workflow: one agenerate per task."""

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        del data
        resp = await engine.generate_async(ModelRequest(input_ids=PROMPT, gconfig=GCONFIG))
        return resp.output_tokens


class Bare:
    """The loop one would write by hand: one session, a semaphore, orjson."""

    name = "bare"

    def __init__(self, url: str, conc: int) -> None:
        self.url, self.conc = url, conc
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Bare:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        await self.run(2 * self.conc)  # warm-up: opens the connections
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()

    async def run(self, n: int) -> None:
        """``n`` requests with at most ``conc`` in flight."""
        assert self.session is not None
        s = self.session
        sem = asyncio.Semaphore(self.conc)
        headers = {"Content-Type": "application/json"}

        async def one() -> None:
            async with sem, s.post(f"{self.url}/generate", data=orjson.dumps(PAYLOAD),
                                   headers=headers) as r:
                r.raise_for_status()
                body = orjson.loads(await r.read())
                _ = [x[1] for x in body["meta_info"]["output_token_logprobs"]]

        await asyncio.gather(*(one() for _ in range(n)))


class Ctl:
    """``RolloutController`` (tracing on), one ``agenerate`` per task, submitted by a loop of
    ``submit`` in one step."""

    name = "ctl"

    def __init__(self, url: str, conc: int) -> None:
        self.conc = conc
        self.ctl = RolloutController(
            sglang=[url.removeprefix("http://")],
            executor_config=ExecutorConfig(max_concurrent_rollouts=conc))
        self.wf = OneGenerate()
        self.done = 0

    async def __aenter__(self) -> Ctl:
        await self.ctl.__aenter__()
        await self.run(2 * self.conc)  # warm-up: opens the connections
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ctl.close_async()

    async def run(self, n: int) -> None:
        """``n`` tasks submitted at once, then waited for."""
        for i in range(n):
            self.ctl.submit(i, self.wf)
        self._check(await self.ctl.wait_async(n))

    def _check(self, res: list[Any]) -> None:
        self.done += len(res)
        # len(tracer) counts traced tasks without building DataFrames inside the timing
        if not all(r.ok for r in res) or len(self.ctl.tracer) != self.done:
            raise RuntimeError("controller benchmark: failed tasks or missing traces")


class CtlBatch(Ctl):
    """The same controller, the tasks submitted with ``rollout_batch_async`` (which yields to
    the loop every ``SUBMIT_SLICE`` submits)."""

    name = "ctl_batch"

    async def run(self, n: int) -> None:
        self._check(await self.ctl.rollout_batch_async(list(range(n)), self.wf))


async def throughput(url: str, n: int, conc: int, rounds: int) -> dict[str, list[float]]:
    """Interleaved rounds of bare and controller at one concurrency (set-up not timed)."""
    res: dict[str, list[float]] = {"bare": [], "ctl": [], "bare_cpu": [], "ctl_cpu": []}
    async with Bare(url, conc) as b, Ctl(url, conc) as c:
        for _ in range(rounds):
            for client in (b, c):
                gc.collect()
                c0, t0 = cpu_seconds(), time.perf_counter()
                await client.run(n)
                wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
                res[client.name].append(n / wall)
                res[f"{client.name}_cpu"].append(cpu / n * 1e6)
    return res


async def loop_lag(run: Callable[[int], Awaitable[None]], n: int,
                   period: float = 0.01) -> list[float]:
    """Lags (s) of a ``period`` ticker while ``run(n)`` runs."""
    lags: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            asked = time.perf_counter() + period
            await asyncio.sleep(period)
            lags.append(time.perf_counter() - asked)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(3 * period)  # ticker running before the work starts
    lags.clear()
    try:
        await run(n)
    finally:
        done = True
        await tick
    return lags


def rows(size: Size = "quick") -> list[Row]:
    """Row 1 (throughput at 64/256/1024) and row 9 (loop lag with 1,000 in flight)."""
    n = {"smoke": 200, "quick": 3000, "full": 10000}[size]
    in_flight = 100 if size == "smoke" else 1000
    rounds = {"smoke": 1, "quick": 3, "full": 5}[size]
    out: list[Row] = []
    zero = ["--api", "sglang", "--zero-latency", "--max-num-seqs", "100000",
            "--max-waiting", "100000"]
    with sim_process(*zero) as (url, _):
        for conc in ((64,) if size == "smoke" else (64, 256, 1024)):
            r = asyncio.run(throughput(url, max(n, 2 * conc), conc, rounds))
            ratios = [a / b for a, b in zip(r["ctl"], r["bare"], strict=True)]
            m = statistics.median(ratios)
            tgt = conc == 256
            cpu_c, cpu_b = statistics.median(r["ctl_cpu"]), statistics.median(r["bare_cpu"])
            out.append(Row("controller", f"tasks/s, conc {conc}, zero-latency SGLang sim",
                           statistics.median(r["ctl"]), statistics.median(r["bare"]),
                           "bare aiohttp loop", m, f"ratio ≥ {RATIO_TARGET}" if tgt else "",
                           check(m, ">=", RATIO_TARGET) if tgt else None,
                           f"ratio {spread(ratios, '{:.2f}')}",
                           f"{max(n, 2 * conc):,} tasks × {rounds} interleaved rounds; client "
                           f"CPU/task {cpu_c:.0f} µs vs bare {cpu_b:.0f} µs "
                           f"(CPU ratio {cpu_b / cpu_c:.2f}×)"))
        stress = asyncio.run(_lag_pair(url, n, in_flight, rounds))
    lat = "0.05" if size == "smoke" else "0.5"
    paced = ["--api", "sglang", "--prefill-overhead-s", lat, "--prefill-per-token-s", "0",
             "--itl-s", "0", "--load-factor", "1", "--jitter-cv", "0.5",
             "--max-num-seqs", "100000", "--max-waiting", "100000"]
    n_lag = {"smoke": 200, "quick": 3000, "full": 10000}[size]
    with sim_process(*paced) as (url, _):
        steady = asyncio.run(_lag_pair(url, n_lag, in_flight, rounds))
    for label, res, n_tasks, tgt in ((f"sim {lat} s ± 50 %", steady, n_lag, True),
                                     ("zero-latency sim (saturated)", stress, n, False)):
        for key, how in (("ctl", "a loop of submit() in one step"),
                         ("ctl_batch", "rollout_batch_async()")):
            mo, mb = statistics.median(res[key]), statistics.median(res["bare"])
            out.append(Row(
                "controller", f"max event-loop lag (ms), {in_flight:,} in flight, {label}, "
                f"submitted by {how}", mo, mb, "bare aiohttp loop", mb / mo if mo else None,
                f"≤ {LAG_TARGET_MS:g} ms" if tgt else "",
                check(mo, "<=", LAG_TARGET_MS) if tgt and in_flight == 1000 else None,
                f"{spread(res[key])}; bare {spread(res['bare'])}",
                f"10 ms ticker; {n_tasks:,} tasks submitted at once, max over the run, "
                f"median of {rounds}; p99 lag {statistics.median(res[key + '_p99']):.1f} ms "
                f"vs bare {statistics.median(res['bare_p99']):.1f} ms"))
    return out


async def _lag_pair(url: str, n: int, conc: int, rounds: int) -> dict[str, list[float]]:
    """Max and p99 loop lag (ms) for the controller and the bare loop, interleaved rounds."""
    res: dict[str, list[float]] = {k: [] for k in (
        "ctl", "bare", "ctl_batch", "ctl_p99", "bare_p99", "ctl_batch_p99")}
    async with Bare(url, conc) as b, Ctl(url, conc) as c, CtlBatch(url, conc) as cb:
        for _ in range(rounds):
            for client in (b, c, cb):
                gc.collect()
                lags = await loop_lag(client.run, n)
                res[client.name].append(max(lags) * 1e3)
                res[f"{client.name}_p99"].append(pct(lags, 0.99) * 1e3)
    return res


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
