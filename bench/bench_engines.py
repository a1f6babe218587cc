"""Client overhead of the remote engines against the zero-latency simulator.

Prints two tables:

1. client-added latency = client-observed end-to-end latency of ``agenerate`` minus the
   server-reported ``sim_timing.e2e_s``, median and p99, at concurrency 1, 64 and 512;
2. requests/s through ``agenerate`` vs a bare aiohttp loop (one shared session, the same
   payload) to the same server, measured side by side in one run, at concurrency 64 and 256
   (target: ratio >= 0.85).

Usage::

    .venv/bin/python bench/bench_engines.py [--quick] [--flavour sglang|vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import orjson

from rollout_kit.config import EngineConfig, GenerationConfig
from rollout_kit.engines import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine
from rollout_kit.io import ModelRequest
from rollout_kit.sim import serve

PROMPT = list(range(10, 42))
GCONFIG = GenerationConfig(max_new_tokens=16, ignore_eos=True)


def _server_process(flavour: str, conn: Connection) -> None:
    """Child process: run one zero-latency simulator until told to stop."""
    async def run() -> None:
        async with serve(flavour, n=1, zero_latency=True, max_num_seqs=1024,
                         max_waiting=65536) as cluster:
            conn.send(cluster.addresses)
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)

    asyncio.run(run())


@contextmanager
def simulator(flavour: str) -> Iterator[list[str]]:
    """The simulator in its own process, so its CPU time is not charged to the client."""
    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=_server_process, args=(flavour, child),
                                           daemon=True)
    proc.start()
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        proc.join(10)


def _engine(flavour: str, addresses: list[str]) -> RemoteInfEngine:
    cls = RemoteSGLangEngine if flavour == "sglang" else RemotevLLMEngine
    return cls(addresses, config=EngineConfig())


async def _closed_loop(n_requests: int, concurrency: int, one: Any) -> list[Any]:
    """Run ``one()`` ``n_requests`` times with ``concurrency`` workers; results in order."""
    out: list[Any] = []
    it = iter(range(n_requests))

    async def worker() -> None:
        for _ in it:
            out.append(await one())

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def client_added(engine: RemoteInfEngine, concurrency: int, n: int) -> tuple[float, float]:
    request = ModelRequest(input_ids=PROMPT, gconfig=GCONFIG)

    async def one() -> float:
        r = await engine.agenerate(request)
        return r.latency - r.server_timing["e2e_s"]

    await _closed_loop(min(n, 200), concurrency, one)  # warm-up: connections, caches
    xs = await _closed_loop(n, concurrency, one)
    return statistics.median(xs), _pct(xs, 0.99)


async def throughput(engine: RemoteInfEngine, concurrency: int, n: int) -> tuple[float, float]:
    server = engine.servers[0]
    payload = engine.backend.build_request(input_ids=PROMPT, text=None, gconfig=GCONFIG,
                                           max_new_tokens=GCONFIG.max_new_tokens,
                                           stream=False, model=engine.model)
    url = f"http://{server}{engine.backend.generate_endpoint}"
    body = orjson.dumps(payload)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=75)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def bare() -> None:
            async with session.post(url, data=body,
                                    headers={"Content-Type": "application/json"}) as resp:
                resp.raise_for_status()
                orjson.loads(await resp.read())

        request = ModelRequest(input_ids=PROMPT, gconfig=GCONFIG)  # agenerate never mutates it

        async def ours() -> None:
            await engine.agenerate(request)

        rates: dict[str, list[float]] = {"bare": [], "ours": []}
        for fn in (bare, ours):  # warm-up
            await _closed_loop(min(n, 200), concurrency, fn)
        for _ in range(3):  # interleave so drift hits both alike
            for name, fn in (("bare", bare), ("ours", ours)):
                t0 = time.perf_counter()
                await _closed_loop(n, concurrency, fn)
                rates[name].append(n / (time.perf_counter() - t0))
    return statistics.median(rates["bare"]), statistics.median(rates["ours"])


async def main(quick: bool, flavour: str) -> None:
    n_lat = 300 if quick else 2000
    n_tp = 500 if quick else 3000
    with simulator(flavour) as addresses:
        async with _engine(flavour, addresses) as engine:
            print(f"flavour={flavour}  prompt={len(PROMPT)} tokens  "
                  f"output={GCONFIG.max_new_tokens} tokens  zero-latency simulator")
            print("\nclient-added latency (agenerate e2e - server e2e_s)")
            print(f"{'concurrency':>12} {'median ms':>10} {'p99 ms':>10}")
            for c in (1, 64, 512):
                med, p99 = await client_added(engine, c, max(n_lat, 2 * c))
                print(f"{c:>12} {med * 1e3:>10.3f} {p99 * 1e3:>10.3f}")
            print("\nrequests/s: agenerate vs bare aiohttp (same server, same payload)")
            print(f"{'concurrency':>12} {'bare':>10} {'agenerate':>10} {'ratio':>7}")
            for c in (64, 256):
                bare, ours = await throughput(engine, c, max(n_tp, 2 * c))
                print(f"{c:>12} {bare:>10.0f} {ours:>10.0f} {ours / bare:>7.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests (about 20 s)")
    ap.add_argument("--flavour", choices=["sglang", "vllm"], default="sglang")
    args = ap.parse_args()
    asyncio.run(main(args.quick, args.flavour))
