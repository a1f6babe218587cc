"""LoopTransport and h1.Connection against real servers on 127.0.0.1.

Well-formed answers come from an aiohttp app (the ``server`` fixture of conftest); malformed
or unusual byte streams from a raw ``asyncio.start_server`` whose handler writes the exact
bytes each test spells out. Nothing waits on a fixed sleep: every wait is for a condition
(:func:`until`), bounded in time.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import re
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from rollout_kit import EngineConnectionError, EngineTimeoutError, EngineUnreachableError
from rollout_kit.engines._transport import h1
from rollout_kit.engines._transport import loop as loop_mod
from rollout_kit.engines._transport.base import Reply
from rollout_kit.engines._transport.loop import LoopTransport

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AddRoute = Callable[[str, Handler], Awaitable[str]]

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
CLOSE_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
RESET = f"ConnectionResetError: [Errno {errno.ECONNRESET}] {os.strerror(errno.ECONNRESET)}"


# -- helpers -------------------------------------------------------------------------------


async def until(cond: Callable[[], bool], what: str, limit: float = 20.0) -> None:
    """Until ``cond()`` holds, yielding to the loop; fails after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    spins = 0
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for: {what}")
        spins += 1
        # a pure sleep(0) poll at first; later a short poll interval so a thread (the
        # second-loop test) is not starved on a 2-core machine
        await asyncio.sleep(0 if spins < 2000 else 0.001)


class RawConn:
    """One accepted connection of a :class:`RawServer`."""

    def __init__(self, server: RawServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, index: int) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.index = index  # 0 for the first connection the server accepted

    async def request(self) -> bytes | None:
        """The next request (head and Content-Length body); ``None`` when the client
        closed the connection (counted in ``server.eofs``)."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
            body = await self.reader.readexactly(int(m[1])) if m else b""
        except (asyncio.IncompleteReadError, ConnectionError):
            self.server.eofs += 1
            return None
        self.server.requests.append(head + body)
        return head + body

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def hold(self) -> None:
        """Answer nothing more: read until the client closes."""
        while await self.request() is not None:
            pass

    def reset(self) -> None:
        """Drop the connection with a TCP RST (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


RawHandler = Callable[[RawConn], Awaitable[None]]


class RawServer:
    """``asyncio.start_server`` on 127.0.0.1 that counts what it sees. A connection is
    closed (FIN) when its handler returns."""

    def __init__(self, handler: RawHandler) -> None:
        self.handler = handler
        self.accepted = 0
        self.open = 0  # connections accepted and not yet closed
        self.max_open = 0
        self.eofs = 0  # connections the client closed (seen by RawConn.request)
        self.requests: list[bytes] = []
        self.addr = ""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.addr = f"127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        conn = RawConn(self, reader, writer, self.accepted)
        self.accepted += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            await self.handler(conn)
        except asyncio.CancelledError:
            pass  # stop() ends the handlers still running: not a failure of the handler
        finally:
            self.open -= 1
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.transport.abort()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


@pytest.fixture
async def raw() -> AsyncIterator[Callable[[RawHandler], Awaitable[RawServer]]]:
    """``await raw(handler)`` -> a started :class:`RawServer` (stopped after the test)."""
    servers: list[RawServer] = []

    async def make(handler: RawHandler) -> RawServer:
        s = RawServer(handler)
        await s.start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        await s.stop()


@pytest.fixture
async def transports() -> AsyncIterator[Callable[..., LoopTransport]]:
    """``transports(**kwargs)`` -> a LoopTransport, closed after the test."""
    made: list[LoopTransport] = []

    def make(**kwargs: Any) -> LoopTransport:
        t = LoopTransport(**kwargs)
        made.append(t)
        return t

    yield make
    for t in made:
        await t.close_async()


def serving(*answers: bytes, after: str = "serve") -> RawHandler:
    """A handler answering the n-th request of a connection with ``answers[n]`` (the last
    one repeated); after the answers: ``serve`` more, ``close``, or ``hold`` (read on)."""

    async def handle(c: RawConn) -> None:
        n = 0
        while await c.request() is not None:
            await c.send(answers[min(n, len(answers) - 1)])
            n += 1
            if after == "close" and n >= len(answers):
                return
            if after == "hold" and n >= len(answers):
                await c.hold()
                return

    return handle


class Recording(h1.Connection):
    """An h1.Connection that records its reads (to pace a server on what arrived)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[bytes] = []
        self.nbytes = 0

    def data_received(self, data: bytes) -> None:
        self.reads.append(data)
        self.nbytes += len(data)
        super().data_received(data)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Recording]:
    """Makes LoopTransport open :class:`Recording` connections; the list of them."""
    made: list[Recording] = []

    class Rec(Recording):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(loop_mod, "Connection", Rec)
    return made


async def get(t: LoopTransport, addr: str, target: str = "/x", *, method: str = "GET",
              timeout: float = 10.0, body: bytes | None = None) -> Reply:
    return await t.request(method, addr, target, body=body, headers={}, timeout=timeout)


def protocol_message(addr: str, detail: str, endpoint: str = "/x") -> str:
    return f"{addr} {endpoint}: the answer is not HTTP/1.1 this client reads ({detail})"


def failed_message(addr: str, detail: str, endpoint: str = "/x") -> str:
    return f"{addr} {endpoint}: connection failed ({detail})"


def timeout_message(addr: str, endpoint: str = "/x") -> str:
    return f"{addr} {endpoint}: no complete answer within the timeout"


CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a:  2 \r\n\r\n"
           b"5;name=value\r\nhello\r\n"
           b"7 ; quoted=\"a;b\"\r\n, world\r\n"
           b"A\r\n0123456789\r\n"
           b"0;last\r\nX-Trailer: t1\r\nX-Other: t2\r\n\r\n")
CHUNKED_BODY = b"hello, world0123456789"


# -- well-formed answers (aiohttp) ---------------------------------------------------------


async def test_content_length_body(server: AddRoute,
                                   transports: Callable[..., LoopTransport]) -> None:
    async def hello(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"hello world", headers={"X-Test": "v1"},
                            content_type="application/octet-stream")

    addr = await server("/x", hello)
    t = transports()
    reply = await get(t, addr, "/x?q=1")
    assert reply.status == 200
    assert reply.body == b"hello world"
    assert reply.headers["content-length"] == "11"
    assert reply.headers["x-test"] == "v1"
    assert reply.headers["content-type"] == "application/octet-stream"
    assert all(k == k.lower() for k in reply.headers)
    assert t.connections_in_use == 0


async def test_body_over_many_writes(server: AddRoute,
                                     transports: Callable[..., LoopTransport]) -> None:
    pieces = [bytes([i]) * 997 for i in range(200)]

    async def many(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_length = sum(map(len, pieces))
        await resp.prepare(request)
        for p in pieces:
            await resp.write(p)
        await resp.write_eof()
        return resp

    addr = await server("/x", many)
    t = transports()
    reply = await get(t, addr)
    assert reply.status == 200
    assert reply.headers["content-length"] == str(200 * 997)
    assert reply.body == b"".join(pieces)


async def test_empty_body(server: AddRoute, transports: Callable[..., LoopTransport]) -> None:
    async def empty(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    addr = await server("/x", empty)
    t = transports()
    reply = await get(t, addr)
    assert (reply.status, reply.body, reply.headers["content-length"]) == (200, b"", "0")


async def test_204_and_head_have_no_body_and_keep_the_connection(
        server: AddRoute, transports: Callable[..., LoopTransport]) -> None:
    peers: list[int] = []

    async def nothing(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername")[1])
        return web.Response(status=204)

    async def hello(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername")[1])
        return web.Response(body=b"hello", content_type="text/plain")

    addr = await server("/none", nothing)
    await server("/hello", hello)
    t = transports()
    r204 = await get(t, addr, "/none")
    assert (r204.status, r204.body) == (204, b"")
    head = await get(t, addr, "/hello", method="HEAD")
    assert (head.status, head.body) == (200, b"")
    assert head.headers["content-length"] == "5"
    whole = await get(t, addr, "/hello")
    assert (whole.status, whole.body) == (200, b"hello")
    assert len(peers) == 3 and len(set(peers)) == 1  # one connection carried all three
    assert t.connections_in_use == 0


async def test_stream_of_an_error_status_read_whole(
        server: AddRoute, transports: Callable[..., LoopTransport]) -> None:
    async def busy(request: web.Request) -> web.StreamResponse:
        return web.Response(status=503, text="busy, try later", headers={"Retry-After": "3"})

    addr = await server("/x", busy)
    t = transports()
    async with t.stream("POST", addr, "/x", body=b"{}", headers={}, timeout=10) as s:
        assert s.status == 503
        assert s.headers["retry-after"] == "3"
        assert await s.read() == b"busy, try later"
        assert t.connections_in_use == 1
    assert t.connections_in_use == 0


async def test_request_bytes_on_the_wire(raw: Callable[[RawHandler], Awaitable[RawServer]],
                                         transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(OK))
    t = transports()
    await t.request("POST", f"http://{srv.addr}/", "/v1/x?y=1", body=b'{"a":1}',
                    headers={"Content-Type": "application/json"}, timeout=10)
    await get(t, srv.addr, "/health")
    assert srv.requests == [
        b"POST /v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: rollout-kit\r\n"
        b"Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}" % srv.port,
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: rollout-kit\r\n\r\n"
        % srv.port,
    ]
    # "http://host:port/" and "host:port" are two spellings of the server, two pools
    assert srv.accepted == 2


# -- framings from exact bytes -------------------------------------------------------------


async def test_chunked_with_extensions_and_trailers(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(CHUNKED))
    t = transports()
    for _ in range(2):
        reply = await get(t, srv.addr)
        assert reply.status == 200
        assert reply.body == CHUNKED_BODY
        assert reply.headers == {"transfer-encoding": "chunked", "x-a": "1, 2"}
    assert srv.accepted == 1  # the trailers ended the answer: the connection was reused


async def test_chunked_split_at_every_byte(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport], recorded: list[Recording]) -> None:
    """The server writes one byte, then waits until the client has read it: every byte
    boundary of the head, the size lines, the data, the CRLFs and the trailers is a read."""

    def received() -> int:
        return sum(c.nbytes for c in recorded)

    def more_than(base: int) -> Callable[[], bool]:
        return lambda: received() > base

    async def bytewise(c: RawConn) -> None:
        while await c.request() is not None:
            for i in range(len(CHUNKED)):
                base = received()
                await c.send(CHUNKED[i:i + 1])
                await until(more_than(base), "the byte read")

    srv = await raw(bytewise)
    t = transports()
    for _ in range(2):
        reply = await get(t, srv.addr, timeout=60)
        assert (reply.status, reply.body) == (200, CHUNKED_BODY)
        assert reply.headers == {"transfer-encoding": "chunked", "x-a": "1, 2"}
    assert srv.accepted == 1 and len(recorded) == 1
    assert recorded[0].reads == [bytes([b]) for b in CHUNKED] * 2


async def test_h1_connection_directly_byte_by_byte(
        raw: Callable[[RawHandler], Awaitable[RawServer]]) -> None:
    """h1.Connection on its own: begin / wait / take / end, one byte per read."""
    answer = (b"HTTP/1.1 100 Continue\r\n\r\n"
              b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Id: 7\r\n\r\nabcde")
    made: list[Recording] = []

    def more_than(base: int) -> Callable[[], bool]:
        return lambda: made[0].nbytes > base

    async def bytewise(c: RawConn) -> None:
        while await c.request() is not None:
            for i in range(len(answer)):
                base = made[0].nbytes
                await c.send(answer[i:i + 1])
                await until(more_than(base), "the byte read")

    srv = await raw(bytewise)
    loop = asyncio.get_running_loop()

    def factory() -> Recording:
        made.append(Recording())
        return made[-1]

    _, conn = await loop.create_connection(factory, "127.0.0.1", srv.port)
    try:
        for _ in range(2):
            conn.begin(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n", head_only=False,
                       deadline=loop.time() + 60, loop=loop)
            while not conn.head_done:
                await conn.wait()
            assert (conn.status, conn.headers) == (201, {"content-length": "5", "x-id": "7"})
            body = conn.take()
            while not conn.done:
                await conn.wait()
                body += conn.take()
            assert body == b"abcde"
            assert conn.end() is True
        assert conn.reads == [bytes([b]) for b in answer] * 2
    finally:
        conn.abort()


async def test_h1_connection_deadline_fails_the_exchange(
        raw: Callable[[RawHandler], Awaitable[RawServer]]) -> None:
    srv = await raw(lambda c: c.hold())
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(h1.Connection, "127.0.0.1", srv.port)
    conn.begin(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n", head_only=False,
               deadline=loop.time() + 0.2, loop=loop)
    with pytest.raises(TimeoutError) as info:
        while not conn.done:
            await conn.wait()
    assert type(info.value) is TimeoutError
    assert conn.end() is False and conn.closed
    await until(lambda: srv.eofs == 1, "the server saw the close")


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
async def test_body_until_close(version: str, raw: Callable[[RawHandler], Awaitable[RawServer]],
                                transports: Callable[..., LoopTransport]) -> None:
    answer = (version.encode() + b" 200 OK\r\nContent-Type: text/plain\r\n\r\n"
              b"the body ends with the close")
    srv = await raw(serving(answer, after="close"))
    t = transports()
    for _ in range(2):
        reply = await get(t, srv.addr)
        assert reply.status == 200
        assert reply.body == b"the body ends with the close"
        assert reply.headers == {"content-type": "text/plain"}
    assert srv.accepted == 2
    assert t.connections_in_use == 0


@pytest.mark.parametrize("split", [False, True], ids=["one-write", "two-writes"])
async def test_interim_heads_are_skipped(split: bool,
                                         raw: Callable[[RawHandler], Awaitable[RawServer]],
                                         transports: Callable[..., LoopTransport]) -> None:
    interim = (b"HTTP/1.1 100 Continue\r\n\r\n"
               b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    final = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Final: yes\r\n\r\ndone"

    async def handle(c: RawConn) -> None:
        while await c.request() is not None:
            if split:
                await c.send(interim)
                await c.send(final)
            else:
                await c.send(interim + final)

    srv = await raw(handle)
    t = transports()
    for _ in range(2):
        reply = await get(t, srv.addr, body=b"x" * 10)
        assert (reply.status, reply.body) == (200, b"done")
        assert reply.headers == {"content-length": "4", "x-final": "yes"}
    assert srv.accepted == 1


async def test_304_with_content_length_has_no_body(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(b'HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: "v"\r\n\r\n',
                            OK))
    t = transports()
    r304 = await get(t, srv.addr)
    assert (r304.status, r304.body, r304.headers["etag"]) == (304, b"", '"v"')
    r200 = await get(t, srv.addr)
    assert (r200.status, r200.body) == (200, b"ok")
    assert srv.accepted == 1


# -- keep-alive ----------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "connections"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", 2),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nconnection: Close\r\n\r\nok", 2),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 2),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok", 1),
], ids=["1.1", "1.1-close", "1.1-Close", "1.0", "1.0-keep-alive"])
async def test_keep_alive_reuse(answer: bytes, connections: int,
                                raw: Callable[[RawHandler], Awaitable[RawServer]],
                                transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(answer))
    t = transports()
    for _ in range(2):
        reply = await get(t, srv.addr)
        assert (reply.status, reply.body) == (200, b"ok")
    assert srv.accepted == connections
    assert len(srv.requests) == 2
    # a connection not kept is closed by the client at once; a kept one stays open
    await until(lambda: srv.eofs == (0 if connections == 1 else 2), "unkept ones closed")


async def test_idle_connection_closed_by_the_server_is_not_reused(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport], recorded: list[Recording]) -> None:
    srv = await raw(serving(OK, after="close"))  # a keep-alive answer, then a FIN
    t = transports()
    assert (await get(t, srv.addr)).body == b"ok"
    await until(lambda: recorded[0].closed, "the client saw the idle connection close")
    reply = await get(t, srv.addr)
    assert (reply.status, reply.body) == (200, b"ok")
    assert srv.accepted == 2 and len(recorded) == 2


async def test_keepalive_zero_keeps_nothing(raw: Callable[[RawHandler], Awaitable[RawServer]],
                                            transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(OK))
    t = transports(keepalive=0.0)
    for _ in range(3):
        assert (await get(t, srv.addr)).body == b"ok"
    assert srv.accepted == 3


async def test_garbage_on_an_idle_connection_drops_it(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport], recorded: list[Recording]) -> None:
    answered = asyncio.Event()

    async def handle(c: RawConn) -> None:
        while await c.request() is not None:
            await c.send(OK)
            if c.index == 0:
                await answered.wait()
                await c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")

    srv = await raw(handle)
    t = transports()
    assert (await get(t, srv.addr)).body == b"ok"
    answered.set()
    await until(lambda: recorded[0].closed, "the client dropped the connection")
    assert (await get(t, srv.addr)).body == b"ok"
    assert srv.accepted == 2


# -- malformed answers ---------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "detail"), [
    (b"HELLO world\r\n\r\n", "not an HTTP/1.x status line: 'HELLO world'"),
    (b"HTTP/1.1 OK\r\n\r\n", "not an HTTP/1.x status line: 'HTTP/1.1 OK'"),
    (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.x status line: 'HTTP/2 200'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBadHeader\r\n\r\nok",
     "a header line without ':': 'BadHeader'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\nok",
     "a Content-Length that is not a number: 'two'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok",
     "a Content-Length that is not a number: '-2'"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
     "a bad chunk size line: b'zz'"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n",
     "a bad chunk size line: b''"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n",
     "a chunk longer than its size line said"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokay", "more body bytes than the "
     "Content-Length said"),
], ids=["not-http", "no-status", "http2", "header-no-colon", "length-nan", "length-negative",
        "chunk-size-zz", "chunk-size-empty", "chunk-too-long", "more-than-length"])
async def test_malformed_answer(answer: bytes, detail: str,
                                raw: Callable[[RawHandler], Awaitable[RawServer]],
                                transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(answer, after="hold"))  # held open: the bytes alone are at fault
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr, "/x?a=b")
    err = info.value
    assert type(err) is EngineConnectionError
    assert str(err) == protocol_message(srv.addr, detail)
    assert (err.server, err.endpoint) == (srv.addr, "/x")
    assert isinstance(err.__cause__, h1.ProtocolError)
    assert t.connections_in_use == 0
    await until(lambda: srv.eofs == 1, "the client closed the connection")
    # the next request gets a new connection (and the same bad answer)
    with pytest.raises(EngineConnectionError):
        await get(t, srv.addr)
    assert srv.accepted == 2


async def test_head_over_64_kib_still_incomplete(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    big = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 * 1024)  # no end of head, then silence

    srv = await raw(serving(big, after="hold"))
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr)
    assert type(info.value) is EngineConnectionError
    assert str(info.value) == protocol_message(
        srv.addr, "the answer's head is longer than 65536 bytes")


async def test_head_over_64_kib_in_one_read(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Big: "
    head += b"a" * (h1.MAX_HEAD + 1 - len(head))  # 65537 bytes before the blank line
    srv = await raw(serving(head + b"\r\n\r\n", after="hold"))
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr)
    assert str(info.value) == protocol_message(
        srv.addr, "the answer's head is longer than 65536 bytes")


async def test_negative_chunk_size(raw: Callable[[RawHandler], Awaitable[RawServer]],
                                   transports: Callable[..., LoopTransport]) -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n"
    srv = await raw(serving(answer, after="hold"))
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr, timeout=2.0)
    assert type(info.value) is EngineConnectionError
    assert str(info.value) == protocol_message(srv.addr, "a bad chunk size line: b'-5'")


async def test_status_with_a_non_ascii_digit(raw: Callable[[RawHandler], Awaitable[RawServer]],
                                             transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(b"HTTP/1.1 \xb200 OK\r\nContent-Length: 0\r\n\r\n", after="hold"))
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr)
    assert str(info.value) == protocol_message(
        srv.addr, "not an HTTP/1.x status line: 'HTTP/1.1 \xb200 OK'")


@pytest.mark.parametrize("answer", [
    CHUNKED + b"HTTP/1.1 200 OK\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nstray bytes",
    b"HTTP/1.1 204 No Content\r\n\r\nstray bytes",
], ids=["chunked", "length-0", "204"])
async def test_bytes_after_the_end_of_the_answer(
        answer: bytes, raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(answer))
    t = transports()
    for _ in range(2):
        reply = await get(t, srv.addr)  # the answer itself is whole: it is returned
        assert reply.status in (200, 204)
        assert reply.body == (CHUNKED_BODY if answer.startswith(CHUNKED) else b"")
    assert srv.accepted == 2  # but its connection is not reused
    assert t.connections_in_use == 0


@pytest.mark.parametrize(("before_close", "detail"), [
    (b"", "before answering"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "in the middle of the answer"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", "in the middle of the answer"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
     "in the middle of the answer"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n",
     "in the middle of the answer"),
], ids=["before-answering", "in-head", "in-length-body", "in-chunked-body", "in-trailers"])
async def test_server_closes_early(before_close: bytes, detail: str,
                                   raw: Callable[[RawHandler], Awaitable[RawServer]],
                                   transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(before_close, after="close"))
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr, "/v1/completions?stream=0")
    err = info.value
    assert type(err) is EngineConnectionError
    assert str(err) == failed_message(
        srv.addr, f"ConnectionResetError: the server closed the connection {detail}",
        "/v1/completions")
    assert (err.server, err.endpoint) == (srv.addr, "/v1/completions")
    assert t.connections_in_use == 0


async def test_server_closes_in_the_middle_of_a_stream(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    go_on = asyncio.Event()

    async def handle(c: RawConn) -> None:
        await c.request()
        await c.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await go_on.wait()
        await c.send(b"6\r\n world\r\n3\r\n")  # then the FIN

    srv = await raw(handle)
    t = transports()
    got: list[bytes] = []
    with pytest.raises(EngineConnectionError) as info:
        async with t.stream("GET", srv.addr, "/s", body=None, headers={}, timeout=10) as s:
            async for chunk in s.chunks():
                got.append(chunk)
                go_on.set()
    assert b"".join(got) == b"hello world"
    assert type(info.value) is EngineConnectionError
    assert str(info.value) == failed_message(
        srv.addr, "ConnectionResetError: the server closed the connection in the middle of "
        "the answer", "/s")
    assert t.connections_in_use == 0


async def test_server_resets_in_the_middle_of_a_length_body(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    async def handle(c: RawConn) -> None:
        await c.request()
        await c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        c.reset()

    srv = await raw(handle)
    t = transports()
    with pytest.raises(EngineConnectionError) as info:
        await get(t, srv.addr)
    assert type(info.value) is EngineConnectionError
    assert str(info.value) == failed_message(srv.addr, RESET)


async def test_reset_in_an_until_close_body_is_an_error(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    reset_now = asyncio.Event()

    async def handle(c: RawConn) -> None:
        await c.request()
        await c.send(b"HTTP/1.1 200 OK\r\n\r\npartial")
        await reset_now.wait()
        c.reset()

    srv = await raw(handle)
    t = transports()
    async with t.stream("GET", srv.addr, "/x", body=None, headers={}, timeout=10) as s:
        chunks = s.chunks()
        assert await chunks.__anext__() == b"partial"
        reset_now.set()
        with pytest.raises(EngineConnectionError) as info:
            async for _ in chunks:
                pass
    assert str(info.value) == failed_message(srv.addr, RESET)


# -- timeouts ------------------------------------------------------------------------------


async def test_server_that_never_answers(raw: Callable[[RawHandler], Awaitable[RawServer]],
                                         transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(lambda c: c.hold())
    t = transports()
    start = time.monotonic()
    with pytest.raises(EngineTimeoutError) as info:
        await get(t, srv.addr, "/x?q", timeout=0.3)
    assert time.monotonic() - start < 15  # generous: the timer fired, nothing hung
    err = info.value
    assert type(err) is EngineTimeoutError
    assert str(err) == timeout_message(srv.addr)
    assert (err.server, err.endpoint) == (srv.addr, "/x")
    assert t.connections_in_use == 0
    await until(lambda: srv.eofs == 1, "the client closed the timed-out connection")


async def test_stream_whose_body_stalls(raw: Callable[[RawHandler], Awaitable[RawServer]],
                                        transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(serving(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"5\r\nfirst\r\n", after="hold"))
    t = transports()
    got: list[bytes] = []
    async with t.stream("POST", srv.addr, "/gen", body=b"{}", headers={}, timeout=2.0) as s:
        assert s.status == 200
        with pytest.raises(EngineTimeoutError) as info:
            async for chunk in s.chunks():
                got.append(chunk)
    assert got == [b"first"]
    assert str(info.value) == timeout_message(srv.addr, "/gen")
    assert (info.value.server, info.value.endpoint) == (srv.addr, "/gen")
    assert t.connections_in_use == 0
    await until(lambda: srv.eofs == 1, "the client closed the stalled connection")


async def test_connect_refused(transports: Callable[..., LoopTransport]) -> None:
    with socket.socket() as bound:  # bound, never listening: a connect is refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        addr = f"127.0.0.1:{port}"
        t = transports()
        with pytest.raises(EngineUnreachableError) as info:
            await get(t, addr, "/health")
    err = info.value
    assert type(err) is EngineUnreachableError
    cause = err.__cause__
    assert isinstance(cause, ConnectionRefusedError) and cause.errno == errno.ECONNREFUSED
    assert str(err) == f"cannot connect to {addr} (/health): {cause}"
    assert f"[Errno {errno.ECONNREFUSED}]" in str(err)
    assert (err.server, err.endpoint) == (addr, "/health")
    assert t.connections_in_use == 0


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose accept queue is full: a connect to it hangs (SYNs are dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
    yield port
    for s in fillers:
        s.close()
    listener.close()


async def test_connect_timeout(unanswered_port: int,
                               transports: Callable[..., LoopTransport]) -> None:
    addr = f"127.0.0.1:{unanswered_port}"
    t = transports(connect_timeout=0.3)
    with pytest.raises(EngineUnreachableError) as info:
        await get(t, addr, timeout=30)
    assert type(info.value) is EngineUnreachableError
    assert str(info.value) == f"cannot connect to {addr} (/x): no connection within 0.3 s"
    # the request's own timeout comes first: a timeout, not an unreachable server
    t2 = transports(connect_timeout=30)
    with pytest.raises(EngineTimeoutError) as info2:
        await get(t2, addr, timeout=0.3)
    assert type(info2.value) is EngineTimeoutError
    assert str(info2.value) == timeout_message(addr)
    assert t.connections_in_use == t2.connections_in_use == 0


# -- max_connections -----------------------------------------------------------------------


def held_until(release: asyncio.Event, answer: bytes, held: list[int]) -> RawHandler:
    """Each request is held until ``release`` is set (``held[0]``: requests waiting now)."""

    async def handle(c: RawConn) -> None:
        while await c.request() is not None:
            held[0] += 1
            await release.wait()
            held[0] -= 1
            await c.send(answer)
            if answer is CLOSE_OK:
                return

    return handle


async def test_max_connections_limits_open_connections(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    release = asyncio.Event()
    held = [0]
    srv = await raw(held_until(release, CLOSE_OK, held))
    t = transports(max_connections=2)
    tasks = [asyncio.create_task(get(t, srv.addr, f"/r{i}")) for i in range(5)]
    await until(lambda: held[0] == 2, "two requests at the server")
    for _ in range(50):  # the other three stay queued in the client
        await asyncio.sleep(0)
    assert (srv.accepted, held[0], t.connections_in_use) == (2, 2, 2)
    release.set()
    replies = await asyncio.gather(*tasks)
    assert [(r.status, r.body) for r in replies] == [(200, b"ok")] * 5
    assert srv.accepted == 5 and srv.max_open == 2
    assert t.connections_in_use == 0


async def test_max_connections_with_keep_alive(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    release = asyncio.Event()
    held = [0]
    srv = await raw(held_until(release, OK, held))
    t = transports(max_connections=2)
    tasks = [asyncio.create_task(get(t, srv.addr, f"/r{i}", timeout=5)) for i in range(5)]
    await until(lambda: held[0] == 2, "two requests at the server")
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [r.body if isinstance(r, Reply) else repr(r) for r in results] == [b"ok"] * 5
    assert srv.accepted == 2 and srv.max_open == 2
    assert t.connections_in_use == 0


async def test_waiter_deadline(raw: Callable[[RawHandler], Awaitable[RawServer]],
                               transports: Callable[..., LoopTransport]) -> None:
    release = asyncio.Event()
    held = [0]
    srv = await raw(held_until(release, CLOSE_OK, held))
    t = transports(max_connections=1)
    first = asyncio.create_task(get(t, srv.addr, "/first"))
    await until(lambda: held[0] == 1, "the first request at the server")
    with pytest.raises(EngineTimeoutError) as info:
        await get(t, srv.addr, "/second?x=1", timeout=0.3)
    err = info.value
    assert type(err) is EngineTimeoutError
    assert str(err) == (f"{srv.addr} /second: no free connection within the timeout "
                        "(max_connections=1)")
    assert (err.server, err.endpoint) == (srv.addr, "/second")
    assert srv.accepted == 1 and t.connections_in_use == 1
    release.set()
    assert (await first).body == b"ok"
    assert (await get(t, srv.addr)).body == b"ok"
    assert t.connections_in_use == 0


async def test_cancelled_waiter_leaves_the_queue(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    release = asyncio.Event()
    held = [0]
    srv = await raw(held_until(release, CLOSE_OK, held))
    t = transports(max_connections=1)
    first = asyncio.create_task(get(t, srv.addr, "/first"))
    await until(lambda: held[0] == 1, "the first request at the server")
    waiting = asyncio.create_task(get(t, srv.addr, "/waiting"))
    third = asyncio.create_task(get(t, srv.addr, "/third"))
    for _ in range(20):
        await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert t.connections_in_use == 1
    release.set()
    assert (await first).body == b"ok"
    assert (await third).body == b"ok"
    assert t.connections_in_use == 0 and srv.accepted == 2


async def test_cancelled_woken_waiter_passes_the_slot_on(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    release = asyncio.Event()
    held = [0]
    srv = await raw(held_until(release, CLOSE_OK, held))
    t = transports(max_connections=1)

    async def first_then_cancel_second() -> Reply:
        reply = await get(t, srv.addr, "/first")
        second.cancel()  # the second waiter was just woken, and has not run yet
        return reply

    first = asyncio.create_task(first_then_cancel_second())
    await until(lambda: held[0] == 1, "the first request at the server")
    second = asyncio.create_task(get(t, srv.addr, "/second"))
    for _ in range(20):
        await asyncio.sleep(0)
    third = asyncio.create_task(get(t, srv.addr, "/third", timeout=3))
    for _ in range(20):
        await asyncio.sleep(0)
    release.set()
    assert (await first).body == b"ok"
    with pytest.raises(asyncio.CancelledError):
        await second
    assert (await third).body == b"ok"


# -- cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel"],
                         ids=["before-head", "in-body"])
async def test_cancel_in_the_middle_of_request(
        sent: bytes, raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport], recorded: list[Recording]) -> None:
    async def handle(c: RawConn) -> None:
        if c.index == 0:
            await c.request()
            await c.send(sent)
            await c.hold()
        else:
            await serving(OK)(c)

    srv = await raw(handle)
    t = transports()
    task = asyncio.create_task(get(t, srv.addr))
    await until(lambda: len(recorded) == 1 and recorded[0].nbytes == len(sent)
                and len(srv.requests) == 1, "the request sent, the answer's start read")
    assert t.connections_in_use == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: t.connections_in_use == 0, "the connection given back")
    await until(lambda: srv.eofs == 1, "the cancelled connection closed")
    reply = await get(t, srv.addr)
    assert (reply.status, reply.body) == (200, b"ok")
    assert srv.accepted == 2


async def test_cancelled_request_is_not_its_own_cause(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    srv = await raw(lambda c: c.hold())
    t = transports()
    task = asyncio.create_task(get(t, srv.addr))
    await until(lambda: len(srv.requests) == 1, "the request at the server")
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as info:
        await task
    assert info.value.__cause__ is not info.value


async def test_cancel_in_the_middle_of_a_stream(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport]) -> None:
    async def handle(c: RawConn) -> None:
        if c.index == 0:
            await c.request()
            await c.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"6\r\ntoken1\r\n")
            await c.hold()
        else:
            await serving(OK)(c)

    srv = await raw(handle)
    t = transports()
    got: list[bytes] = []

    async def consume() -> None:
        async with t.stream("GET", srv.addr, "/s", body=None, headers={}, timeout=30) as s:
            async for chunk in s.chunks():
                got.append(chunk)

    task = asyncio.create_task(consume())
    await until(lambda: got == [b"token1"], "the first chunk consumed")
    assert t.connections_in_use == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: t.connections_in_use == 0, "the connection given back")
    await until(lambda: srv.eofs == 1, "the cancelled stream's connection closed")
    assert (await get(t, srv.addr)).body == b"ok"
    assert srv.accepted == 2


# -- flow control --------------------------------------------------------------------------


async def test_large_stream_read_slowly_arrives_whole(
        server: AddRoute, transports: Callable[..., LoopTransport],
        recorded: list[Recording]) -> None:
    payload = random.Random(1234).randbytes(5 * 1024 * 1024)

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # chunked
        await resp.prepare(request)
        for i in range(0, len(payload), 64 * 1024):
            await resp.write(payload[i:i + 64 * 1024])
        await resp.write_eof()
        return resp

    addr = await server("/big", big)
    t = transports()
    got: list[bytes] = []
    async with t.stream("GET", addr, "/big", body=None, headers={}, timeout=120) as s:
        conn = recorded[0]
        transport = conn.transport
        assert transport is not None
        await until(lambda: not transport.is_reading(), "reading paused (over 1 MiB held)")
        async for chunk in s.chunks():
            got.append(chunk)
            for _ in range(10):  # a slow reader
                await asyncio.sleep(0)
    assert b"".join(got) == payload
    # what is held never grows much past the high-water mark: one read past 1 MiB at most
    assert max(map(len, got)) <= 2 * 1024 * 1024
    assert t.connections_in_use == 0


async def test_connection_paused_at_the_end_of_an_unread_stream(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        transports: Callable[..., LoopTransport], recorded: list[Recording]) -> None:
    high = 1024 * 1024
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (high + 1)

    async def handle(c: RawConn) -> None:
        await c.request()
        await c.send(head + b"a" * high)  # exactly the high-water mark: still reading
        await until(lambda: recorded[0].nbytes == len(head) + high, "1 MiB read")
        await c.send(b"a")  # the last byte: over the mark, and the end of the answer
        await serving(OK)(c)

    srv = await raw(handle)
    t = transports()
    async with t.stream("GET", srv.addr, "/x", body=None, headers={}, timeout=30) as s:
        assert s.status == 200
        await until(lambda: recorded[0].done, "the whole answer in")
        transport = recorded[0].transport
        assert transport is not None and not transport.is_reading()
        # the body is not read: only the status mattered
    reply = await get(t, srv.addr, timeout=2)
    assert (reply.status, reply.body) == (200, b"ok")


# -- close_async and event loops -----------------------------------------------------------


async def test_close_async_closes_idle_connections(
        raw: Callable[[RawHandler], Awaitable[RawServer]]) -> None:
    srv = await raw(serving(OK))
    other = await raw(serving(OK))
    t = LoopTransport()
    assert (await get(t, srv.addr)).body == b"ok"
    assert (await get(t, other.addr)).body == b"ok"
    assert srv.eofs == other.eofs == 0
    await t.close_async()
    await until(lambda: srv.eofs == 1 and other.eofs == 1, "both idle connections closed")
    assert t.connections_in_use == 0
    await t.close_async()  # twice is fine
    assert (await get(t, srv.addr)).body == b"ok"  # and it is usable again: a new pool
    assert srv.accepted == 2
    await t.close_async()
    await until(lambda: srv.eofs == 2, "the new idle connection closed")


async def test_second_event_loop_gets_its_own_pool(
        raw: Callable[[RawHandler], Awaitable[RawServer]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed_on: list[tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]] = []
    close_all = loop_mod._Pool.close_all

    def recording_close_all(pool: loop_mod._Pool) -> None:
        closed_on.append((pool.loop, asyncio.get_running_loop()))
        close_all(pool)

    monkeypatch.setattr(loop_mod._Pool, "close_all", recording_close_all)
    srv = await raw(serving(OK))
    t = LoopTransport()
    first_loop = asyncio.get_running_loop()
    assert (await get(t, srv.addr)).body == b"ok"

    second_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=second_loop.run_forever, daemon=True)
    thread.start()
    try:
        async def there() -> tuple[list[bytes], int]:
            bodies = [(await get(t, srv.addr)).body for _ in range(2)]
            return bodies, t.connections_in_use

        bodies, in_use = await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(there(), second_loop))
        assert bodies == [b"ok", b"ok"] and in_use == 0
        assert srv.accepted == 2  # a fresh pool there, reused for its second request
        # the first loop's pool was closed, on the first loop
        await until(lambda: srv.eofs == 1, "the first loop's connection closed")
        assert closed_on == [(first_loop, first_loop)]

        await t.close_async()  # from the first loop: the second loop's pool closes there
        await until(lambda: srv.eofs == 2, "the second loop's connection closed")
        assert closed_on[1:] == [(second_loop, second_loop)]

        assert (await get(t, srv.addr)).body == b"ok"  # back on the first loop: a new pool
        assert srv.accepted == 3
    finally:
        await t.close_async()
        second_loop.call_soon_threadsafe(second_loop.stop)
        await asyncio.to_thread(thread.join, 30)
        second_loop.close()
    await until(lambda: srv.eofs == 3, "the last connection closed")


def test_under_uvloop() -> None:
    """uvloop's transports are not ``asyncio.Transport`` subclasses: requests, keep-alive
    reuse and a streamed body work on its loop too."""
    uvloop = pytest.importorskip("uvloop")

    async def body(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(3):
            await resp.write(b"part%d\n" % i)
        await resp.write_eof()
        return resp

    async def main() -> tuple[int, bytes, bytes, int]:
        app = web.Application()
        app.router.add_get("/s", body)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        addr = f"127.0.0.1:{port}"
        t = LoopTransport()
        try:
            first = await t.request("GET", addr, "/s", body=None, headers={}, timeout=10)
            async with t.stream("GET", addr, "/s", body=None, headers={}, timeout=10) as s:
                streamed = b"".join([c async for c in s.chunks()])
            return first.status, first.body, streamed, t.connections_in_use
        finally:
            await t.close_async()
            await runner.cleanup()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        status, whole, streamed, in_use = runner.run(main())
    assert (status, whole, streamed, in_use) == (200, b"part0\npart1\npart2\n",
                                                 b"part0\npart1\npart2\n", 0)
