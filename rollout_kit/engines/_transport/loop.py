"""The default transport: HTTP/1.1 on the event loop's own sockets, with a keep-alive pool.

:class:`LoopTransport` opens connections with ``loop.create_connection`` and speaks HTTP/1.1
through :class:`~.h1.Connection`. Its per-request path is a handful of calls — pick an
idle connection, write one ``bytes``, wait for reads — which is what lets a load run keep
up with its schedule (see ``docs/performance.md``). :class:`~.aiohttp_transport.
AiohttpTransport` is the alternative when aiohttp's features are needed.

Pool: idle connections are kept per ``host:port`` for ``keepalive`` seconds; at most
``max_connections`` are open at once (``0``: no limit; later requests wait for a free
one). A connection the server closed while idle is dropped when its close arrives; a
request that races such a close fails as any other connection error, and the engine's
retry policy sends it again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Final, NoReturn

from ..._errors import (
    EngineConnectionError,
    EngineError,
    EngineTimeoutError,
    EngineUnreachableError,
    truncate,
)
from .base import Reply, Stream, Transport
from .h1 import Connection, ProtocolError

_USER_AGENT: Final = "rollout-kit"


def _split(server: str) -> tuple[str, int, bool]:
    """``(host, port, tls)`` of ``host:port`` / ``http(s)://host:port``."""
    tls = server.startswith("https://")
    hostport = server.split("://", 1)[1] if "://" in server else server
    hostport = hostport.rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or (host.startswith("[") != host.endswith("]")):
        host, port = hostport, "443" if tls else "80"
    return host.strip("[]"), int(port), tls


class _Pool:
    """The connections of one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = threading.get_ident()  # the thread it was made on (its loop's)
        self.idle: dict[str, collections.deque[tuple[Connection, float]]] = {}
        self.open = 0  # connections handed out or being opened
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.prefix: dict[str, tuple[bytes, str, int, bool]] = {}

    def close_all(self) -> None:
        for queue in self.idle.values():
            for conn, _ in queue:
                conn.abort()
        self.idle.clear()


class LoopTransport(Transport):
    """HTTP/1.1 over the running loop's sockets (see the module docstring).

    Args:
        max_connections: open connections at most (``0``: unlimited).
        connect_timeout: seconds to open one connection.
        keepalive: seconds an idle connection is kept.
    """

    def __init__(self, *, max_connections: int = 0, connect_timeout: float = 10.0,
                 keepalive: float = 60.0) -> None:
        self._limit = max_connections
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive
        self._pool: _Pool | None = None
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"LoopTransport(max_connections={self._limit})"

    @property
    def connections_in_use(self) -> int:
        pool = self._pool
        if pool is None:
            return 0
        return pool.open

    def _current(self) -> _Pool:
        pool = self._pool
        if pool is not None and pool.thread == threading.get_ident() and pool.loop.is_running():
            # its loop runs, on this thread: the running one (see LoopBinding.here: this
            # skips asyncio.get_running_loop(), a getpid() system call per call in 3.11)
            return pool
        loop = asyncio.get_running_loop()
        if pool is not None and pool.loop is loop:
            return pool
        if pool is not None:
            _close_elsewhere(pool)
        pool = self._pool = _Pool(loop)
        return pool

    async def close_async(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if pool.loop is asyncio.get_running_loop():
            pool.close_all()
        else:
            _close_elsewhere(pool)

    # -- connections -------------------------------------------------------------------

    def _head(self, pool: _Pool, server: str) -> tuple[bytes, str, int, bool]:
        """The request-head prefix of ``server`` (``Host`` and ``User-Agent``), cached."""
        got = pool.prefix.get(server)
        if got is None:
            host, port, tls = _split(server)
            shown = f"[{host}]" if ":" in host else host
            got = (f"Host: {shown}:{port}\r\nUser-Agent: {_USER_AGENT}\r\n".encode("latin-1"),
                   host, port, tls)
            pool.prefix[server] = got
        return got

    async def _acquire(self, pool: _Pool, server: str, endpoint: str, host: str, port: int,
                       tls: bool, deadline: float) -> Connection:
        """An idle connection to ``server``, or a new one."""
        conn = self._idle(pool, server)
        if conn is not None:
            return conn
        while self._limit and pool.open >= self._limit:
            fut = pool.loop.create_future()
            pool.waiters.append(fut)
            try:
                async with asyncio.timeout_at(deadline):
                    await fut
            except BaseException as exc:
                if fut.done() and not fut.cancelled():
                    _wake_one(pool)  # woken, then cancelled: the free slot goes on
                if not isinstance(exc, TimeoutError):
                    raise
                raise EngineTimeoutError(
                    f"{server} {endpoint}: no free connection within the timeout "
                    f"(max_connections={self._limit})", server=server,
                    endpoint=endpoint) from None
            finally:
                if fut in pool.waiters:
                    pool.waiters.remove(fut)
            conn = self._idle(pool, server)
            if conn is not None:
                return conn
        pool.open += 1
        try:
            return await self._connect(pool, server, endpoint, host, port, tls, deadline)
        except BaseException:
            self._release(pool, server, None)
            raise

    def _idle(self, pool: _Pool, server: str) -> Connection | None:
        """The newest usable idle connection to ``server``, handed out; stale ones dropped."""
        queue = pool.idle.get(server)
        now = time.monotonic()
        while queue:
            conn, since = queue.pop()
            if conn.usable and now - since < self._keepalive:
                pool.open += 1
                return conn
            conn.abort()
        return None

    async def _connect(self, pool: _Pool, server: str, endpoint: str, host: str, port: int,
                       tls: bool, deadline: float) -> Connection:
        context: ssl.SSLContext | None = None
        if tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        limit = min(deadline, pool.loop.time() + self._connect_timeout)
        try:
            async with asyncio.timeout_at(limit):
                _, conn = await pool.loop.create_connection(
                    Connection, host, port, ssl=context,
                    server_hostname=host if tls else None)
        except TimeoutError as exc:
            if exc.errno is not None:  # the OS's ETIMEDOUT: no route to the server
                raise EngineUnreachableError(
                    f"cannot connect to {server} ({endpoint}): {exc}", server=server,
                    endpoint=endpoint) from exc
            if limit < deadline:
                raise EngineUnreachableError(
                    f"cannot connect to {server} ({endpoint}): no connection within "
                    f"{self._connect_timeout:g} s", server=server, endpoint=endpoint) from None
            raise EngineTimeoutError(f"{server} {endpoint}: no complete answer within the "
                                     "timeout", server=server, endpoint=endpoint) from None
        except OSError as exc:  # refused, no route, DNS (socket.gaierror), TLS handshake
            raise EngineUnreachableError(
                f"cannot connect to {server} ({endpoint}): {exc}", server=server,
                endpoint=endpoint) from exc
        return conn

    def _release(self, pool: _Pool, server: str, conn: Connection | None) -> None:
        """Give a connection back (``None``: one that failed to open); it is pooled when
        its exchange ended cleanly, dropped otherwise, and one waiter is let in."""
        pool.open -= 1
        if conn is not None and conn.end():
            pool.idle.setdefault(server, collections.deque()).append((conn, time.monotonic()))
        _wake_one(pool)

    # -- exchanges ---------------------------------------------------------------------

    async def _start(self, method: str, server: str, target: str, body: bytes | None,
                     headers: Mapping[str, str], timeout: float
                     ) -> tuple[_Pool, Connection]:
        """Send the request; return once the answer's head is in."""
        pool = self._current()
        prefix, host, port, tls = self._head(pool, server)
        endpoint = target.split("?", 1)[0]
        deadline = pool.loop.time() + timeout
        lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), prefix]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if body is not None:
            lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
            lines.append(body)
        else:
            lines.append(b"\r\n")
        data = b"".join(lines)
        conn = await self._acquire(pool, server, endpoint, host, port, tls, deadline)
        try:
            conn.begin(data, head_only=method == "HEAD", deadline=deadline, loop=pool.loop)
            while not conn.head_done:
                await conn.wait()
        except BaseException as exc:
            conn.abort()
            self._release(pool, server, conn)
            _raise_mapped(exc, server, endpoint)
        return pool, conn

    async def request(self, method: str, server: str, target: str, *, body: bytes | None,
                      headers: Mapping[str, str], timeout: float) -> Reply:
        pool, conn = await self._start(method, server, target, body, headers, timeout)
        try:
            while not conn.done:
                await conn.wait()
        except BaseException as exc:
            conn.abort()
            self._release(pool, server, conn)
            _raise_mapped(exc, server, target.split("?", 1)[0])
        reply = Reply(conn.status, conn.headers, conn.take(), conn.sent_ns, conn.last_ns)
        self._release(pool, server, conn)
        return reply

    @contextlib.asynccontextmanager
    async def stream(self, method: str, server: str, target: str, *, body: bytes | None,
                     headers: Mapping[str, str], timeout: float) -> AsyncIterator[Stream]:
        pool, conn = await self._start(method, server, target, body, headers, timeout)
        try:
            yield _LoopStream(conn, server, target.split("?", 1)[0])
        finally:
            if not conn.done:
                conn.abort()
            self._release(pool, server, conn)


class _LoopStream(Stream):
    """The body of a streamed answer on one :class:`~.h1.Connection`."""

    def __init__(self, conn: Connection, server: str, endpoint: str) -> None:
        self._conn = conn
        self._server = server
        self._endpoint = endpoint
        self.status = conn.status
        self.headers = conn.headers

    @property
    def sent_ns(self) -> int:
        return self._conn.sent_ns

    @property
    def done_ns(self) -> int:
        return self._conn.last_ns

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        try:
            while True:
                data = conn.take()
                if data:
                    yield data
                elif conn.done:
                    return
                else:
                    await conn.wait()
        except (OSError, TimeoutError, ProtocolError) as exc:
            _raise_mapped(exc, self._server, self._endpoint)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


def _raise_mapped(exc: BaseException, server: str, endpoint: str) -> NoReturn:
    """Raise :func:`_engine_error` of ``exc`` (``from exc`` when it is another one)."""
    mapped = _engine_error(exc, server, endpoint)
    if mapped is exc:
        raise exc
    raise mapped from exc


def _engine_error(exc: BaseException, server: str, endpoint: str) -> BaseException:
    """The :mod:`rollout_kit._errors` class for a failed exchange (others pass through)."""
    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, TimeoutError):
        return EngineTimeoutError(f"{server} {endpoint}: no complete answer within the timeout",
                                  server=server, endpoint=endpoint)
    if isinstance(exc, ProtocolError):
        return EngineConnectionError(f"{server} {endpoint}: the answer is not HTTP/1.1 this "
                                     f"client reads ({exc})", server=server, endpoint=endpoint)
    if isinstance(exc, OSError):
        return EngineConnectionError(
            f"{server} {endpoint}: connection failed ({type(exc).__name__}: "
            f"{truncate(str(exc), 200)})", server=server, endpoint=endpoint)
    return exc


def _wake_one(pool: _Pool) -> None:
    """Let the first waiting request in (a connection is free)."""
    waiters = pool.waiters
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)
            return


def _close_elsewhere(pool: _Pool) -> None:
    """Close a pool made on another loop: there when it still runs, else drop its sockets."""
    loop = pool.loop
    if loop.is_running() and not loop.is_closed():
        loop.call_soon_threadsafe(pool.close_all)
    elif not loop.is_closed():
        pool.close_all()
