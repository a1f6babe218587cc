"""The pacing baseline: a bare asyncio + aiohttp open-loop sender, no rollout_kit stack.

It sends the schedule ``rollout-kit load`` sends (``Arrivals(rate, seed=0)``: the same
Poisson offsets) to a ``/v1/completions`` server, with the same body as rollout_kit's vLLM
backend (64 prompt token ids, ``max_tokens``, ``ignore_eos``, streamed with usage), and the
same kernel timer (:class:`rollout_kit.load._alarm.Alarm`) until :data:`SPIN_S` before each
deadline, then ``sleep(0)`` until it passes, then ``create_task``: the best a plain sender
does. Each request is its own asyncio task; its send lag is the instant that task starts
minus its due time, one loop turn after the decision. rollout_kit's is the instant its
workflow calls ``generate_async``, with the controller, executor, workflow, engine,
transport and tracer above the wire; it submits each task before the due time and the task
waits for it (``rollout_kit.load._runner.PRESTAGE_S``).
Events are split into lines and each ``data:`` line decoded with orjson, as a client must.

Usage: ``python bench/bare_pace.py URL MODEL RATE N OUT_LEN RESULT.json`` (prints nothing
but the first failure; the result holds ``p99_send_lag_ms``, ``median_send_lag_ms``,
``achieved_rate``, ``cpu_us_per_request``, ``failed``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp
import numpy as np
import orjson

from rollout_kit.load import Arrivals
from rollout_kit.load._alarm import Alarm

PROMPT_LEN = 64
#: the last stretch before a deadline spent yielding to the loop (a vCPU woken from idle
#: takes ~0.1 ms to run it again)
SPIN_S = 0.0002
#: the same where the alarm is the loop's own timer (whole milliseconds, rounded up)
SPIN_COARSE_S = 0.0005
WARMUP = 50


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, due: float,
               lag: list[float], failed: list[int]) -> None:
    lag.append(time.perf_counter() - due)
    try:
        async with session.post(url, data=body,
                                headers={"Content-Type": "application/json"}) as resp:
            resp.raise_for_status()
            async for line in resp.content:
                if line.startswith(b"data:"):
                    data = line[5:].strip()
                    if data != b"[DONE]":
                        orjson.loads(data)
    except (aiohttp.ClientError, OSError) as exc:
        if not failed:
            print(f"bare_pace: {type(exc).__name__}: {exc}", file=sys.stderr)
        failed.append(1)


async def main(base: str, model: str, rate: float, n: int, out_len: int) -> dict[str, float]:
    url = base.rstrip("/") + "/v1/completions"
    rng = np.random.default_rng(0)
    body = orjson.dumps({"model": model, "max_tokens": out_len, "temperature": 1.0,
                         "ignore_eos": True, "return_token_ids": True, "stream": True,
                         "stream_options": {"include_usage": True},
                         "prompt": rng.integers(10, 200, PROMPT_LEN).tolist()})
    offsets = Arrivals(rate=rate, seed=0).offsets(n)
    alarm = Alarm(asyncio.get_running_loop())
    lead = SPIN_S if alarm.precise else SPIN_COARSE_S
    lag: list[float] = []
    failed: list[int] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        now = time.perf_counter()
        await asyncio.gather(*(_one(session, url, body, now, [], failed)
                               for _ in range(WARMUP)))
        tasks = []
        cpu0 = time.process_time()
        start = time.perf_counter()
        for off in offsets.tolist():
            due = start + off
            while (wait := due - time.perf_counter()) > 0:
                if wait > lead:
                    await alarm.wait(due - lead)
                else:
                    await asyncio.sleep(0)
            tasks.append(asyncio.create_task(_one(session, url, body, due, lag, failed)))
        await asyncio.gather(*tasks)
        end = time.perf_counter()
        cpu = time.process_time() - cpu0
    alarm.close()
    ms = np.asarray(lag) * 1e3  # in send order: the last one is the last sent
    return {"p99_send_lag_ms": float(np.percentile(ms, 99)),
            "median_send_lag_ms": float(np.median(ms)),
            "achieved_rate": n / (float(offsets[-1] + ms[-1] / 1e3)),
            "duration": end - start, "cpu_us_per_request": cpu / n * 1e6,
            "failed": len(failed)}


if __name__ == "__main__":
    base_url, model_name, rate_s, n_s, out_s, result = sys.argv[1:7]
    out = asyncio.run(main(base_url, model_name, float(rate_s), int(n_s), int(out_s)))
    with open(result, "w") as fh:
        json.dump(out, fh)
