"""Find a real server generating, by a condition the server guarantees, not by a sleep.

A fixed sleep guesses: on a busy machine the batch may not have started yet, or may be over.
The tests that cut generations mid-way (a kill, an abort-mode pause, the RL loop's weight
update) freeze the server first, so the generations they find running stay there however
late a loaded client acts (:func:`freeze_running_generations`; vLLM in dev mode and SGLang
pause in place, :class:`Freezer`). SGLang decodes 900 tokens in minutes here, so its kill
test only waits for its decode batch (:func:`wait_sglang_decoding`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from rollout_kit import GenerationConfig, RolloutController, SingleTurnWorkflow
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


@dataclass(frozen=True)
class Freezer:
    """How to hold one kind of real server's generations where they are (``freeze``), let
    it generate again (``thaw``), and count the generations it runs (``running``). The
    requests are ``(path, JSON body)``; ``""`` is no body."""

    freeze: tuple[str, str]
    thaw: tuple[str, str]
    running: Callable[[str], Awaitable[float]]
    before_abort: tuple[str, str] | None = None  # what an abort-mode pause needs first


async def _vllm_running(url: str) -> float:
    return await server_metric(url, "vllm:num_requests_running")


async def _sglang_decoding(url: str) -> float:
    """How many requests the real SGLang server at ``url`` decodes now: its scheduler's own
    answer to ``GET /v1/loads`` (the ``sglang:num_running_reqs`` gauge of ``/metrics`` is set
    only every 40 decode steps, so it lags a short generation and outlives it)."""
    async with aiohttp.ClientSession() as http, \
            http.get(f"{url}/v1/loads", params={"include": "core"}) as resp:
        resp.raise_for_status()
        return float(sum(load["num_running_reqs"] for load in (await resp.json())["loads"]))


#: vLLM in dev mode: ``/pause?mode=keep`` holds every request where it is
VLLM = Freezer(freeze=("/pause?mode=keep", ""), thaw=("/resume", ""), running=_vllm_running)
#: SGLang (0.5.2x): ``mode="in_place"`` holds the scheduler's requests with their KV cache,
#: and new requests in its tokenizer. An abort-mode ``/pause_generation`` ends requests held
#: in place only at their next step, which never comes: it waits forever, holding the lock
#: ``/continue_generation`` needs (seen on 0.5.23). ``mode="retract"`` first moves them back
#: to the queue, where an abort ends them at once with the tokens they streamed (none when
#: not streamed).
SGLANG = Freezer(freeze=("/pause_generation", '{"mode": "in_place"}'),
                 thaw=("/continue_generation", "{}"), running=_sglang_decoding,
                 before_abort=("/pause_generation", '{"mode": "retract"}'))


async def freeze_running_generations(url: str, ended: Callable[[], bool], *,
                                     at_least: int = 1, server: Freezer = VLLM) -> float:
    """Freeze the real server at ``url`` (by default vLLM in dev mode) at a moment it runs
    ``at_least`` generations, and return how many it runs; the caller ends them (a kill, an
    abort-mode pause) or lets them go on (``server.thaw``). ``0.0``, the server thawed, when
    ``ended()`` (the caller's test of its requests being over) turned true before a look
    found them: the caller sends another wave, or says the machine starved it.

    ``server.freeze`` holds every request where it is, so the running count read while
    frozen stays true until the caller acts, however late a loaded machine lets it act.
    While too few run (the requests still queued), the server is let run in the shortest
    steps it allows (:func:`_thaw_and_freeze`): a thaw and a freeze that the client sends
    apart let it run as long as the client sleeps, seen on a loaded machine to be longer
    than a whole batch takes. Freeze the server before the requests go out, and none runs
    ahead of the first look.
    """
    await freeze_server(url, server)
    try:
        while (running := await server.running(url)) < at_least and not ended():
            await _thaw_and_freeze(url, server)
    except BaseException:
        await thaw_server(url, server)  # the server is shared: never leave it frozen
        raise
    if running >= at_least:
        return running
    await thaw_server(url, server)
    return 0.0


async def _thaw_and_freeze(url: str, server: Freezer) -> None:
    """Let the frozen server at ``url`` generate for as short a while as the server itself
    allows: ``server.thaw`` and ``server.freeze`` written in one go on one connection, which
    uvicorn answers in order. The server runs from its handling of the first to its
    handling of the second, however late this client wakes up next (aiohttp sends one
    request at a time, so this writes HTTP/1.1 by hand)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    (thaw, thaw_body), (freeze, freeze_body) = server.thaw, server.freeze
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write((_request(host, thaw, thaw_body)
                      + _request(host, freeze, freeze_body, "Connection: close\r\n")).encode())
        await writer.drain()
        answer = (await reader.read()).decode(errors="replace")  # to the server's close
    finally:
        writer.close()
    assert re.findall(r"HTTP/1\.1 (\d{3}) ", answer) == ["200", "200"], answer


def _request(host: str, path: str, body: str, headers: str = "") -> str:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n{body}")


async def freeze_server(url: str, server: Freezer = VLLM) -> None:
    """Freeze the real server at ``url`` (``server.freeze``): no request takes another step,
    and requests sent from now on wait there, until :func:`thaw_server`."""
    await _post(url, *server.freeze)


async def thaw_server(url: str, server: Freezer = VLLM) -> None:
    """Let the real server at ``url`` generate again (``server.thaw``; a no-op on a running
    server)."""
    await _post(url, *server.thaw)


async def _post(url: str, path: str, body: str = "") -> None:
    # a session, so a connection, per request: a pooled one idle past the server's keep-alive
    # (5 s, which one look can take on a loaded machine) may be closed as a request goes out
    headers = {"Content-Type": "application/json"} if body else None
    async with aiohttp.ClientSession(base_url=url) as http, \
            http.post(path, data=body.encode(), headers=headers) as resp:
        assert resp.status == 200, (path, resp.status, await resp.text())


async def wait_sglang_decoding(url: str, ended: Callable[[], bool]) -> float:
    """Poll the real SGLang server at ``url`` until it decodes a request, and return how many
    it decodes; ``0.0`` when ``ended()`` (the caller's test of its tasks being over) turned true
    first."""
    while not ended():
        if running := await _sglang_decoding(url):
            return running
        await asyncio.sleep(0.02)  # poll period: each look is a round trip to the scheduler
    return 0.0


async def _rl_admissions(ctl: RolloutController, config: RLConfig, step: int) -> None:
    """Wait until the RL loop's feeder has submitted every rollout AReaL's formula admits
    while ``step`` trains (``(max_staleness + version + 1) * batch_size``, capped by what the
    steps need). Looking earlier races the feeder, a task of its own: on a busy machine the
    next rollouts may not be submitted yet when the step trains."""
    admitted = min((config.max_staleness + step + 1) * config.batch_size,
                   config.steps * config.batch_size)
    await until(lambda: ctl.stats()["submitted"] >= admitted, "the RL loop's admissions",
                timeout=60)


def _unfinished(ctl: RolloutController) -> int:
    """The controller's submitted tasks that have not ended (queued or running)."""
    stats = ctl.stats()
    return int(stats["submitted"]) - sum(int(stats[key]) for key in S.TERMINAL_STATUSES)


#: the version at which the RL loop's rollouts freeze the server (see :class:`FreezingWorkflow`)
FREEZE_AT = 1


class FreezingWorkflow(SingleTurnWorkflow):
    """An RL loop's rollouts; those started at version :data:`FREEZE_AT` (admitted as that
    step begins) freeze the server before their request goes out, so they wait there
    unstarted until the step's training lets the server run in its shortest steps
    (:func:`freeze_for_update`). Frozen any later, a loaded machine lets the server finish
    them first (seen: 900 tokens before the freeze came)."""

    def __init__(self, reward_fn: Callable[..., float], gconfig: GenerationConfig, url: str,
                 server: Freezer = VLLM) -> None:
        super().__init__(reward_fn, gconfig)
        self.url, self.server = url, server

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        if engine.get_version() == FREEZE_AT:
            await freeze_server(self.url, self.server)
        return await super().arun_episode(engine, data)


async def freeze_for_update(ctl: RolloutController, config: RLConfig, step: int, url: str,
                            server: Freezer = VLLM) -> float:
    """The training of ``step`` in an RL loop that runs :class:`FreezingWorkflow`: at step
    :data:`FREEZE_AT`, once the loop has admitted the next rollouts, freeze the server at
    ``url`` with some of them running and return how many, so the weight update that
    follows cuts them mid-generation (its abort-mode pause) however late a loaded machine
    lets it come; ``0.0`` at other steps, or when they ended before a look found them. Only
    one step freezes: a cut rollout's continuation would wait on a server frozen by the
    rollouts the next step admits, and hold back the batch that step needs."""
    await _rl_admissions(ctl, config, step)
    if step != FREEZE_AT:
        return 0.0
    running = await freeze_running_generations(url, lambda: not _unfinished(ctl), server=server)
    if running and server.before_abort is not None:
        await _post(url, *server.before_abort)
    return running
