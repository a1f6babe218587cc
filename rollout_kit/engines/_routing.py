"""Server choice for an engine with several addresses, and which servers are in rotation.

Policies (``EngineConfig.routing``):

* ``round_robin``: cycle through the healthy servers;
* ``least_in_flight``: the healthy server with the fewest requests this engine has in flight;
* ``sticky``: the first request of a routing key picks the least-loaded server and every
  later request with that key goes to the same one (prefix-cache reuse). The key is the
  request's ``metadata["route_key"]`` when set, else its rid up to the last
  :data:`ROUTE_KEY_SEPARATOR` (so ``"task17:0"`` and ``"task17:1"`` share ``"task17"``), else
  the whole rid. The map is a bounded LRU.

A server that cannot be reached is taken out of rotation (:meth:`Router.mark_down`); a
background probe (owned by the engine) brings it back with :meth:`Router.mark_up`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._config import RoutingPolicy
from .._errors import ConfigError, NoHealthyServerError

logger = logging.getLogger("rollout_kit.engines")

ROUTE_KEY_SEPARATOR = ":"
DEFAULT_STICKY_CAPACITY = 65536


def route_key(rid: str, metadata: Mapping[str, Any] | None = None) -> str:
    """The sticky-routing key of a request (see the module docstring)."""
    if metadata:
        key = metadata.get("route_key")
        if isinstance(key, str) and key:
            return key
    head, sep, _ = rid.rpartition(ROUTE_KEY_SEPARATOR)
    return head if sep and head else rid


class Router:
    """Chooses a server per request and tracks in-flight counts and health.

    Args:
        servers: the ``host:port`` names, in order; duplicates are an error.
        policy: ``round_robin``, ``least_in_flight`` or ``sticky``.
        sticky_capacity: how many routing keys the sticky map remembers.
    """

    def __init__(self, servers: Sequence[str], policy: RoutingPolicy = "round_robin",
                 *, sticky_capacity: int = DEFAULT_STICKY_CAPACITY) -> None:
        if not servers:
            raise ConfigError("an engine needs at least one server address")
        if len(set(servers)) != len(servers):
            raise ConfigError(f"duplicate server addresses: {list(servers)!r}")
        self.servers: tuple[str, ...] = tuple(servers)
        self.policy: RoutingPolicy = policy
        self._down: set[str] = set()
        self._in_flight: dict[str, int] = dict.fromkeys(self.servers, 0)
        self._next = 0
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._capacity = sticky_capacity

    def __repr__(self) -> str:
        return (f"Router(policy={self.policy!r}, servers={list(self.servers)!r}, "
                f"down={sorted(self._down)!r})")

    # -- health ----------------------------------------------------------------------

    @property
    def healthy(self) -> tuple[str, ...]:
        """Servers in rotation, in address order."""
        return tuple(s for s in self.servers if s not in self._down)

    @property
    def down(self) -> tuple[str, ...]:
        """Servers out of rotation, in address order."""
        return tuple(s for s in self.servers if s in self._down)

    def mark_down(self, server: str) -> None:
        """Take ``server`` out of rotation until :meth:`mark_up`."""
        if server in self._in_flight and server not in self._down:
            logger.warning("server %s is unreachable; taking it out of rotation", server)
            self._down.add(server)

    def mark_up(self, server: str) -> None:
        """Put ``server`` back into rotation."""
        if server in self._down:
            logger.info("server %s is healthy again; back in rotation", server)
            self._down.discard(server)

    # -- choice ----------------------------------------------------------------------

    def in_flight(self, server: str) -> int:
        """Requests this engine has in flight on ``server``."""
        return self._in_flight[server]

    def started(self, server: str) -> None:
        """Count one more request in flight on ``server`` (:meth:`finished` uncounts it)."""
        self._in_flight[server] += 1

    def finished(self, server: str) -> None:
        """A request counted by :meth:`started` on ``server`` ended."""
        self._in_flight[server] -= 1

    def _candidates(self, exclude: Collection[str]) -> list[str]:
        healthy = [s for s in self.servers if s not in self._down]
        preferred = [s for s in healthy if s not in exclude]
        if preferred:
            return preferred
        if healthy:
            return healthy
        # everything is down: keep trying rather than fail before the probe catches up
        others = [s for s in self.servers if s not in exclude]
        return others or list(self.servers)

    def _round_robin(self, candidates: list[str]) -> str:
        n = len(self.servers)
        for _ in range(n):
            s = self.servers[self._next % n]
            self._next += 1
            if s in candidates:
                return s
        return candidates[0]

    def _least_in_flight(self, candidates: list[str]) -> str:
        low = min(self._in_flight[s] for s in candidates)
        return self._round_robin([s for s in candidates if self._in_flight[s] == low])

    def choose(self, key: str | None = None, *, exclude: Collection[str] = (),
               prefer: str | None = None) -> str:
        """Pick a server.

        Args:
            key: the sticky-routing key (ignored by the other policies).
            exclude: servers to avoid when another healthy one exists (a failed attempt).
            prefer: a server to keep when it is still a candidate (a continuation).

        Raises:
            NoHealthyServerError: never in practice; kept for an empty server list.
        """
        if len(self.servers) == 1 and (key is None or self.policy != "sticky"):
            return self.servers[0]  # the only choice, whatever is down or excluded
        candidates = self._candidates(exclude)
        if not candidates:  # pragma: no cover - servers is never empty
            raise NoHealthyServerError("no server address configured")
        if prefer is not None and prefer in candidates:
            chosen = prefer
        elif self.policy == "sticky" and key is not None:
            chosen = self._sticky_choice(key, candidates)
        elif self.policy == "least_in_flight" or self.policy == "sticky":
            chosen = self._least_in_flight(candidates)
        else:
            chosen = self._round_robin(candidates)
        if self.policy == "sticky" and key is not None:
            self._remember(key, chosen)
        return chosen

    def _sticky_choice(self, key: str, candidates: list[str]) -> str:
        known = self._sticky.get(key)
        if known is not None and known in candidates:
            return known
        return self._least_in_flight(candidates)

    def _remember(self, key: str, server: str) -> None:
        self._sticky[key] = server
        self._sticky.move_to_end(key)
        while len(self._sticky) > self._capacity:
            self._sticky.popitem(last=False)

    def sticky_server(self, key: str) -> str | None:
        """The server the sticky map holds for ``key``, if any."""
        return self._sticky.get(key)
