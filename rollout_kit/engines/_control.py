"""Server control of a remote engine: calls to every server, the pause, metrics, the model.

:class:`ServerControl` is held by :class:`~._remote.RemoteInfEngine` and given the engine's
HTTP client, flavour adapter, config and servers; it knows nothing of generation. Its
``paused`` flag is the engine's server-side pause, which a generation aborted by the pause
waits out in :meth:`ServerControl.wait_while_paused`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .._config import EngineConfig
from .._errors import EngineError, EngineResponseError, truncate
from ._backend import PARSE_ERRORS, Backend, ControlRequest
from ._http import HttpClient, call_with_retries
from ._prometheus import parse_prometheus

if TYPE_CHECKING:
    import pandas as pd

_MAX_PAUSE_POLL_S = 1.0


class ServerControl:
    """Control calls to a fixed set of servers (see the module docstring).

    Args:
        http: the engine's HTTP client.
        backend: the flavour adapter (its control requests and answer parsers).
        config: timeouts, retries and the pause poll interval.
        servers: every server's ``host:port``.
    """

    def __init__(self, http: HttpClient, backend: Backend, config: EngineConfig,
                 servers: tuple[str, ...]) -> None:
        self._http = http
        self._backend = backend
        self._config = config
        self._servers = servers
        self._paused = False
        self._resumed: asyncio.Event | None = None  # set when the pause is lifted

    @property
    def paused(self) -> bool:
        """Whether the engine paused generation on the servers."""
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        if not value and self._resumed is not None:
            self._resumed.set()  # the waiting generations continue at once, not at a poll
            self._resumed = None

    async def call_all(self, req: ControlRequest) -> dict[str, Any]:
        """Send ``req`` to every server concurrently (with retries); answers by server."""
        cfg = self._config

        async def one(server: str) -> Any:
            return await call_with_retries(
                lambda _i, timeout: self._http.request_json(
                    server, req.method, req.endpoint, payload=req.payload, params=req.params,
                    timeout=timeout),
                policy=cfg.retry, request_timeout=cfg.timeouts.request,
                total_timeout=cfg.timeouts.total, what=f"{req.endpoint} on {server}")

        answers = await asyncio.gather(*(one(s) for s in self._servers))
        return dict(zip(self._servers, answers, strict=True))

    async def update_weights_from_disk_async(self, path: str, version: int) -> None:
        """Ask every server to load ``path``; raise when one refused or failed."""
        req = self._backend.weights_from_disk_request(path, version)
        answers = await self.call_all(req)
        for server, body in answers.items():
            problem = self._backend.check_weights_answer(body)
            if problem is not None:
                raise EngineResponseError(f"{server} {req.endpoint} failed: {truncate(problem)}",
                                          server=server, endpoint=req.endpoint)

    async def wait_while_paused(self, server: str) -> None:
        """Until this engine's pause is lifted (woken by it, no polling) and ``server`` says
        it is not paused."""
        while self._paused:
            if self._resumed is None:
                self._resumed = asyncio.Event()
            await self._resumed.wait()
        probe = self._backend.paused_probe
        if probe is None:
            return  # SGLang holds new requests itself while paused
        delay = self._config.pause_poll_interval
        while True:
            try:
                body = await self._http.request_json(server, probe.method, probe.endpoint,
                                                     timeout=self._config.timeouts.health)
            except EngineError:
                return  # no dev mode, or the server is gone: the retry policy takes over
            if not self._backend.parse_paused(body):
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_PAUSE_POLL_S)

    async def discover_model(self, server: str) -> str:
        """The model name ``server``'s ``/v1/models`` lists (vLLM)."""
        body = await self._http.request_json(server, "GET", "/v1/models",
                                             timeout=self._config.timeouts.request,
                                             hint=self._backend.wrong_flavour_hint)
        try:
            return self._backend.model_from_models(body)
        except PARSE_ERRORS as exc:
            raise EngineResponseError(
                f"{server} /v1/models lists no model ({type(exc).__name__}); set "
                f"EngineConfig.model: {truncate(body)}", server=server,
                endpoint="/v1/models") from None

    async def metrics_async(self) -> pd.DataFrame:
        """Every server's ``/metrics`` as columns server, metric, labels, value."""
        import pandas as pd

        endpoint = self._backend.metrics_endpoint
        bodies = await asyncio.gather(*(
            self._http.request(s, "GET", endpoint, timeout=self._config.timeouts.request)
            for s in self._servers))
        rows: list[tuple[str, str, dict[str, str], float]] = []
        for server, raw in zip(self._servers, bodies, strict=True):
            try:
                samples = parse_prometheus(raw.decode("utf-8", "replace"))
            except ValueError as exc:
                raise EngineResponseError(f"{server} {endpoint}: not Prometheus text ({exc})",
                                          server=server, endpoint=endpoint) from None
            rows.extend((server, x.metric, x.labels, x.value) for x in samples)
        return pd.DataFrame(rows, columns=["server", "metric", "labels", "value"])
