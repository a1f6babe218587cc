"""Benchmark the built-in simulator against a bare aiohttp handler.

1. Requests/s the simulator sustains in zero-latency mode versus a bare aiohttp handler that
   returns a fixed JSON body, same client (one shared aiohttp session, concurrency 64), each
   server in its own subprocess, interleaved rounds, medians. Because one Python client can
   be slower than the server it drives, the server's own CPU time per request (from
   ``/proc/PID/stat``) is reported too: ``1 / cpu_per_request`` is the capacity of one core,
   independent of how fast the client is.
2. ``--curve``: the latency curve under the default latency model (streamed requests at
   concurrency 1/8/32/64/128; client TTFT/ITL next to the server's own ``sim_timing``).

Usage: ``python bench/bench_sim.py [--smoke|--quick|--full] [--curve]``
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from contextlib import ExitStack
from typing import Any

import aiohttp
import orjson
from _common import (
    Row,
    Size,
    check,
    cpu_seconds,
    pct,
    print_rows,
    ratio,
    sim_process,
    size_from_args,
    spread,
)

__all__ = ["rows"]

TARGET = 0.8

BARE_SERVER = r"""
import sys
from aiohttp import web
import orjson
BODY = orjson.dumps({"id": "cmpl-0", "object": "text_completion", "created": 0,
    "model": "sim-model", "choices": [{"index": 0, "text": "abcdefghijklmnop",
    "logprobs": None, "finish_reason": "length", "stop_reason": None, "token_ids": None,
    "prompt_logprobs": None, "prompt_token_ids": None}], "service_tier": None,
    "system_fingerprint": None, "usage": {"prompt_tokens": 5, "total_tokens": 21,
    "completion_tokens": 16, "prompt_tokens_details": None}, "kv_transfer_params": None})
async def handler(request):
    await request.read()
    return web.Response(body=BODY, content_type="application/json")
app = web.Application()
app.router.add_post("/v1/completions", handler)
app.router.add_post("/generate", handler)
app.router.add_get("/health", lambda r: web.Response())
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    import asyncio
    await asyncio.Event().wait()
import asyncio
asyncio.run(main())
"""

async def _throughput(url: str, path: str, body: dict[str, object], n: int,
                      concurrency: int, warm: int) -> float:
    data = orjson.dumps(body)
    headers = {"Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        async def one() -> None:
            async with session.post(url + path, data=data, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"status {r.status}")

        for _ in range(warm):  # warm-up (connections, caches)
            await one()
        remaining = n
        t0 = time.perf_counter()

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await one()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0)


def rows(size: Size = "quick") -> list[Row]:
    """Row 7: simulator req/s and server CPU per request vs a bare aiohttp handler."""
    n = {"smoke": 800, "quick": 4000, "full": 10000}[size]
    rounds = {"smoke": 2, "quick": 5, "full": 7}[size]
    conc = 64
    targets: list[tuple[str, list[str], str, dict[str, Any]]] = [
        ("bare", [sys.executable, "-c", BARE_SERVER], "/v1/completions",
         {"prompt": "hello", "max_tokens": 16}),
        ("vllm", ["--api", "vllm", "--zero-latency", "--max-num-seqs", "4096"],
         "/v1/completions", {"prompt": "hello", "max_tokens": 16, "ignore_eos": True}),
        ("sglang", ["--api", "sglang", "--zero-latency", "--max-num-seqs", "4096"], "/generate",
         {"text": "hello", "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}),
    ]
    rate: dict[str, list[float]] = {name: [] for name, *_ in targets}
    cpu: dict[str, list[float]] = {name: [] for name, *_ in targets}
    with ExitStack() as stack:
        servers = [stack.enter_context(
            sim_process(cmd=cmd) if name == "bare" else sim_process(*cmd))
            for name, cmd, _, _ in targets]
        for _ in range(rounds):
            for (name, _, path, body), (url, pid) in zip(targets, servers, strict=True):
                c0 = cpu_seconds(pid)
                rate[name].append(asyncio.run(_throughput(url, path, body, n, conc,
                                                          warm=min(200, n // 4))))
                cpu[name].append((cpu_seconds(pid) - c0) / (n + min(200, n // 4)) * 1e6)
    out: list[Row] = []
    bare_rate = statistics.median(rate["bare"])
    bare_cpu = statistics.median(cpu["bare"])
    for name in ("vllm", "sglang"):
        ratios = [a / b for a, b in zip(rate[name], rate["bare"], strict=True)]
        r = statistics.median(ratios)
        m = statistics.median(rate[name])
        out.append(Row("sim", f"simulator ({name}, zero-latency) req/s, 1 client conc {conc}",
                       m, bare_rate, "bare aiohttp handler", r, f"ratio ≥ {TARGET}",
                       check(r, ">=", TARGET),
                       f"ratio {spread(ratios, '{:.2f}')}",
                       f"{n:,} req × {rounds} interleaved rounds; closed loop"))
        mc = statistics.median(cpu[name])
        cr = ratio(bare_cpu, mc)
        out.append(Row("sim", f"simulator ({name}) server CPU µs per request",
                       mc, bare_cpu, "bare aiohttp handler", cr,
                       f"ratio ≥ {TARGET}", check(cr, ">=", TARGET),
                       f"{spread(cpu[name])}; bare {spread(cpu['bare'])}",
                       f"capacity of one core: {1e6 / max(mc, 1e-9):,.0f} req/s vs "
                       f"{1e6 / max(bare_cpu, 1e-9):,.0f} (independent of the client's speed; "
                       "/proc CPU ticks of 10 ms)"))
    return out


async def _latency_level(url: str, concurrency: int, n: int,
                         max_tokens: int) -> dict[str, float]:
    body = orjson.dumps({"prompt": "x" * 200, "max_tokens": max_tokens, "ignore_eos": True,
                         "stream": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    ttft: list[float] = []
    itl: list[float] = []
    srv_ttft: list[float] = []
    queue: list[float] = []
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                t0 = time.perf_counter()
                last = None
                async with session.post(url + "/v1/completions", data=body,
                                        headers=headers) as r:
                    async for line in r.content:
                        if not line.startswith(b"data: {"):
                            continue
                        now = time.perf_counter()
                        obj = orjson.loads(line[6:])
                        if obj["choices"]:
                            if last is None:
                                ttft.append(now - t0)
                            else:
                                itl.append(now - last)
                            last = now
                        elif "sim_timing" in obj:
                            srv_ttft.append(obj["sim_timing"]["first_token_s"])
                            queue.append(obj["sim_timing"]["queue_s"])

        await asyncio.gather(*(one() for _ in range(n)))
    return {"ttft_p50": pct(ttft, 0.5), "ttft_p99": pct(ttft, 0.99),
            "itl_p50": pct(itl, 0.5), "itl_p99": pct(itl, 0.99),
            "srv_ttft_p50": pct(srv_ttft, 0.5), "queue_p50": pct(queue, 0.5)}


def curve(quick: bool) -> None:
    """Print the latency curve under the default latency model."""
    levels = [1, 8, 32, 64, 128]
    max_tokens = 16 if quick else 32
    print(f"\n# latency curve, default model, 200-token prompts, {max_tokens} output tokens, "
          "streamed")
    print(f"{'conc':>5}{'n':>6}{'TTFT p50':>10}{'TTFT p99':>10}{'ITL p50':>9}{'ITL p99':>9}"
          f"{'srv TTFT p50':>14}{'srv queue p50':>15}   (ms)")
    with sim_process("--api", "vllm", "--max-num-seqs", "64") as (url, _):
        for c in levels:
            count = max(c, 4) if quick else max(2 * c, 8)
            r = asyncio.run(_latency_level(url, c, count, max_tokens))
            print(f"{c:>5}{count:>6}{r['ttft_p50'] * 1e3:>10.1f}{r['ttft_p99'] * 1e3:>10.1f}"
                  f"{r['itl_p50'] * 1e3:>9.1f}{r['itl_p99'] * 1e3:>9.1f}"
                  f"{r['srv_ttft_p50'] * 1e3:>14.1f}{r['queue_p50'] * 1e3:>15.1f}")


def main(argv: list[str] | None = None) -> int:
    size, args = size_from_args(argv, __doc__ or "", lambda ap: ap.add_argument(
        "--curve", action="store_true", help="also print the latency curve"))
    print_rows(rows(size))
    if args.curve:
        curve(size != "full")
    return 0


if __name__ == "__main__":
    sys.exit(main())
