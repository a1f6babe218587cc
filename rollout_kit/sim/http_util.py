"""Small HTTP helpers shared by both flavours: JSON bodies, SSE streams, fault effects."""

from __future__ import annotations

import socket
import struct
from typing import Any

import orjson
from aiohttp import web

from .faults import FaultPlan

__all__ = [
    "CTX_KEY",
    "SSE_DONE",
    "BadBody",
    "SSEWriter",
    "json_response",
    "read_json",
    "reset_connection",
    "retry_after_headers",
]

SSE_DONE = b"data: [DONE]\n\n"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
CTX_KEY: web.AppKey[Any] = web.AppKey("rollout_kit_sim_ctx", object)


class BadBody(Exception):
    """The request body is not valid JSON (message says why)."""


def json_response(obj: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response serialised with orjson."""
    return web.Response(body=orjson.dumps(obj), status=status,
                        content_type="application/json", headers=headers)


async def read_json(request: web.Request) -> Any:
    """The parsed JSON body.

    Raises:
        BadBody: empty or invalid JSON.
    """
    raw = await request.read()
    if not raw:
        raise BadBody("Request body is empty; expected a JSON object.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"JSON decode error: {exc}") from None


def retry_after_headers(status: int, plan: FaultPlan) -> dict[str, str] | None:
    """``Retry-After`` for 429/503 fault answers (when the plan sets one)."""
    if status in (429, 503) and plan.retry_after_s is not None:
        ra = plan.retry_after_s
        return {"Retry-After": str(int(ra)) if float(ra).is_integer() else f"{ra:g}"}
    return None


def reset_connection(request: web.Request) -> None:
    """Close the client connection abruptly (TCP RST)."""
    tr = request.transport
    if tr is None:
        return
    sock = tr.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    tr.abort()


class SSEWriter:
    """Writes ``data: <json>`` events to a streaming response."""

    __slots__ = ("request", "response")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(status=200, headers=_SSE_HEADERS)

    async def prepare(self) -> None:
        """Send the status line and headers."""
        await self.response.prepare(self.request)

    async def send(self, obj: Any) -> None:
        """Send one event with ``obj`` as JSON."""
        await self.response.write(b"data: " + orjson.dumps(obj) + b"\n\n")

    async def send_raw(self, data: bytes) -> None:
        """Send raw bytes (``[DONE]`` or a deliberately broken event)."""
        await self.response.write(data)

    async def finish(self, *, done: bool = True) -> web.StreamResponse:
        """Send ``data: [DONE]`` (unless ``done`` is False) and end the body."""
        if done:
            await self.response.write(SSE_DONE)
        await self.response.write_eof()
        return self.response
