"""``AgentEndpoint``: the agent client behind an OpenAI-compatible endpoint on 127.0.0.1.

For agents in another process, or SDKs that only take a ``base_url``: each task's client is
bound to a key of its own (:meth:`AgentEndpoint.bind`; :class:`~._workflow.AgentWorkflow`
does it when given ``endpoint=``, and the agent reads ``client.base_url`` /
``client.api_key``). A call with that key as its bearer token runs as the client's call —
one traced session of its task; an unknown or expired key is answered 401 and nothing is
recorded. It listens on loopback only; keys are random, never logged, and end with their
task.

Usage::

    async with AgentEndpoint() as ep:
        wf = AgentWorkflow(agent, reward, endpoint=ep)   # agent uses client.base_url/api_key
        await ctl.rollout_batch_async(data, wf)
"""

from __future__ import annotations

import logging
import secrets
from types import TracebackType
from typing import TYPE_CHECKING, Self

import orjson
from aiohttp import web

from .._errors import AgentClosedError, AgentError, ConfigError, EngineError, TurnTimeoutError
from ._client import completion_chunks

if TYPE_CHECKING:
    from ._client import AgentClient

logger = logging.getLogger("rollout_kit.agents")

_LOOPBACK = ("127.0.0.1", "::1")
_JSON = "application/json"


def _error(status: int, message: str, kind: str, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body), content_type=_JSON)


class AgentEndpoint:
    """An OpenAI-compatible ``/v1/chat/completions`` (and ``/v1/models``) on the loop.

    Args:
        host: a loopback address (``127.0.0.1`` or ``::1``); anything else is refused.
        port: the port (0: a free one).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in _LOOPBACK:
            raise ConfigError(f"AgentEndpoint listens on loopback only (127.0.0.1 or ::1), "
                              f"got {host!r}")
        self.host = host
        self.port = port
        self._keys: dict[str, AgentClient] = {}
        self._runner: web.AppRunner | None = None

    def __repr__(self) -> str:
        state = "serving" if self._runner is not None else "stopped"
        return f"AgentEndpoint({self.url!r}, {state}, bound={len(self._keys)})"

    @property
    def url(self) -> str:
        """The ``base_url`` to give an OpenAI client (``http://127.0.0.1:PORT/v1``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    # -- keys ------------------------------------------------------------------------------

    def bind(self, client: AgentClient) -> str:
        """A new key whose calls run as ``client``'s (until :meth:`unbind`)."""
        key = f"rk-{secrets.token_urlsafe(24)}"
        self._keys[key] = client
        client.base_url, client.api_key = self.url, key
        return key

    def unbind(self, key: str) -> None:
        """Forget ``key``: its later calls are answered 401."""
        self._keys.pop(key, None)

    # -- lifecycle -------------------------------------------------------------------------

    async def start_async(self) -> Self:
        """Listen (on the running loop)."""
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               handler_cancellation=True, shutdown_timeout=0.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, backlog=2048).start()
        except BaseException:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        self._runner = runner
        return self

    async def close_async(self) -> None:
        """Stop listening; every key is forgotten."""
        runner, self._runner = self._runner, None
        self._keys.clear()
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start_async()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close_async()

    # -- handlers --------------------------------------------------------------------------

    def _client_of(self, request: web.Request) -> AgentClient | None:
        auth = request.headers.get("Authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        return self._keys.get(key)

    async def _models(self, request: web.Request) -> web.Response:
        if self._client_of(request) is None:
            return _error(401, "unknown API key", "invalid_request_error", "invalid_api_key")
        body = {"object": "list", "data": [{"id": "rollout-kit", "object": "model",
                                            "created": 0, "owned_by": "rollout-kit"}]}
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        client = self._client_of(request)
        if client is None:
            return _error(401, "unknown API key", "invalid_request_error", "invalid_api_key")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "the body is not JSON", "invalid_request_error")
        if not isinstance(body, dict) or "messages" not in body:
            return _error(400, "the body must be a JSON object with 'messages'",
                          "invalid_request_error")
        messages = body.pop("messages")
        stream = bool(body.pop("stream", False))
        try:
            done = await client.complete_json_async(messages, **body)
        except AgentClosedError as exc:
            return _error(401, str(exc), "invalid_request_error", "invalid_api_key")
        except TurnTimeoutError as exc:
            return _error(504, str(exc), "timeout")
        except ConfigError as exc:
            return _error(400, str(exc), "invalid_request_error")
        except (EngineError, AgentError) as exc:
            return _error(502, str(exc), "server_error")
        if not stream:
            return web.Response(body=orjson.dumps(done), content_type=_JSON)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = b"".join(b"data: " + orjson.dumps(c) + b"\n\n"
                          for c in completion_chunks(done, usage))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(events + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
