"""Find a real server generating, by a condition the server guarantees, not by a sleep.

A fixed sleep guesses: on a busy machine the batch may not have started yet, or may be over.
The reliability suite's kill test waits until the server runs generations (vLLM: frozen
there by a dev-mode pause; SGLang: its scheduler's decode batch), then kills it; the RL
loop's real-SGLang test waits the same way before its update cuts them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from rollout_kit import RolloutController
from rollout_kit.rl import RLConfig
from rollout_kit.tracing import schema as S
from tests.sim.helpers import until


async def server_metric(url: str, name: str) -> float:
    """The samples named ``name`` in the ``/metrics`` of the server at ``url``, summed."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
        resp.raise_for_status()
        text = await resp.text()
    values = [s.value for family in text_string_to_metric_families(text)
              for s in family.samples if s.name == name]
    assert values, f"{name} not in /metrics"
    return sum(values)


async def freeze_running_generations(url: str, ended: Callable[[], bool], *,
                                     at_least: int = 1) -> float:
    """Freeze the real vLLM server at ``url`` at a moment it runs ``at_least`` generations,
    and return how many it runs; the caller ends them (a kill, ``/pause?mode=abort``) or
    resumes them (``POST /resume``). ``0.0``, the server resumed, when ``ended()`` (the
    caller's test of its requests being over) turned true before a look found them: the
    caller sends another wave, or says the machine starved it.

    ``POST /pause?mode=keep`` (vLLM dev mode) holds every request where it is, so the running
    count read from ``/metrics`` while paused stays true until the caller acts, however late a
    loaded machine lets it act. While too few run (the requests still queued), the server
    is let run in the shortest steps it allows (:func:`_resume_and_freeze`): a resume and a
    pause that the client sends apart let it run as long as the client sleeps, seen on a
    loaded machine to be longer than a whole batch takes. Freeze the server
    (:func:`pause_keep`) before the requests go out, and none runs ahead of the first look.
    """
    await pause_keep(url)
    try:
        while (running := await server_metric(url, "vllm:num_requests_running")) < at_least \
                and not ended():
            await _resume_and_freeze(url)
    except BaseException:
        await resume(url)  # the server is shared: never leave it frozen
        raise
    if running >= at_least:
        return running
    await resume(url)
    return 0.0


async def _resume_and_freeze(url: str) -> None:
    """Let the frozen vLLM server at ``url`` run for as short a while as the server itself
    allows: ``POST /resume`` and ``POST /pause?mode=keep`` written in one go on one
    connection, which uvicorn answers in order. The server runs from its handling of the
    first to its handling of the second, however late this client wakes up next (aiohttp
    sends one request at a time, so this writes HTTP/1.1 by hand; two bodiless requests)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"POST /resume HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"
                     f"POST /pause?mode=keep HTTP/1.1\r\nHost: {host}\r\n"
                     "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        answer = (await reader.read()).decode(errors="replace")  # to the server's close
    finally:
        writer.close()
    assert re.findall(r"HTTP/1\.1 (\d{3}) ", answer) == ["200", "200"], answer


async def pause_keep(url: str) -> None:
    """Freeze the real vLLM server at ``url`` (dev-mode ``/pause?mode=keep``): no request
    takes another step, and requests sent from now on queue there, until :func:`resume`."""
    await _post(url, "/pause", mode="keep")


async def resume(url: str) -> None:
    """``POST /resume`` to the real vLLM server at ``url`` (a no-op on a running server)."""
    await _post(url, "/resume")


async def _post(url: str, path: str, **params: str) -> None:
    # a session, so a connection, per request: a pooled one idle past the server's keep-alive
    # (5 s, which one look can take on a loaded machine) may be closed as a request goes out
    async with aiohttp.ClientSession(base_url=url) as http, \
            http.post(path, params=params) as resp:
        assert resp.status == 200, (path, resp.status, await resp.text())


async def wait_sglang_decoding(url: str, ended: Callable[[], bool]) -> int:
    """Poll the real SGLang server at ``url`` until it decodes a request, and return how many
    it decodes; ``0`` when ``ended()`` (the caller's test of its tasks being over) turned true
    first."""
    while not ended():
        if running := await _sglang_decoding(url):
            return running
        await asyncio.sleep(0.02)  # poll period: each look is a round trip to the scheduler
    return 0


async def _sglang_decoding(url: str) -> int:
    """How many requests the real SGLang server at ``url`` decodes now: its scheduler's own
    answer to ``GET /v1/loads`` (the ``sglang:num_running_reqs`` gauge of ``/metrics`` is set
    only every 40 decode steps, so it lags a short generation and outlives it)."""
    async with aiohttp.ClientSession() as http, \
            http.get(f"{url}/v1/loads", params={"include": "core"}) as resp:
        resp.raise_for_status()
        return sum(int(load["num_running_reqs"]) for load in (await resp.json())["loads"])


async def rl_admissions(ctl: RolloutController, config: RLConfig, step: int) -> None:
    """Wait until the RL loop's feeder has submitted every rollout AReaL's formula admits
    while ``step`` trains (``(max_staleness + version + 1) * batch_size``, capped by what the
    steps need). Looking earlier races the feeder, a task of its own: on a busy machine the
    next rollouts may not be submitted yet when the step trains."""
    admitted = min((config.max_staleness + step + 1) * config.batch_size,
                   config.steps * config.batch_size)
    await until(lambda: ctl.stats()["submitted"] >= admitted, "the RL loop's admissions",
                timeout=60)


def unfinished(ctl: RolloutController) -> int:
    """The controller's submitted tasks that have not ended (queued or running)."""
    stats = ctl.stats()
    return int(stats["submitted"]) - sum(int(stats[key]) for key in S.TERMINAL_STATUSES)
