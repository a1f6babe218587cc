"""Helpers for the engine tests: engines over simulated servers on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from rollout_kit import GenerationConfig, ModelRequest, Timeouts
from rollout_kit.engines import RemoteInfEngine
from rollout_kit.engines import make_engine as make_flavour_engine
from rollout_kit.sim import ByteTokenizer
from rollout_kit.testing import fast_engine_config

FAST_TIMEOUTS = Timeouts(request=5.0, total=20.0, setup=5.0, health=1.0)
#: what the engine tests send: byte-tokenized prompts, a sim answer of a fixed text
TOK = ByteTokenizer()
FLAVOURS = ["sglang", "vllm"]


def answer(text: str) -> Any:
    return lambda _prompt: text


def req(prompt: str = "What is 2+2?", **g: Any) -> ModelRequest:
    return ModelRequest(input_ids=TOK.encode(prompt), gconfig=GenerationConfig(**g))


def make_engine(flavour: str, addresses: Any, **config: Any) -> RemoteInfEngine:
    """An engine of ``flavour`` with fast retries and timeouts unless overridden."""
    config.setdefault("timeouts", FAST_TIMEOUTS)
    return make_flavour_engine(flavour, addresses, config=fast_engine_config(**config))


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """A module with some attributes replaced (``monkeypatch.setattr(mod, "time", Proxy(time,
    monotonic=...))``)."""

    def __init__(self, module: Any, **over: Any) -> None:
        self._module = module
        self._over = over

    def __getattr__(self, name: str) -> Any:
        return self._over[name] if name in self._over else getattr(self._module, name)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def server() -> AsyncIterator[Callable[[str, Handler], Awaitable[str]]]:
    """``await server(path, handler)`` -> ``host:port`` of an aiohttp app on 127.0.0.1 (for
    what the simulator does not do: bodies that break the API, failing control calls)."""
    app = web.Application()
    routes: dict[str, Handler] = {}
    seen: list[web.Request] = []

    async def dispatch(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        if request.path not in routes:
            return web.Response(status=404, text="no such route")
        return await routes[request.path](request)

    app.router.add_route("*", "/{tail:.*}", dispatch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]

    async def add(path: str, handler: Handler) -> str:
        routes[path] = handler
        return f"127.0.0.1:{port}"

    add.seen = seen  # type: ignore[attr-defined]
    yield add
    await runner.cleanup()
