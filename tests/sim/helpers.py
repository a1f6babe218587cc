"""Small HTTP helpers for the simulator tests."""

from __future__ import annotations

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
