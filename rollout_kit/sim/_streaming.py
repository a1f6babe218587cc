"""Server-sent events shared by both flavours: ``SSEWriter`` and ``SequenceStream``.

``SequenceStream`` drives the sequences of one request and sends one event per release of
tokens, built by the flavour's ``chunk(seq, k, prev, final)`` (``k`` tokens done, ``prev``
sent before). It applies the stream faults: ``reset``/``truncate`` cut the stream after
half the planned tokens (``reset`` with a TCP RST, ``truncate`` without ``[DONE]``) and
abort the request; ``malformed`` garbles the first event. Sequences that end without a
final event (aborted, stopped early, empty) get one after the drive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson
from aiohttp import web

from ._driver import drive_all
from ._fault_effects import reset_connection
from ._faults import Fault
from ._state import SimEngine, SimSequence

SSE_DONE = b"data: [DONE]\n\n"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

Chunk = Callable[[SimSequence, int, int, bool], dict[str, Any]]
"""``chunk(seq, k, prev, final)``: the event for ``seq`` with ``k`` tokens done."""


class SSEWriter:
    """Writes ``data: <json>`` events to a streaming response.

    With ``coalesce`` (a zero-latency server: every token of a request is ready in the same
    instant) events are kept and go out together, with the end of the body, in one write
    (or at :meth:`flush`): one ``send`` per request instead of one per event, which is
    most of such a server's CPU. Without it each event is written at once.
    """

    __slots__ = ("_held", "coalesce", "request", "response")

    def __init__(self, request: web.Request, *, coalesce: bool = False) -> None:
        self.request = request
        self.response = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        self.coalesce = coalesce
        self._held: list[bytes] = []

    async def prepare(self) -> None:
        """Send the status line and headers."""
        await self.response.prepare(self.request)

    async def send(self, obj: Any) -> None:
        """Send one event with ``obj`` as JSON."""
        await self.send_raw(b"data: " + orjson.dumps(obj) + b"\n\n")

    async def send_raw(self, data: bytes) -> None:
        """Send raw bytes (``[DONE]`` or a deliberately broken event)."""
        if self.coalesce:
            self._held.append(data)
        else:
            await self.response.write(data)

    async def flush(self) -> None:
        """Write the events kept so far (``coalesce``)."""
        if self._held:
            await self.response.write(self._take())

    async def finish(self, *, done: bool = True) -> web.StreamResponse:
        """Send ``data: [DONE]`` (unless ``done`` is False) and end the body."""
        if done:
            self._held.append(SSE_DONE)
        await self.response.write_eof(self._take())
        return self.response

    def _take(self) -> bytes:
        data = b"".join(self._held)
        self._held.clear()
        return data


class SequenceStream:
    """Streams the sequences of one request (see the module docstring).

    Args:
        sse: the prepared writer.
        engine: the server's engine.
        seqs: the request's sequences.
        chunk: builds one event.
        fault: the request's fault, if any.
        garble: the bytes a ``malformed`` fault sends instead of the first event
            (given its JSON).
    """

    __slots__ = ("_chunks", "_cut_after", "_emitted", "_garble", "_kind", "chunk", "cut",
                 "engine", "last", "seqs", "sse")

    def __init__(self, sse: SSEWriter, engine: SimEngine, seqs: Sequence[SimSequence],
                 chunk: Chunk, fault: Fault | None = None,
                 garble: Callable[[bytes], bytes] | None = None) -> None:
        self.sse = sse
        self.engine = engine
        self.seqs = seqs
        self.chunk = chunk
        self._kind = fault.kind if fault is not None else None
        self._garble = garble
        planned = sum(len(s.plan) for s in seqs if s.plan is not None)
        self._cut_after = (max(1, planned // 2) if self._kind in ("reset", "truncate")
                           else -1)
        self._emitted = 0
        self._chunks = 0
        self.cut = False
        self.last: dict[int, int] = {}
        """Tokens sent per sequence index."""

    async def _emit(self, seq: SimSequence, k: int) -> None:
        if self.cut:
            return
        plan = seq.plan
        assert plan is not None
        prev = self.last.get(seq.index, 0)
        obj = self.chunk(seq, k, prev, k >= len(plan) and seq.aborted is None)
        self.last[seq.index] = k
        if self._kind == "malformed" and self._chunks == 0 and self._garble is not None:
            await self.sse.send_raw(self._garble(orjson.dumps(obj)))
        else:
            await self.sse.send(obj)
        self._chunks += 1
        self._emitted += k - prev
        if 0 < self._cut_after <= self._emitted:
            self.cut = True
            if self._kind == "reset":
                await self.sse.flush()  # the events before the cut reach the client
                reset_connection(self.sse.request)
            for s in self.seqs:
                self.engine.abort(s.rid, exact=True)

    async def run(self, overloaded: Callable[[], dict[str, Any]] | None
                  ) -> web.StreamResponse | None:
        """Drive the sequences, streaming their tokens, then the final event of each
        sequence that has not had one.

        Args:
            overloaded: makes the error event to end the stream with when the waiting queue
                is full (None: go on, the sequences end empty).

        Returns:
            The ended response when the stream was cut or overloaded; None when the
            caller may add its closing events and ``finish``.
        """
        ok = await drive_all(self.engine, self.seqs, self._emit)
        if self.cut:
            if self._kind == "reset":
                return self.sse.response
            return await self.sse.finish(done=False)
        if not ok and overloaded is not None:
            await self.sse.send(overloaded())
            return await self.sse.finish()
        for seq in self.seqs:
            plan = seq.plan
            assert plan is not None
            if seq.aborted is not None or seq.n_done < len(plan) or len(plan) == 0:
                prev = self.last.get(seq.index, 0)
                obj = self.chunk(seq, seq.n_done, prev, True)
                self.last[seq.index] = seq.n_done
                await self.sse.send(obj)
        return None
