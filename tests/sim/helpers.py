"""Small HTTP helpers for the simulator tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from rollout_kit.sim import SimServer
from rollout_kit.sim._state import SimSequence


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with session.post(url, json=body) as r:
        raw = await r.read()
        try:
            return r.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return r.status, raw.decode()


async def sse(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, list[Any]]:
    """POST and parse an SSE stream: JSON events, then the literal "[DONE]" if sent."""
    events: list[Any] = []
    async with session.post(url, json=body) as r:
        raw = (await r.read()).decode()
        status = r.status
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        events.append("[DONE]" if data == "[DONE]" else orjson.loads(data))
    return status, events


async def wait_state(session: aiohttp.ClientSession, url: str, timeout: float = 10.0,
                     **want: int) -> dict[str, Any]:
    """Poll ``/sim/state`` until every ``want`` field has its value (no fixed sleeps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        async with session.get(url + "/sim/state") as r:
            state: dict[str, Any] = await r.json()
        if all(state.get(k) == v for k, v in want.items()):
            return state
        if loop.time() > deadline:
            raise AssertionError(f"/sim/state never reached {want}: {state}")
        await asyncio.sleep(0.005)


#: Settings for a simulator whose requests last seconds (20 ms per token: 400 tokens take
#: 8 s). A test that must act on a request while it runs waits, by condition, until it has
#: started (``first_tokens``), and then has the rest of its run to act; the tests end it
#: with an abort, so a long run costs no time when the code works.
SLOW = {"time_scale": 1.0, "itl_s": 0.02}


async def until(pred: Callable[[], object], what: str, timeout: float = 30.0, *,
                every: float = 0.002) -> None:
    """Poll an in-process condition (``serve`` runs the servers on the test's own loop)
    every ``every`` seconds (longer for a condition that builds frames)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"never saw: {what}")
        await asyncio.sleep(every)


def live(server: SimServer, prefix: str = "") -> list[SimSequence]:
    """The server's live sequences whose request id starts with ``prefix``."""
    return [q for q in server.engine.live if q.rid.startswith(prefix)]


async def first_tokens(server: SimServer, prefix: str = "", count: int = 1,
                       tokens: int = 1) -> list[SimSequence]:
    """Wait until ``count`` sequences (id prefix ``prefix``) are running and each has
    released at least ``tokens`` tokens; returns them."""
    def ready() -> list[SimSequence]:
        return [q for q in live(server, prefix) if q.state == "running" and q.n_done >= tokens]

    await until(lambda: len(ready()) >= count,
                f"{count} running sequence(s) {prefix!r}* with >= {tokens} token(s)")
    return ready()


class GateSpy:
    """Counts the requests waiting in a server's pause gate (``SimEngine.gate``).

    A pass-through wrapper on the engine instance: ``held`` is how many requests are inside
    the gate right now, so a test can wait until a request is really held by a pause.
    """

    def __init__(self, server: SimServer) -> None:
        self.held = 0
        engine = server.engine
        inner = engine.gate

        async def gate(*, may_reject: bool) -> bool:
            self.held += 1
            try:
                return await inner(may_reject=may_reject)
            finally:
                self.held -= 1

        engine.gate = gate  # type: ignore[method-assign]

    async def wait_held(self, n: int = 1) -> None:
        await until(lambda: self.held >= n, f"{n} request(s) held by the pause")
