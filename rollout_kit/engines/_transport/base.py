"""What the engines' HTTP client needs from a transport: one request, one stream, close.

A transport moves bytes: it opens and pools connections, writes a request and reads the
status, headers and body of the answer. It knows nothing of JSON, retries, servers'
flavours or the engine that holds it (as an httpx client is given its transport). Failures
are raised as :mod:`rollout_kit._errors` classes, always with ``server`` and ``endpoint``:

* :class:`~rollout_kit.EngineUnreachableError`: the connection could not be opened;
* :class:`~rollout_kit.EngineTimeoutError`: no complete answer within the timeout;
* :class:`~rollout_kit.EngineConnectionError`: the connection failed or the answer
  was cut off or not HTTP.

An error status is not a failure here: the caller gets the :class:`Reply` and decides.

Both a :class:`Reply` and a :class:`Stream` say when the request was written (``sent_ns``)
and when the last byte of the answer was read (``done_ns``), on ``perf_counter_ns``: what
lies between is the request's time out of the client's hands (0: not known).
"""

from __future__ import annotations

import contextlib
import functools
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass


@functools.lru_cache(maxsize=1024)  # called per request with a handful of addresses
def base_url(address: str) -> str:
    """``http://host:port`` (scheme kept when given) of an address."""
    a = address.strip().rstrip("/")
    return a if a.startswith(("http://", "https://")) else f"http://{a}"


@dataclass(slots=True)
class Reply:
    """A whole answer. ``headers`` has lower-case names; ``sent_ns`` / ``done_ns``: when the
    request was written and the answer's last byte read (``perf_counter_ns``; 0: unknown)."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    sent_ns: int = 0
    done_ns: int = 0


class Stream(ABC):
    """An answer whose body is read as it arrives (server-sent events)."""

    status: int
    headers: Mapping[str, str]  # lower-case names

    @property
    def sent_ns(self) -> int:
        """When the request was written (``perf_counter_ns``; 0: unknown)."""
        return 0

    @property
    def done_ns(self) -> int:
        """When the last byte read so far arrived (``perf_counter_ns``; 0: unknown): the
        answer's last once the body has been read to its end."""
        return 0

    @abstractmethod
    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: each item is all that came since the last one."""

    @abstractmethod
    async def read(self) -> bytes:
        """The rest of the body, whole (for an error status)."""


class Transport(ABC):
    """Sends HTTP/1.1 requests to ``host:port`` servers over pooled connections.

    One transport serves one event loop at a time; used from another loop it starts a new
    pool there. ``server`` is ``host:port`` (or ``http(s)://host:port``) and ``target`` the
    path with its query string.
    """

    @abstractmethod
    async def request(self, method: str, server: str, target: str, *, body: bytes | None,
                      headers: Mapping[str, str], timeout: float) -> Reply:
        """Send one request and read the whole answer within ``timeout`` seconds."""

    @abstractmethod
    def stream(self, method: str, server: str, target: str, *, body: bytes | None,
               headers: Mapping[str, str], timeout: float
               ) -> contextlib.AbstractAsyncContextManager[Stream]:
        """``async with transport.stream(...) as s``: the answer's head, its body to come.

        ``timeout`` bounds the whole exchange, the body included.
        """

    @abstractmethod
    async def close_async(self) -> None:
        """Close every pooled connection (those of other, still-open loops there)."""

    @property
    @abstractmethod
    def connections_in_use(self) -> int:
        """Connections of the current pool handed out to a request and not yet back."""
