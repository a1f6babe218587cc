"""Client-added latency of the remote engines vs the official ``openai`` client and a bare
aiohttp loop (row 2).

Client-added latency = client-observed end-to-end latency of one request minus the
server-reported ``sim_timing.e2e_s`` (the time from the simulator's request parse to its
response build). It is measured for ``RemotevLLMEngine.agenerate``, for
``AsyncOpenAI().completions.create`` and for a bare ``aiohttp`` POST (one session, orjson
both ways: the floor of any Python client) sending the same body to the same simulated vLLM
server (its own process), at concurrency 1, 64 and 512, interleaved rounds. The targets are
ratios to the peers measured in the same rounds (≥ 3× better than openai's, ≤ 1.5× the bare
loop's at concurrency 64), so they hold on any machine; the milliseconds are information.

Why the simulator is *not* zero-latency here: in a closed loop against a zero-latency server
every request's latency is ``concurrency / throughput``; the difference to the server's
window is then queueing in whichever process saturates first (one core each on this
machine), not work the client adds. So each level runs against a server with a fixed
latency ``L = max(5 ms, concurrency / 250 req/s)``: the offered load stays well below what
either process can sustain, and ``e2e − e2e_s`` is the client's own cost (serialise, send,
event-loop turns, receive, parse) plus two loopback hops and the server's HTTP framing. The
client's CPU time per request (``os.times()``) is printed as the load-independent number.
With ``--throughput``, also requests/s through ``agenerate`` vs a bare aiohttp loop.

Usage: ``.venv/bin/python bench/bench_engines.py [--smoke|--quick|--full] [--throughput]``
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
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

from rollout_kit import EngineConfig, GenerationConfig, ModelRequest
from rollout_kit.engines import RemoteInfEngine, RemotevLLMEngine

__all__ = ["rows"]

PROMPT = list(range(10, 42))
GCONFIG = GenerationConfig(max_new_tokens=16, ignore_eos=True)
OPENAI_RATIO_TARGET = 3.0  # client-added latency ≥ 3× better than the openai client's
BARE_LIMIT = 1.5  # … and ≤ 1.5× a bare aiohttp loop's
OFFERED_RATE = 250.0  # req/s the paced levels offer: well below either process's capacity


def latency_for(concurrency: int) -> float:
    """Fixed server latency (s) that keeps ``concurrency`` in flight at ``OFFERED_RATE``."""
    return max(0.005, concurrency / OFFERED_RATE)


async def _closed_loop(n: int, concurrency: int, one: Callable[[], Awaitable[Any]]) -> list[Any]:
    out: list[Any] = []
    it = iter(range(n))

    async def worker() -> None:
        for _ in it:
            out.append(await one())

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


async def _poisson(n: int, rate: float, one: Callable[[], Coroutine[Any, Any, Any]],
                   seed: int = 0) -> list[Any]:
    """Open loop: ``n`` calls of ``one()`` at Poisson arrivals of ``rate``/s (absolute
    deadlines, so pacing lateness does not accumulate); results in completion order."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    t = loop.time()
    tasks: list[asyncio.Task[Any]] = []
    for _ in range(n):
        t += rng.expovariate(rate)
        delay = t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    return list(await asyncio.gather(*tasks))


async def _model_name(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models") as r:
        return str((await r.json())["data"][0]["id"])


async def _level(url: str, concurrency: int, n: int, rounds: int,
                 rate: float | None) -> dict[str, Any]:
    """Interleaved rounds of rollout_kit and openai at one concurrency: a closed loop of
    ``concurrency`` workers (``rate is None``) or Poisson arrivals at ``rate``."""
    from openai import APIError, AsyncOpenAI

    address = url.removeprefix("http://")
    engine: RemoteInfEngine = RemotevLLMEngine([address], config=EngineConfig())
    payload = engine.backend.build_request(input_ids=PROMPT, text=None, gconfig=GCONFIG,
                                           max_new_tokens=GCONFIG.max_new_tokens,
                                           stream=False, model=engine.model)
    model = await _model_name(url)
    extra = {k: v for k, v in payload.items() if k not in ("prompt", "max_tokens", "stream")}
    client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    request = ModelRequest(input_ids=PROMPT, gconfig=GCONFIG)  # agenerate never mutates it

    async def ours() -> float:
        t0 = time.perf_counter()
        r = await engine.generate_async(request)
        return time.perf_counter() - t0 - r.server_timing["e2e_s"]

    async def theirs() -> float:
        t0 = time.perf_counter()
        try:
            r = await client.completions.create(model=model, prompt=PROMPT, max_tokens=16,
                                                extra_body=extra)
        except APIError:  # e.g. its 5 s connect timeout when it falls behind: count, go on
            return math.nan
        dt = time.perf_counter() - t0
        timing = (r.model_extra or {})["sim_timing"]
        return dt - float(timing["e2e_s"])

    endpoint = url + engine.backend.generate_endpoint
    body = orjson.dumps(payload)
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=75)
    session = aiohttp.ClientSession(connector=connector)

    async def bare() -> float:  # the floor: one aiohttp POST, orjson both ways
        t0 = time.perf_counter()
        async with session.post(endpoint, data=body, headers=headers) as resp:
            resp.raise_for_status()
            data = orjson.loads(await resp.read())
        return time.perf_counter() - t0 - float(data["sim_timing"]["e2e_s"])

    clients = (("ours", ours), ("openai", theirs), ("bare", bare))
    res: dict[str, Any] = {k: [] for name, _ in clients for k in (name, f"cpu_{name}")}
    async with engine:
        for _, fn in clients:  # warm-up: connections, imports, caches
            await _closed_loop(min(n, max(concurrency, 20)), min(concurrency, 64), fn)
        gc.collect()
        gc.freeze()
        try:
            for _ in range(rounds):
                for name, fn in clients:
                    c0 = cpu_seconds()
                    res[name] += (await _closed_loop(n, concurrency, fn) if rate is None
                                  else await _poisson(n, rate, fn))
                    res[f"cpu_{name}"].append((cpu_seconds() - c0) / n * 1e6)
        finally:
            gc.unfreeze()
    await client.close()
    await session.close()
    return res


async def _throughput(url: str, concurrency: int, n: int, rounds: int
                      ) -> tuple[list[float], list[float]]:
    """req/s of ``agenerate`` and of a bare aiohttp loop (same payload), interleaved."""
    engine = RemotevLLMEngine([url.removeprefix("http://")], config=EngineConfig())
    payload = engine.backend.build_request(input_ids=PROMPT, text=None, gconfig=GCONFIG,
                                           max_new_tokens=GCONFIG.max_new_tokens,
                                           stream=False, model=engine.model)
    endpoint = url + engine.backend.generate_endpoint
    request = ModelRequest(input_ids=PROMPT, gconfig=GCONFIG)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=75)
    async with engine, aiohttp.ClientSession(connector=connector) as session:
        async def bare() -> None:
            async with session.post(endpoint, data=orjson.dumps(payload),
                                    headers={"Content-Type": "application/json"}) as resp:
                resp.raise_for_status()
                orjson.loads(await resp.read())

        async def ours() -> None:
            await engine.generate_async(request)

        for fn in (bare, ours):
            await _closed_loop(min(n, 200), concurrency, fn)
        rates: dict[str, list[float]] = {"bare": [], "ours": []}
        for _ in range(rounds):
            for name, fn in (("bare", bare), ("ours", ours)):
                t0 = time.perf_counter()
                await _closed_loop(n, concurrency, fn)
                rates[name].append(n / (time.perf_counter() - t0))
    return rates["ours"], rates["bare"]


def _latency_rows(c: int, mode: str, lat: float, n: int, rounds: int,
                  r: dict[str, Any], targeted: bool) -> list[Row]:
    ours_ms = [x * 1e3 for x in r["ours"]]
    oai_ms = [x * 1e3 for x in r["openai"] if not math.isnan(x)]
    failed = len(r["openai"]) - len(oai_ms)
    med, p99 = statistics.median(ours_ms), pct(ours_ms, 0.99)
    med_o = statistics.median(oai_ms) if oai_ms else math.nan
    p99_o = pct(oai_ms, 0.99)
    how = {"closed": f"closed loop, {c} worker(s)",
           "poisson": f"Poisson arrivals at {c / lat:.0f}/s, mean {c} in flight",
           "burst": f"{c} requests started together (synchronised batch)"}[mode]
    note = f"server latency {lat * 1e3:g} ms; {how}; {n:,} req × {rounds} round(s) per client"
    if failed:
        note += f"; openai: {failed} of {len(r['openai'])} requests failed (timeouts), excluded"
    label = f"conc {c}" + (" burst" if mode == "burst" else "")
    cpu_o, cpu_t = statistics.median(r["cpu_ours"]), statistics.median(r["cpu_openai"])
    bare_ms = [x * 1e3 for x in r["bare"]]
    med_b = statistics.median(bare_ms)
    vs_openai, vs_bare = ratio(med_o, med), ratio(med_b, med)
    return [
        Row("engines", f"client-added latency median (ms), {label}", med, med_o,
            "openai AsyncOpenAI", vs_openai,
            f"ratio ≥ {OPENAI_RATIO_TARGET:g}" if targeted else "",
            check(vs_openai, ">=", OPENAI_RATIO_TARGET) if targeted else None,
            f"p25–p75 {pct(ours_ms, .25):.3g}–{pct(ours_ms, .75):.3g}", note),
        Row("engines", f"client-added latency median (ms), {label}, vs bare aiohttp", med,
            med_b, "bare aiohttp POST", vs_bare,
            f"ratio ≥ {1 / BARE_LIMIT:.2f} (≤ {BARE_LIMIT:g}× bare)" if targeted else "",
            check(vs_bare, ">=", 1 / BARE_LIMIT) if targeted else None,
            f"bare p25–p75 {pct(bare_ms, .25):.3g}–{pct(bare_ms, .75):.3g}",
            f"same rounds; bare client CPU {statistics.median(r['cpu_bare']):.0f} µs/request"),
        Row("engines", f"client-added latency p99 (ms), {label}", p99, p99_o,
            "openai AsyncOpenAI", ratio(p99_o, p99), "", None,
            f"max {max(ours_ms):.3g}; openai max {max(oai_ms, default=math.nan):.3g}", ""),
        Row("engines", f"client CPU µs per request, {label}", cpu_o, cpu_t,
            "openai AsyncOpenAI", ratio(cpu_t, cpu_o), "", None,
            f"{spread(r['cpu_ours'])}; openai {spread(r['cpu_openai'])}",
            "process CPU time / requests (load-independent client cost)"),
    ]


def rows(size: Size = "quick", throughput: bool = False) -> list[Row]:
    """Row 2: client-added latency (median, p99) and client CPU per request, ours vs openai.

    Concurrency 1: closed loop. 64 and 512: Poisson arrivals with ``concurrency`` in flight
    on average (Little's law: rate × server latency), the steady state of a rollout loop;
    plus a synchronised burst of ``concurrency`` requests (one batch submitted at once).
    """
    floor, per_c = {"smoke": (10, 1), "quick": (300, 3), "full": (1000, 4)}[size]

    def n_of(c: int) -> int:
        return max(floor, per_c * c)

    rounds = {"smoke": 1, "quick": 3, "full": 5}[size]
    plan: list[tuple[int, str]] = [(1, "closed"), (64, "poisson"), (512, "poisson"),
                                   (64, "burst"), (512, "burst")]
    if size == "smoke":  # seconds, not minutes: the code paths, not the numbers
        plan = [(1, "closed"), (8, "poisson")]
    out: list[Row] = []
    for c, mode in plan:
        lat = latency_for(c)
        args = ["--api", "vllm", "--prefill-overhead-s", str(lat), "--prefill-per-token-s", "0",
                "--itl-s", "0", "--load-factor", "1", "--jitter-cv", "0",
                "--max-num-seqs", "4096", "--max-waiting", "65536"]
        n = c if mode == "burst" else n_of(c)
        rate = c / lat if mode == "poisson" else None
        with sim_process(*args) as (url, _):
            r = asyncio.run(_level(url, c, n, rounds, rate))
        out += _latency_rows(c, mode, lat, n, rounds, r, targeted=(c, mode) == (64, "poisson"))
    if throughput:
        n = {"smoke": 300, "quick": 3000, "full": 10000}[size]
        with sim_process("--api", "vllm", "--zero-latency", "--max-num-seqs", "4096") as (
                url, _):
            ours_r, bare_r = asyncio.run(_throughput(url, 256, n, max(rounds, 2)))
        ratios = [a / b for a, b in zip(ours_r, bare_r, strict=True)]
        out.append(Row("engines", "agenerate req/s vs bare aiohttp, conc 256, zero-latency",
                       statistics.median(ours_r), statistics.median(bare_r), "bare aiohttp",
                       statistics.median(ratios), "", None, f"ratio {spread(ratios)}",
                       f"{n:,} req per round"))
    return out


def main(argv: list[str] | None = None) -> int:
    size, args = size_from_args(argv, __doc__ or "", lambda ap: ap.add_argument(
        "--throughput", action="store_true", help="also agenerate vs bare aiohttp req/s"))
    print_rows(rows(size, throughput=args.throughput))
    return 0


if __name__ == "__main__":
    sys.exit(main())
