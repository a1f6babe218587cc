"""What a drawn fault does to one generation request (shared by both flavours).

``draw_fault`` picks the request's fault and applies its effects before generation
(``hang`` waits until the server stops, ``slow_first_byte`` sleeps); the flavour answers
``error`` and ``hang`` in its own error shape. ``abort`` cuts every sequence at half its
planned output (``mark_aborts``); ``reset``/``malformed``/``truncate`` break a
non-streamed body (``broken_response``) or a stream (``streaming.SequenceStream``).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Sequence
from typing import Any

import orjson
from aiohttp import web

from ._context import ServerContext
from ._faults import Fault, FaultPlan
from ._state import SimSequence


async def draw_fault(ctx: ServerContext) -> Fault | None:
    """This request's fault (None mostly), after its before-generation effects.

    Callers skip the call when ``ctx.faults.active`` is false (no coroutine per request).
    """
    fault = ctx.faults.draw()
    if fault is not None:
        if fault.kind == "hang":
            await ctx.engine.hang()
        elif fault.kind == "slow_first_byte":
            await asyncio.sleep(ctx.faults.slow_first_byte_s)
    return fault


def mark_aborts(fault: Fault | None, seqs: Sequence[SimSequence]) -> None:
    """For an ``abort`` fault: every sequence ends (aborted) at half its planned output."""
    if fault is not None and fault.kind == "abort":
        for s in seqs:
            assert s.plan is not None
            s.abort_after = len(s.plan) // 2


def broken_response(fault: Fault | None, request: web.Request,
                    payload: Any) -> web.Response | None:
    """The broken answer a ``reset``/``malformed``/``truncate`` fault gives instead of
    ``payload`` (None for any other fault)."""
    if fault is None:
        return None
    if fault.kind == "reset":
        reset_connection(request)
        return web.Response(status=500)
    if fault.kind in ("malformed", "truncate"):
        raw = orjson.dumps(payload)
        return web.Response(body=raw[:max(1, len(raw) // 2)], status=200,
                            content_type="application/json")
    return None


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
