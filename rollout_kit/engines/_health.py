"""``ServerHealth``: which of an engine's servers answer their health endpoint.

At start an engine waits (up to ``Timeouts.setup``) until its servers are healthy; servers
still down then leave the rotation and a background probe brings them back when they answer
again. The router (:mod:`._routing`) holds the rotation; this module only decides.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .._config import EngineConfig
from .._errors import EngineError, EngineUnreachableError, NoHealthyServerError, truncate
from ._backend import Backend
from ._http import HttpClient
from ._routing import Router

logger = logging.getLogger("rollout_kit.engines")

_MAX_POLL_S = 1.0


class ServerHealth:
    """Health checks of one engine's servers over its HTTP client and router."""

    def __init__(self, http: HttpClient, router: Router, backend: Backend,
                 config: EngineConfig) -> None:
        self._http = http
        self._router = router
        self._backend = backend
        self._config = config

    async def check(self, server: str, timeout: float) -> str | None:
        """``None`` when ``server`` answers its health endpoint, else the reason."""
        err = await self._probe(server, timeout)
        return None if err is None else str(err)

    async def _probe(self, server: str, timeout: float) -> EngineError | None:
        try:
            await self._http.request(server, "GET", self._backend.health_endpoint,
                                     timeout=max(timeout, 1e-3))
        except EngineError as exc:
            return exc
        return None

    async def wait_until_healthy(self, name: str) -> None:
        """Poll until every server is healthy, or ``Timeouts.setup`` passes for servers that
        answer, or ``Timeouts.refused`` for servers that refuse every connection (nobody
        listens there: no reason to wait a minute).

        Servers still down then leave the rotation (and are logged).

        Raises:
            NoHealthyServerError: no server became healthy; names each address and its
                last error.
        """
        servers = self._router.servers
        timeouts = self._config.timeouts
        start = time.monotonic()
        deadline = start + timeouts.setup
        pending = list(servers)
        errors: dict[str, str] = {}
        answered: set[str] = set()  # servers that accepted a connection at least once
        delay = 0.05
        while True:
            remaining = deadline - time.monotonic()
            results = await asyncio.gather(*(
                self._probe(s, min(timeouts.health, remaining)) for s in pending))
            for s, err in zip(pending, results, strict=True):
                if err is not None:
                    errors[s] = str(err)
                if not isinstance(err, EngineUnreachableError):
                    answered.add(s)
            pending = [s for s, err in zip(pending, results, strict=True) if err is not None]
            now = time.monotonic()
            if now - start >= timeouts.refused:
                pending = [s for s in pending if s in answered]  # the refusing ones are out
            remaining = deadline - now
            if not pending or remaining <= 0:
                break
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_POLL_S)
        endpoint = self._backend.health_endpoint
        down = [s for s in servers if s in errors and (s in pending or s not in answered)]
        if len(down) == len(servers):
            detail = "; ".join(f"{s}: {truncate(errors.get(s, '?'), 200)}" for s in down)
            waited = (f"refused connections for {timeouts.refused:g}s (Timeouts.refused)"
                      if not answered else f"within {timeouts.setup:g}s (Timeouts.setup)")
            raise NoHealthyServerError(
                f"no server of {name} answered {endpoint}: {waited}. Unreachable: {detail}",
                servers=down, endpoint=endpoint)
        pending = down
        for s in pending:
            logger.warning("server %s did not become healthy: %s", s, errors.get(s))
            self._router.mark_down(s)

    async def probe_forever(self) -> None:
        """Every ``health_probe_interval``, put servers that answer again back in rotation."""
        interval = self._config.health_probe_interval
        while True:
            await asyncio.sleep(interval)
            down = self._router.down
            if not down:
                continue
            results = await asyncio.gather(*(
                self.check(s, self._config.timeouts.health) for s in down))
            for s, err in zip(down, results, strict=True):
                if err is None:
                    self._router.mark_up(s)
