"""Benchmark the built-in simulator.

1. Requests/s the simulator sustains in zero-latency mode versus a bare aiohttp handler that
   returns a fixed JSON body, same client (one shared aiohttp session, concurrency 64), both
   measured in this run, each server in its own subprocess (target: sim ≥ 0.8× bare).
2. The latency curve under the default latency model: streamed requests at concurrency
   1/8/32/64/128, TTFT and ITL p50/p99 measured by the client, next to the server's own
   ``sim_timing`` (so client-added latency is visible).

Usage: ``python bench/bench_sim.py [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import aiohttp
import orjson

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


@contextmanager
def _server(cmd: list[str]) -> Iterator[str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"server did not start: {cmd}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _sim_cmd(api: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rollout_kit", "sim", "--api", api, *extra]


async def _throughput(url: str, path: str, body: dict[str, object], n: int,
                      concurrency: int) -> float:
    data = orjson.dumps(body)
    headers = {"Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        async def one() -> None:
            async with session.post(url + path, data=data, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"status {r.status}")

        for _ in range(200):  # warm-up (connections, caches)
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


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


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
    return {"ttft_p50": _pct(ttft, 0.5), "ttft_p99": _pct(ttft, 0.99),
            "itl_p50": _pct(itl, 0.5), "itl_p99": _pct(itl, 0.99),
            "srv_ttft_p50": _pct(srv_ttft, 0.5), "queue_p50": _pct(queue, 0.5)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    args = parser.parse_args()
    n = 2000 if args.quick else 10000
    conc = 64

    rounds = 3 if args.quick else 5
    print(f"# 1. zero-latency throughput: {n} requests per round, concurrency {conc}, one "
          f"shared session; {rounds} interleaved rounds, median req/s")
    targets = [
        ("bare aiohttp (fixed JSON)", [sys.executable, "-c", BARE_SERVER], "/v1/completions",
         {"prompt": "hello", "max_tokens": 16}),
        ("sim vllm zero-latency", _sim_cmd("vllm", "--zero-latency"), "/v1/completions",
         {"prompt": "hello", "max_tokens": 16, "ignore_eos": True}),
        ("sim sglang zero-latency", _sim_cmd("sglang", "--zero-latency"), "/generate",
         {"text": "hello", "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}),
    ]
    results: dict[str, list[float]] = {name: [] for name, *_ in targets}
    with ExitStack() as stack:
        urls = [stack.enter_context(_server(cmd)) for _, cmd, _, _ in targets]
        for _ in range(rounds):
            for (name, _, path, body), url in zip(targets, urls, strict=True):
                results[name].append(asyncio.run(_throughput(url, path, body, n, conc)))
    bare = statistics.median(results[targets[0][0]])
    print(f"{'server':<28}{'median req/s':>13}{'min':>8}{'max':>8}{'× bare':>8}")
    for name, vals in results.items():
        med = statistics.median(vals)
        print(f"{name:<28}{med:>13.0f}{min(vals):>8.0f}{max(vals):>8.0f}{med / bare:>8.2f}")

    levels = [1, 8, 32, 64, 128]
    max_tokens = 16 if args.quick else 32
    print(f"\n# 2. latency curve, default model (prefill 30 ms + 0.2 ms/token, ITL 12 ms, "
          f"load factor 2, max_num_seqs 64), 200-token prompts, {max_tokens} output tokens, "
          "streamed")
    print(f"{'conc':>5}{'n':>6}{'TTFT p50':>10}{'TTFT p99':>10}{'ITL p50':>9}{'ITL p99':>9}"
          f"{'srv TTFT p50':>14}{'srv queue p50':>15}   (ms)")
    with _server(_sim_cmd("vllm", "--max-num-seqs", "64")) as url:
        for c in levels:
            count = max(2 * c, 8) if not args.quick else max(c, 4)
            r = asyncio.run(_latency_level(url, c, count, max_tokens))
            print(f"{c:>5}{count:>6}{r['ttft_p50'] * 1e3:>10.1f}{r['ttft_p99'] * 1e3:>10.1f}"
                  f"{r['itl_p50'] * 1e3:>9.1f}{r['itl_p99'] * 1e3:>9.1f}"
                  f"{r['srv_ttft_p50'] * 1e3:>14.1f}{r['queue_p50'] * 1e3:>15.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
