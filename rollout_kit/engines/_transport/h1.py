"""One HTTP/1.1 client connection: an ``asyncio.Protocol`` that parses answers as they come.

Written by hand because it is the hottest code of a load run: every streamed token is one
network read, and this parser turns a read into body bytes with a few slices (aiohttp
spends about ten Python calls per read across its protocol, parser and stream reader).
It reads what inference servers send — ``Content-Length`` bodies, ``chunked`` bodies
(server-sent events), bodies ended by the close, ``1xx`` heads skipped — and refuses
anything else with :class:`ProtocolError`.

A connection carries one exchange at a time (no pipelining). The reader takes body bytes
with :meth:`Connection.take` and waits with :meth:`Connection.wait`; the timeout of an
exchange is a timer on the connection that fails it (no task is cancelled).
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
from typing import Final, cast

MAX_HEAD: Final = 64 * 1024
_HIGH_WATER: Final = 1024 * 1024  # buffered body bytes above which reading pauses

_HEX: Final = b"0123456789abcdefABCDEF"

# body framings
_NONE, _LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2, 3


def _is_decimal(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes other scripts' digits, ``int`` takes +-_)."""
    return text.isascii() and text.isdigit()


class ProtocolError(Exception):
    """The bytes from the server are not an HTTP/1.1 answer this client can read."""


class Connection(asyncio.Protocol):
    """An HTTP/1.1 connection to one server (see the module docstring)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.error: BaseException | None = None  # why the exchange or connection failed
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.done = False  # the whole answer is in
        self.keep_alive = True
        self.received = False  # any byte of the current answer arrived
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # of the current exchange
        self._body: list[bytes] = []
        self._size = 0  # bytes in _body
        self._paused = False
        self._head_only = False
        self._pending = b""  # bytes not parsed yet
        self._framing = _NONE
        self._left = 0  # body bytes to come (length) or of the current chunk (chunked)
        self._crlf = False  # the CRLF after a chunk's data is due
        self._trailers = False  # between the last chunk and the end of the trailers
        self._timer: asyncio.TimerHandle | None = None
        self.sent_ns = 0  # perf_counter_ns when the current request was written
        self.last_ns = 0  # perf_counter_ns when the last bytes of its answer arrived

    # -- the exchange ------------------------------------------------------------------

    def begin(self, data: bytes, *, head_only: bool, deadline: float,
              loop: asyncio.AbstractEventLoop) -> None:
        """Write a request and get ready for its answer, which must end by ``deadline``."""
        self.error = None
        self.status, self.headers = 0, {}
        self.head_done = self.done = self.received = False
        self._body, self._size = [], 0
        self._pending, self._framing, self._left = b"", _NONE, 0
        self._crlf = self._trailers = False
        self._head_only = head_only
        self._loop = loop
        self._timer = loop.call_at(deadline, self._expire)
        if not self.usable:
            self._fail(ConnectionResetError("the connection closed before the request"))
            return
        assert self.transport is not None
        self.transport.write(data)
        self.sent_ns = self.last_ns = perf_counter_ns()

    @property
    def usable(self) -> bool:
        """Open, and not closing: it can carry an exchange."""
        t = self.transport
        return not self.closed and t is not None and not t.is_closing()

    def end(self) -> bool:
        """Finish the exchange; whether the connection can carry another one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        reusable = (self.done and self.keep_alive and not self.closed and self.error is None
                    and not self._pending)
        if not reusable:
            self.abort()
        elif self._paused and self.transport is not None:  # an unread body filled the buffer
            self._paused = False
            self.transport.resume_reading()
        return reusable

    def abort(self) -> None:
        """Drop the connection now (its exchange, if any, fails)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def wait(self) -> None:
        """Until something new arrived: head, body bytes, the end, or a failure."""
        if self.error is not None:
            raise self.error
        loop = self._loop  # (asyncio.get_running_loop() costs ~0.3 us in CPython 3.11)
        fut = (loop if loop is not None else asyncio.get_running_loop()).create_future()
        self._waiter = fut
        try:
            await fut
        finally:
            self._waiter = None
        if self.error is not None:
            raise self.error

    def take(self) -> bytes:
        """The body bytes that arrived since the last call (``b""`` when none)."""
        body = self._body
        if not body:
            return b""
        self._body, self._size = [], 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return body[0] if len(body) == 1 else b"".join(body)

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self.error is None and not self.done:
            self.error = exc
        self.abort()
        self._wake()

    def _expire(self) -> None:
        self._timer = None
        self._fail(TimeoutError())

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the methods but do not derive from asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if (self._framing == _UNTIL_CLOSE and self.head_done and not self.done
                and exc is None):  # a clean close ends this body; a reset cuts it off
            self.done = True  # the close ends this body
            self.keep_alive = False
            self._wake()
            return
        if not self.done:
            self._fail(exc if exc is not None else ConnectionResetError(
                "the server closed the connection" + (
                    " in the middle of the answer" if self.received else
                    " before answering")))

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost decides what the close meant

    def data_received(self, data: bytes) -> None:
        self.received = True
        self.last_ns = perf_counter_ns()
        try:
            if self.head_done:
                self._feed_body(self._pending + data if self._pending else data)
            else:
                self._feed_head(self._pending + data if self._pending else data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        if self._size > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    # -- parsing -----------------------------------------------------------------------

    def _feed_head(self, data: bytes) -> None:
        end = data.find(b"\r\n\r\n")
        if end < 0 or end > MAX_HEAD:
            if len(data) > MAX_HEAD:
                raise ProtocolError(f"the answer's head is longer than {MAX_HEAD} bytes")
            self._pending = data
            return
        self._pending = b""
        lines = data[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if (len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3
                or not _is_decimal(parts[1])):
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"a header line without ':': {line[:80]!r}")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        rest = data[end + 4:]
        if 100 <= status < 200:  # an interim head (100 Continue): the real one follows
            if rest:
                self._feed_head(rest)
            return
        self.status, self.headers = status, headers
        conn = headers.get("connection", "").lower()
        self.keep_alive = ("close" not in conn if parts[0] == "HTTP/1.1"
                           else "keep-alive" in conn)
        self.head_done = True
        if self._head_only or status in (204, 304):
            self._framing = _NONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = _CHUNKED
        elif "content-length" in headers:
            length = headers["content-length"]
            if not _is_decimal(length):
                raise ProtocolError(f"a Content-Length that is not a number: {length[:40]!r}")
            self._left = int(length)
            self._framing = _LENGTH
        else:
            self._framing = _UNTIL_CLOSE
            self.keep_alive = False
        if self._framing == _NONE or (self._framing == _LENGTH and self._left == 0):
            self.done = True
            if rest:
                raise ProtocolError("bytes after the end of the answer")
            return
        if rest:
            self._feed_body(rest)

    def _feed_body(self, data: bytes) -> None:
        if self.done:
            raise ProtocolError("bytes after the end of the answer")
        framing = self._framing
        if framing == _CHUNKED:
            self._feed_chunked(data)
            return
        if framing == _LENGTH:
            left = self._left
            if len(data) > left:
                raise ProtocolError("more body bytes than the Content-Length said")
            self._left = left - len(data)
            if self._left == 0:
                self.done = True
        self._body.append(data)
        self._size += len(data)

    def _feed_chunked(self, buf: bytes) -> None:
        pos, n = 0, len(buf)
        body = self._body
        while pos < n:
            if self._left:  # inside a chunk's data
                take = min(self._left, n - pos)
                body.append(buf[pos:pos + take] if pos or take != n else buf)
                self._size += take
                pos += take
                self._left -= take
                if not self._left:
                    self._crlf = True
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            if self._crlf:  # the CRLF that ends a chunk's data
                if eol != pos:
                    raise ProtocolError("a chunk longer than its size line said")
                self._crlf = False
                pos += 2
                continue
            if self._trailers:  # trailer lines, then the empty line that ends the answer
                if eol == pos:
                    self.done = True
                    if eol + 2 < n:
                        raise ProtocolError("bytes after the end of the answer")
                    self._pending = b""
                    return
                pos = eol + 2
                continue
            size_text = buf[pos:eol].split(b";", 1)[0].strip()
            if not size_text or size_text.strip(_HEX):  # int() alone takes -5, 0x5, 5_0
                raise ProtocolError(f"a bad chunk size line: {buf[pos:eol][:40]!r}")
            size = int(size_text, 16)
            pos = eol + 2
            if size:
                self._left = size
            else:
                self._trailers = True
        rest = buf[pos:] if pos < n else b""
        if len(rest) > MAX_HEAD:
            raise ProtocolError("a chunk size line or trailer longer than 64 KiB")
        self._pending = rest
