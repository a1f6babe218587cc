"""``OtlpReceiver``: an OTLP/HTTP trace endpoint on 127.0.0.1, no collector binary needed.

Point a server's exporter at :attr:`OtlpReceiver.endpoint` (vLLM: ``--otlp-traces-endpoint
URL`` with ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``; the simulators:
``serve(..., otlp_traces_endpoint=URL)``) and every span it exports lands in
:meth:`OtlpReceiver.spans`. The receiver runs on a thread of its own (so a notebook cell, a
sync test and an async test can all use it while their loops come and go) and listens on
loopback only. A body that is not an OTLP export request is answered 400 and counted
(:attr:`OtlpReceiver.rejected`, :attr:`OtlpReceiver.last_error`); nothing it received is
dropped.

Usage::

    with OtlpReceiver() as rx:
        ... run requests against a server exporting to rx.endpoint ...
        rx.wait_for(n_requests, timeout=30)       # exporters send in batches
        spans = rx.spans()
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import TracebackType
from typing import Any, Self

import pandas as pd
from aiohttp import web

from .._errors import ConfigError, RolloutTimeoutError
from ._spans import SPAN_FIELDS, SpanDecodeError, decode_export_request

_PATH = "/v1/traces"


class OtlpReceiver:
    """Collects OTLP/HTTP trace exports (protobuf or JSON) on ``127.0.0.1:port``.

    Args:
        port: the port (0: a free one, see :attr:`port` once started).

    Attributes:
        rejected: how many bodies were not OTLP trace export requests.
        last_error: why the last one was rejected.
    """

    def __init__(self, *, port: int = 0) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise ConfigError(f"port must be an int in [0, 65535], got {port!r}")
        self.port = port
        self.rejected = 0
        self.last_error: str | None = None
        self._rows: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        """The URL to export to (``http://127.0.0.1:PORT/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}{_PATH}"

    def __repr__(self) -> str:
        return (f"OtlpReceiver(endpoint={self.endpoint!r}, spans={len(self)}, "
                f"rejected={self.rejected})")

    def __len__(self) -> int:
        with self._cond:
            return len(self._rows)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> Self:
        """Start listening (returns once the port is bound); idempotent."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # a bind error: reported to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="rollout-kit-otlp", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise ConfigError(f"cannot listen on 127.0.0.1:{self.port}: {failure[0]}")
        return self

    async def _open(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(_PATH, self._export)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))  # loopback only
        self.port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> None:
        """Stop listening (spans received stay readable); idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._thread = None
        self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the endpoint -------------------------------------------------------------------
    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            rows = decode_export_request(body, request.content_type)
        except SpanDecodeError as exc:
            with self._cond:
                self.rejected += 1
                self.last_error = str(exc)
            return web.json_response({"error": str(exc)}, status=400)
        with self._cond:
            self._rows.extend(rows)
            self._cond.notify_all()
        # an empty ExportTraceServiceResponse (protobuf: zero bytes; JSON: {})
        if request.content_type.startswith("application/json"):
            return web.json_response({})
        return web.Response(body=b"", content_type="application/x-protobuf")

    # -- reading ------------------------------------------------------------------------
    def spans(self) -> pd.DataFrame:
        """Every span received so far, one row each (:mod:`._spans` columns)."""
        with self._cond:
            rows = list(self._rows)
        return pd.DataFrame(rows, columns=list(SPAN_FIELDS))

    def clear(self) -> None:
        """Forget the spans received so far."""
        with self._cond:
            self._rows.clear()

    def _count(self, trace_prefix: str | None) -> int:
        if trace_prefix is None:
            return len(self._rows)
        return sum(1 for r in self._rows if str(r["trace_id"]).startswith(trace_prefix))

    def wait_for(self, count: int, timeout: float = 30.0, *,
                 trace_prefix: str | None = None) -> int:
        """Block until at least ``count`` spans have arrived — of traces starting with
        ``trace_prefix`` when given (a tracer's ``trace_prefix``: its tasks' spans only,
        not a server's start-up spans) — and return how many there are.

        Raises:
            RolloutTimeoutError: fewer arrived within ``timeout`` seconds (the message says
                how many, and the last rejected body's error if any).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while (n := self._count(trace_prefix)) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RolloutTimeoutError(
                        f"{n} of {count} spans arrived at {self.endpoint} within {timeout} s "
                        f"(rejected bodies: {self.rejected}"
                        f"{', last: ' + self.last_error if self.last_error else ''})")
                self._cond.wait(left)
            return n

    async def wait_for_async(self, count: int, timeout: float = 30.0, *,
                             trace_prefix: str | None = None) -> int:
        """:meth:`wait_for` without blocking the running loop."""
        return await asyncio.to_thread(self.wait_for, count, timeout,
                                       trace_prefix=trace_prefix)
