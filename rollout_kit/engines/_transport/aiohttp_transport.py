"""The aiohttp transport: one ``aiohttp.ClientSession`` per event loop.

The one place on the client side that imports aiohttp. Choose it with
``EngineConfig(transport="aiohttp")`` where aiohttp's own features matter (its connector's
DNS cache, its handling of unusual servers); :class:`~.loop.LoopTransport` is the default.
The session is created lazily on the loop that uses it, with a connector sized for
thousands of concurrent requests (aiohttp's default limit of 100 throttles time to first
token). :func:`aiohttp_error` is the single mapping of aiohttp exceptions to
:mod:`rollout_kit._errors` classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping

import aiohttp

from ..._errors import (
    EngineConnectionError,
    EngineError,
    EngineTimeoutError,
    EngineUnreachableError,
    truncate,
)
from .base import Reply, Stream, Transport, base_url

#: what :func:`aiohttp_error` translates (``aiohttp.ServerTimeoutError`` is both)
AIOHTTP_ERRORS = (TimeoutError, aiohttp.ClientError)


def aiohttp_error(exc: TimeoutError | aiohttp.ClientError, server: str,
                  endpoint: str) -> EngineError:
    """The :mod:`rollout_kit._errors` class for an aiohttp or timeout exception.

    Raise the result ``from exc`` so that the original stays the ``__cause__``.
    """
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return EngineTimeoutError(f"{server} {endpoint}: no complete answer within the timeout",
                                  server=server, endpoint=endpoint)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return EngineUnreachableError(f"cannot connect to {server} ({endpoint}): "
                                      f"{exc.os_error or exc}", server=server,
                                      endpoint=endpoint)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return EngineConnectionError(
            f"{server} {endpoint}: the response body was cut off ({type(exc).__name__})",
            server=server, endpoint=endpoint)
    return EngineConnectionError(
        f"{server} {endpoint}: connection failed ({type(exc).__name__}: "
        f"{truncate(str(exc), 200)})", server=server, endpoint=endpoint)


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


class AiohttpTransport(Transport):
    """HTTP through aiohttp (see the module docstring).

    Args:
        max_connections: open connections at most (``0``: unlimited).
        connect_timeout: seconds to open one connection.
        read_bufsize: aiohttp's read buffer per response.
    """

    def __init__(self, *, max_connections: int = 0, connect_timeout: float = 10.0,
                 read_bufsize: int = 4 * 1024 * 1024) -> None:
        self._limit = max_connections
        self._connect_timeout = connect_timeout
        self._read_bufsize = read_bufsize
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stale: list[tuple[aiohttp.ClientSession, asyncio.AbstractEventLoop]] = []
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._in_use = 0

    def __repr__(self) -> str:
        return f"AiohttpTransport(max_connections={self._limit})"

    @property
    def connections_in_use(self) -> int:
        return self._in_use  # the exchanges between their start and their end

    def _current(self) -> aiohttp.ClientSession:
        """The session of the running loop, created on first use on that loop."""
        loop = asyncio.get_running_loop()
        s = self._session
        if s is not None and self._loop is loop and not s.closed:
            return s
        if s is not None and self._loop is not None and not s.closed:
            self._stale.append((s, self._loop))  # made on another loop: never reused here
        connector = aiohttp.TCPConnector(
            limit=self._limit, limit_per_host=0, keepalive_timeout=75.0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(connector=connector,
                                              read_bufsize=self._read_bufsize)
        self._loop = loop
        return self._session

    async def close_async(self) -> None:
        current = asyncio.get_running_loop()
        sessions = list(self._stale)
        if self._session is not None and self._loop is not None:
            sessions.append((self._session, self._loop))
        self._session, self._loop, self._stale = None, None, []
        for s, owner in sessions:
            if s.closed:
                continue
            if owner is current:
                await s.close()
            elif owner.is_running() and not owner.is_closed():
                asyncio.run_coroutine_threadsafe(s.close(), owner)
            else:
                s.detach()  # its loop is gone; the sockets went with it

    def _timeout(self, timeout: float) -> aiohttp.ClientTimeout:
        t = self._timeouts.get(timeout)
        if t is None:
            t = aiohttp.ClientTimeout(total=timeout, sock_connect=self._connect_timeout)
            if len(self._timeouts) < 64:
                self._timeouts[timeout] = t
        return t

    async def request(self, method: str, server: str, target: str, *, body: bytes | None,
                      headers: Mapping[str, str], timeout: float) -> Reply:
        self._in_use += 1
        try:
            sent = time.perf_counter_ns()  # aiohttp does not say when it wrote: about now
            async with self._current().request(method, base_url(server) + target, data=body,
                                               headers=headers,
                                               timeout=self._timeout(timeout)) as resp:
                data = await resp.read()
                return Reply(resp.status, _lower(resp.headers) if resp.status >= 400 else {},
                             data, sent, time.perf_counter_ns())
        except AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc, server, target.split("?", 1)[0]) from exc
        finally:
            self._in_use -= 1

    @contextlib.asynccontextmanager
    async def stream(self, method: str, server: str, target: str, *, body: bytes | None,
                     headers: Mapping[str, str], timeout: float) -> AsyncIterator[Stream]:
        endpoint = target.split("?", 1)[0]
        self._in_use += 1
        try:
            sent = time.perf_counter_ns()  # aiohttp does not say when it wrote: about now
            async with self._current().request(method, base_url(server) + target, data=body,
                                               headers=headers,
                                               timeout=self._timeout(timeout)) as resp:
                yield _AiohttpStream(resp, server, endpoint, sent)
        except EngineError:
            raise
        except AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc, server, endpoint) from exc
        finally:
            self._in_use -= 1


class _AiohttpStream(Stream):
    def __init__(self, resp: aiohttp.ClientResponse, server: str, endpoint: str,
                 sent_ns: int) -> None:
        self._resp = resp
        self._server = server
        self._endpoint = endpoint
        self.status = resp.status
        self.headers = _lower(resp.headers) if resp.status >= 400 else {}
        self._sent = sent_ns
        self._last = sent_ns

    @property
    def sent_ns(self) -> int:
        return self._sent

    @property
    def done_ns(self) -> int:
        return self._last

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                self._last = time.perf_counter_ns()
                yield chunk
        except AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc, self._server, self._endpoint) from exc

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc, self._server, self._endpoint) from exc
