"""HTTP plumbing shared by both flavours: JSON bodies in and out, the server's context."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from ._context import ServerContext

CTX_KEY: web.AppKey[Any] = web.AppKey("rollout_kit_sim_ctx", object)


class BadBody(Exception):
    """The request body is not valid JSON (message says why)."""


def ctx_of(request: web.Request) -> ServerContext:
    """The ``ServerContext`` of the server that received ``request``."""
    ctx: ServerContext = request.app[CTX_KEY]
    return ctx


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


async def optional_json(request: web.Request) -> dict[str, Any] | None:
    """The JSON object of a control route's body: ``{}`` without a body, None when the body
    is not a JSON object."""
    if not request.can_read_body:
        return {}
    try:
        body = await read_json(request)
    except BadBody:
        return None
    return body if isinstance(body, dict) else None


async def empty_ok(_: web.Request) -> web.Response:
    """200 with an empty body (``/health``, ``/ping``)."""
    return web.Response(status=200)
