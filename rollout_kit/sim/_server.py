"""Simulated servers: ``SimServer`` (one aiohttp app on one port), ``SimCluster``, ``serve``.

``serve`` starts ``n`` servers on 127.0.0.1 (free ports unless ``ports`` is given) on the
running loop; ``serve_in_thread`` does the same on a background thread for plain scripts.
``SimServer.stop`` closes the listening socket and drops in-flight connections;
``SimServer.start`` reopens it on the *same* port (weight version and fault plan survive,
queues, metrics and the prefix cache start fresh, as after a process restart).

Both flavours also serve the admin routes ``GET /sim/state`` and ``POST /sim/faults``
(body: ``FaultPlan`` settings, plus optional ``"force": {"kind", "count", "status"}`` and
``"clear": true``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from aiohttp import web

from .._errors import ConfigError, ControllerStateError
from ._config import ApiName, SimConfig
from ._context import ServerContext
from ._faults import FaultPlan
from ._http_util import CTX_KEY, BadBody, json_response, read_json
from ._otlp import SpanExporter
from ._sglang import add_sglang_routes
from ._state import SimEngine
from ._tokenizer import load_tokenizer
from ._vllm import add_vllm_routes

T = TypeVar("T")


class SimServer:
    """One simulated SGLang or vLLM server.

    Attributes:
        api: ``"sglang"`` or ``"vllm"``.
        config: its configuration.
        faults: the live fault plan (mutate it, or call ``set_faults``).
        host: the bound host.

    ``replica`` is the server's index in its cluster (``serve`` numbers them): servers with one
    seed give the same greedy and seeded outputs, but different unseeded samples.
    """

    def __init__(self, api: ApiName = "sglang", config: SimConfig | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, replica: int = 0) -> None:
        if api not in ("sglang", "vllm"):
            raise ConfigError(f"api must be 'sglang' or 'vllm', got {api!r}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < 65536:
            raise ConfigError(f"port must be an int in [0, 65535], got {port!r}")
        self.api: ApiName = api
        self.config = config if config is not None else SimConfig()
        self.host = host
        self.faults = self.config.faults.copy() if self.config.faults else FaultPlan()
        self.tokenizer = load_tokenizer(self.config.tokenizer)
        self._port = port
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replica = replica
        self.engine = SimEngine(self.config, self.tokenizer, replica=replica)
        self._ctx: ServerContext | None = None
        self._spans: SpanExporter | None = None

    # -- addresses ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The listening port (0 before the first start with port 0)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self._port}"

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.address}"

    @property
    def running(self) -> bool:
        """Whether the listening socket is open."""
        return self._runner is not None

    @property
    def weight_version(self) -> int:
        """How many weight updates this server has applied."""
        return self.engine.weight_version

    @property
    def weight_label(self) -> str:
        """The ``weight_version`` string reported to clients (``"default"`` at first)."""
        return self.engine.weight_label

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the listening socket (the same port as before after a ``stop``).

        Raises:
            ControllerStateError: already running.
            OSError: the port is taken.
        """
        if self._runner is not None:
            raise ControllerStateError(f"simulated server {self.address} is already running")
        loop = asyncio.get_running_loop()
        old = self.engine
        if self._loop is not None:
            self.engine = SimEngine(self.config, self.tokenizer, replica=self._replica,
                                    draws=old.draws)
            self.engine.weight_version = old.weight_version
            self.engine.weight_label = old.weight_label
        self.engine.bind(loop)
        self._loop = loop
        endpoint = self.config.otlp_traces_endpoint
        if endpoint is not None:
            exporter = SpanExporter(endpoint, service=f"sim-{self.api}",
                                    model=self.config.model_name)
            exporter.start()
            self.engine.span_sink = exporter.add
            self._spans = exporter
        ctx = ServerContext(api=self.api, config=self.config, engine=self.engine,
                            faults=self.faults, tokenizer=self.tokenizer, host=self.host)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app[CTX_KEY] = ctx
        if self.api == "sglang":
            add_sglang_routes(app)
        else:
            add_vllm_routes(app)
        app.router.add_get("/sim/state", self._state_route)
        app.router.add_post("/sim/faults", self._faults_route)
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               handler_cancellation=True, shutdown_timeout=0.0)
        await runner.setup()
        # backlog as uvicorn (vLLM, SGLang): a burst of new connections is not refused
        site = web.TCPSite(runner, self.host, self._port, reuse_address=True, backlog=2048)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        sock = runner.addresses[0]
        self._port = int(sock[1])
        ctx.port = self._port
        self._ctx = ctx
        self._runner = runner

    async def stop(self) -> None:
        """Close the listening socket and drop in-flight requests (no-op when stopped)."""
        runner = self._runner
        if runner is None:
            return
        self._runner = None
        server = runner.server
        if server is not None:  # drop every open connection, as a dying process would
            for conn in list(server.connections):
                tr = conn.transport
                conn.force_close()
                if tr is not None:
                    tr.abort()
        await runner.cleanup()
        self.engine.close()
        if self._spans is not None:
            await self._spans.close()
            self._spans = None

    async def restart(self, downtime: float = 0.0) -> None:
        """``stop``, wait ``downtime`` seconds, ``start`` on the same port."""
        await self.stop()
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self.start()

    def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        loop = self._loop
        if loop is None or not loop.is_running():
            raise ControllerStateError("the server's event loop is not running")
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            raise ControllerStateError("use `await server.start()/stop()` on the server's loop")

        async def _wrap() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(_wrap(), loop).result(timeout=60)

    def start_threadsafe(self) -> None:
        """``start`` from another thread (servers made by ``serve_in_thread``)."""
        self._call(self.start)

    def stop_threadsafe(self) -> None:
        """``stop`` from another thread (servers made by ``serve_in_thread``)."""
        self._call(self.stop)

    # -- faults and state ---------------------------------------------------------------------
    def set_faults(self, *, force: dict[str, Any] | None = None, clear: bool = False,
                   **settings: Any) -> FaultPlan:
        """Change the fault plan at run time.

        Args:
            force: ``{"kind": ..., "count": 1, "status": None}``: force the next requests.
            clear: drop every fault first.
            **settings: ``FaultPlan`` settings (``error_rate=0.5``, ``hang_rate=...``, …).

        Returns:
            The live plan.

        Raises:
            ConfigError: unknown setting, bad value or fault kind.
        """
        if clear:
            self.faults.clear()
        if settings:
            self.faults.update(**settings)
        if force:
            unknown = set(force) - {"kind", "count", "status"}
            if unknown:
                raise ConfigError(f"unknown force key(s): {sorted(unknown)}")
            self.faults.force(force.get("kind"), force.get("count", 1),  # type: ignore[arg-type]
                              status=force.get("status"))
        return self.faults

    def state(self) -> dict[str, Any]:
        """A JSON-friendly snapshot (``GET /sim/state``)."""
        e = self.engine
        cfg = self.config
        return {
            "api": self.api, "url": self.url, "running": e.running, "waiting": e.num_waiting,
            "paused": e.paused, "pause_mode": e.pause_mode, "frozen": e.frozen,
            "weight_version": e.weight_version, "weight_label": e.weight_label,
            "faults": self.faults.to_dict(),
            "config": {"model_name": cfg.model_name, "context_length": cfg.context_length,
                       "max_num_seqs": cfg.max_num_seqs, "max_waiting": cfg.max_waiting,
                       "time_scale": cfg.time_scale, "zero_latency": cfg.zero_latency,
                       "seed": cfg.seed},
            "metrics": {"num_requests": e.metrics.num_requests,
                        "generation_tokens": e.metrics.generation_tokens,
                        "prompt_tokens": e.metrics.prompt_tokens,
                        "aborted": e.metrics.finished.abort},
        }

    async def _state_route(self, _: web.Request) -> web.Response:
        return json_response(self.state())

    async def _faults_route(self, request: web.Request) -> web.Response:
        try:
            body = await read_json(request) if request.can_read_body else {}
        except BadBody as exc:
            return json_response({"error": str(exc)}, 400)
        if not isinstance(body, dict):
            return json_response({"error": "expected a JSON object"}, 400)
        body = dict(body)
        force = body.pop("force", None)
        clear = bool(body.pop("clear", False))
        try:
            if force is not None and not isinstance(force, dict):
                raise ConfigError("force must be an object")
            self.set_faults(force=force, clear=clear, **body)
        except (ConfigError, TypeError) as exc:
            return json_response({"error": str(exc)}, 400)
        return json_response(self.faults.to_dict())

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"SimServer(api={self.api!r}, url={self.url!r}, {state})"


class SimCluster:
    """The servers started by ``serve``.

    Attributes:
        servers: the ``SimServer`` objects.
    """

    def __init__(self, servers: Sequence[SimServer]) -> None:
        self.servers: list[SimServer] = list(servers)

    @property
    def urls(self) -> list[str]:
        """``http://127.0.0.1:PORT`` per server."""
        return [s.url for s in self.servers]

    @property
    def addresses(self) -> list[str]:
        """``127.0.0.1:PORT`` per server."""
        return [s.address for s in self.servers]

    @property
    def url(self) -> str:
        """The first server's URL."""
        return self.servers[0].url

    def __len__(self) -> int:
        return len(self.servers)

    def __getitem__(self, i: int) -> SimServer:
        return self.servers[i]

    def __iter__(self) -> Iterator[SimServer]:
        return iter(self.servers)

    def set_faults(self, **kw: Any) -> None:
        """``set_faults`` on every server."""
        for s in self.servers:
            s.set_faults(**kw)

    def __repr__(self) -> str:
        return f"SimCluster({self.urls!r})"


def _build_config(config: SimConfig | None, overrides: dict[str, Any]) -> SimConfig:
    base = config if config is not None else SimConfig()
    if not isinstance(base, SimConfig):
        raise ConfigError(f"config must be a SimConfig, got {type(base).__name__}")
    return base.replace(**overrides) if overrides else base


@asynccontextmanager
async def serve(api: ApiName = "sglang", n: int = 1, *, config: SimConfig | None = None,
                host: str = "127.0.0.1", ports: Sequence[int] | None = None,
                **overrides: Any) -> AsyncIterator[SimCluster]:
    """Run ``n`` simulated servers on the running loop.

    Args:
        api: ``"sglang"`` or ``"vllm"``.
        n: how many servers.
        config: base configuration (default ``SimConfig()``).
        host: bind address (loopback by default).
        ports: one port per server (default: free ports).
        **overrides: ``SimConfig`` fields, e.g. ``zero_latency=True``.

    Yields:
        The running ``SimCluster``; every server is stopped on exit.

    Raises:
        ConfigError: bad ``api``, ``n``, ``ports`` or config field.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"n must be an int >= 1, got {n!r}")
    if ports is not None and len(ports) != n:
        raise ConfigError(f"ports must have {n} entries, got {len(ports)}")
    cfg = _build_config(config, overrides)
    servers = []
    for i in range(n):
        c = cfg
        if cfg.faults is not None and i:
            c = cfg.replace(faults=cfg.faults.copy())
            c.faults.update(seed=cfg.faults.seed + i)  # type: ignore[union-attr]
        servers.append(SimServer(api, c, host=host, port=ports[i] if ports else 0,
                                 replica=i))
    started: list[SimServer] = []
    try:
        for s in servers:
            await s.start()
            started.append(s)
        yield SimCluster(servers)
    finally:
        await asyncio.gather(*(s.stop() for s in started), return_exceptions=True)


@contextmanager
def serve_in_thread(api: ApiName = "sglang", n: int = 1, *, config: SimConfig | None = None,
                    host: str = "127.0.0.1", ports: Sequence[int] | None = None,
                    **overrides: Any) -> Iterator[SimCluster]:
    """Like ``serve``, with the servers on a background thread and loop (for scripts).

    Use ``SimServer.start_threadsafe`` / ``stop_threadsafe`` to restart them from the
    calling thread.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="rollout-kit-sim", daemon=True)
    thread.start()
    cm = serve(api, n, config=config, host=host, ports=ports, **overrides)
    try:
        cluster = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result(timeout=60)
        try:
            yield cluster
        finally:
            asyncio.run_coroutine_threadsafe(
                cm.__aexit__(None, None, None), loop).result(timeout=60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
