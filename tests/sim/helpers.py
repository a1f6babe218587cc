"""Small HTTP helpers for the simulator tests."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson


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
