"""The servers' state during a run (``scrape_interval``): what scraping costs the client, and
what an hour of scraped rows costs to hold and to load.

Row 1: **client CPU per task, scraping at 2 Hz vs off**: the controller row's workload
(``bench_controller.py``: one ``agenerate`` per task, tracing on, concurrency 256) against
one zero-latency SGLang simulator in its own process (it serves ``/metrics`` with SGLang's
names), the same tasks through a ``RolloutController(scrape_interval=0.5)`` and a
``RolloutController(scrape_interval=None)``, interleaved rounds (on, off, off, on, …), a
fresh controller per round (so no scraper runs during the other variant's round; set-up and
warm-up not timed). Client CPU = this process's user + system time over the round, per
task; the scraper's own CPU is in it. Target: ≤ 2 % more than off (median of the paired
rounds). The note also gives the cost of one scrape measured alone (the sim's exposition
through the scraper's parser and ``Tracer.record_server_metrics``) and the share it
predicts at the run's CPU rate.

Row 2: **an hour at 2 Hz against 4 servers**: 7,200 scrapes of each of 4 servers, each the
samples the scraper keeps from the simulated vLLM server's real exposition (fetched once),
counters moving, recorded through ``Tracer.record_server_metrics`` (the path the scraper
uses) into a tracer with a file; the rows held (the buffer's bytes; the frame's bytes; the
Python heap growth under ``tracemalloc``), then saved (``close``: the JSONL log and its
Parquet compaction) and loaded back with ``load_traces`` (median of 3 loads). Targets: rows
in ≤ 50 MB, Parquet load ≤ 1 s.

    .venv/bin/python bench/bench_server_state.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import aiohttp
from _common import Row, Size, check, cpu_seconds, run_alone, sim_process, spread
from bench_controller import OneGenerate

from rollout_kit import ExecutorConfig, RolloutController
from rollout_kit.engines._scrape import SampleParser
from rollout_kit.tracing import Tracer, load_traces

__all__ = ["rows"]

INTERVAL = 0.5  # 2 Hz
CPU_TARGET = 0.02
MEMORY_TARGET_MB = 50.0
LOAD_TARGET_S = 1.0
CONC = 256


async def _round(url: str, n: int, scrape: float | None) -> tuple[float, float, int]:
    """One timed round on a fresh controller: (CPU µs per task, tasks/s, scrapes made)."""
    ctl = RolloutController(sglang=[url.removeprefix("http://")], scrape_interval=scrape,
                            executor_config=ExecutorConfig(max_concurrent_rollouts=CONC))
    wf = OneGenerate()
    async with ctl:
        warm = await ctl.rollout_batch_async(list(range(2 * CONC)), wf)
        gc.collect()
        c0, t0 = cpu_seconds(), time.perf_counter()
        for i in range(n):
            ctl.submit(i, wf)
        res = await ctl.wait_async(n)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        if not all(r.ok for r in (*warm, *res)):
            raise RuntimeError("server-state benchmark: failed tasks")
        scrapes = 0
        if ctl.scraper is not None:
            stats = ctl.scraper.stats
            scrapes = sum(s["scrapes"] for s in stats.values())
            if scrapes == 0 or any(s["stopped"] or s["malformed"] for s in stats.values()):
                raise RuntimeError(f"the scraper did not scrape: {stats}")
    return cpu / n * 1e6, n / wall, scrapes


async def _scrape_cost(url: str, reps: int) -> tuple[float, int]:
    """CPU µs of one scrape's parsing and recording, measured alone; samples kept."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    parser = SampleParser()
    tr = Tracer()
    samples = parser(text)  # the first parse learns the label sets, as a scraper's does
    c0 = time.process_time()
    for _ in range(reps):
        tr.record_server_metrics("a:1", parser(text))
    return (time.process_time() - c0) / reps * 1e6, len(samples)


def cpu_row(size: Size) -> Row:
    n = {"smoke": 1000, "quick": 8000, "full": 20000}[size]
    pairs = {"smoke": 1, "quick": 4, "full": 6}[size]
    zero = ["--api", "sglang", "--zero-latency", "--max-num-seqs", "100000",
            "--max-waiting", "100000"]
    on: list[float] = []
    off: list[float] = []
    rates: list[float] = []
    scrapes: list[int] = []
    with sim_process(*zero) as (url, _):
        for i in range(pairs):
            order = (INTERVAL, None) if i % 2 == 0 else (None, INTERVAL)
            for scrape in order:
                cpu, rate, made = asyncio.run(_round(url, n, scrape))
                (on if scrape else off).append(cpu)
                if scrape:
                    scrapes.append(made)
                rates.append(rate)
        per_scrape, kept = asyncio.run(_scrape_cost(url, 200))
    extra = [a / b - 1.0 for a, b in zip(on, off, strict=True)]
    med = statistics.median(extra)
    cpu_on, cpu_off = statistics.median(on), statistics.median(off)
    # what the lone cost predicts: scrapes per second × CPU per scrape / client CPU per second
    rate = statistics.median(rates)
    predicted = (1 / INTERVAL) * per_scrape / (cpu_off * rate)
    return Row("server state", "client CPU per task (µs), scraping at 2 Hz vs off, "
               f"conc {CONC}, zero-latency SGLang sim", cpu_on, cpu_off, "scraping off",
               cpu_off / cpu_on, f"≤ {CPU_TARGET:.0%} more CPU", check(med, "<=", CPU_TARGET),
               f"extra {spread([e * 100 for e in extra], '{:+.1f}')} %",
               f"{n:,} tasks × {pairs} pairs of interleaved rounds, a fresh controller each; "
               f"median extra {med * 100:+.2f} %; {statistics.median(scrapes)} scrapes a round "
               f"at {rate:,.0f} tasks/s; one scrape alone {per_scrape:.0f} µs CPU "
               f"({kept} samples kept) → {predicted * 100:.2f} % predicted",
               extra={"extra": extra, "per_scrape_us": per_scrape,
                      "predicted": predicted})


def _exposition() -> list[tuple[str, str, float]]:
    """The samples the scraper keeps from the simulated vLLM server's exposition."""
    async def fetch(url: str) -> str:
        async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
            return await r.text()

    with sim_process("--api", "vllm") as (url, _):
        text = asyncio.run(fetch(url))
    return SampleParser()(text)


def hour_rows(size: Size) -> list[Row]:
    seconds = {"smoke": 300, "quick": 3600, "full": 3600}[size]
    servers = 4
    scrapes = int(seconds / INTERVAL)
    samples = _exposition()
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        tr = Tracer(path=path)
        t0 = tr.epoch_ns
        step = int(INTERVAL * 1e9)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        c0 = time.perf_counter()
        for i in range(scrapes):
            # counters move (their values differ scrape to scrape), gauges too
            scrape = [(m, lab, v + i) for m, lab, v in samples]
            for s in range(servers):
                tr.record_server_metrics(f"10.0.0.{s}:8000", scrape, t0 + i * step + s)
        record_s = time.perf_counter() - c0
        heap = (tracemalloc.get_traced_memory()[0] - base) / 1e6
        tracemalloc.stop()
        buf = tr._store.server_metrics
        rows = len(buf)
        held = buf.nbytes() / 1e6
        frame_mb = tr.server_metrics_df().memory_usage(deep=True).sum() / 1e6
        c0 = time.perf_counter()
        tr.close()  # flush the JSONL, write the Parquet form
        save_s = time.perf_counter() - c0
        loads: dict[str, list[float]] = {"parquet": [], "jsonl": []}
        for _ in range(3):
            for kind, name in (("parquet", "trace.parquet"), ("jsonl", "trace.jsonl")):
                gc.collect()
                c0 = time.perf_counter()
                got = load_traces(Path(tmp) / name).server_metrics
                loads[kind].append(time.perf_counter() - c0)
                if len(got) != rows:
                    raise RuntimeError(f"{name}: {len(got)} rows loaded, {rows} written")
        sizes = {k: (Path(tmp) / f"trace.{k}").stat().st_size / 1e6 for k in loads}
    what = f"{seconds / 3600:g} h at 2 Hz, {servers} servers"
    if seconds != 3600:
        what += " (smoke: scaled down)"
    mem = max(held, heap)
    out.append(Row("server state", f"memory of the metric rows (MB), {what}", mem, None, "",
                   None, f"≤ {MEMORY_TARGET_MB:g} MB" if seconds == 3600 else "",
                   check(mem, "<=", MEMORY_TARGET_MB) if seconds == 3600 else None, "",
                   f"{rows:,} rows ({len(samples)} samples a scrape, the sim's vLLM "
                   f"exposition): buffer {held:.1f} MB, heap growth {heap:.1f} MB "
                   f"(tracemalloc), as a DataFrame {frame_mb:.1f} MB; recorded in "
                   f"{record_s:.1f} s; saved in {save_s:.1f} s: JSONL "
                   f"{sizes['jsonl']:.1f} MB, Parquet {sizes['parquet']:.1f} MB"))
    pq, js = statistics.median(loads["parquet"]), statistics.median(loads["jsonl"])
    out.append(Row("server state", f"load_traces of those rows (s), Parquet, {what}", pq,
                   js, "the JSONL log", js / pq if pq else None,
                   f"≤ {LOAD_TARGET_S:g} s" if seconds == 3600 else "",
                   check(pq, "<=", LOAD_TARGET_S) if seconds == 3600 else None,
                   f"{spread(loads['parquet'])}; JSONL {spread(loads['jsonl'])}",
                   f"median of 3; {rows:,} rows back"))
    return out


def rows(size: Size = "quick") -> list[Row]:
    """Row 1 (scraping's CPU cost) and rows 2-3 (an hour of rows: memory, load time)."""
    return [cpu_row(size), *hour_rows(size)]


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
