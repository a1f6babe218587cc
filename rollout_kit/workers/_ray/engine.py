"""``RayEngineProxy``: the controller-side stand-in for the engine inside a Ray worker.

Workflows never see it (they run inside the worker, on the worker's own engine); the
controller uses it for ``ctl.engines``, the weight version and server control
(``pause_generation_async`` …), each forwarded to the worker actor as one call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ...engines import InferenceEngine

if TYPE_CHECKING:
    import pandas as pd

    from ..._io import ModelRequest, ModelResponse


class ActorLink(Protocol):
    """What the proxy needs from the worker handle that owns the actor."""

    @property
    def actor(self) -> Any:
        """The Ray actor handle."""
        ...

    @property
    def alive(self) -> bool:
        """Whether the actor is not known to be dead."""
        ...

    async def ensure_started(self) -> None:
        """Start the actor's engine (once)."""
        ...

    def next_seq(self) -> int:
        """A sequence number ordering fire-and-forget control calls."""
        ...


class RayEngineProxy(InferenceEngine):
    """Forwards engine calls to a Ray worker's engine (its handle owns the actor).

    Args:
        link: the worker handle.
        name: the worker's name.
    """

    def __init__(self, link: ActorLink, name: str) -> None:
        self._link = link
        self.name = name
        self._version = 0

    async def initialize_async(self) -> None:
        """Start the worker's engine (health checks run in the worker)."""
        await self._link.ensure_started()

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """One generation on the worker's engine."""
        await self._link.ensure_started()
        resp: ModelResponse = await self._link.actor.generate_async.remote(req)
        return resp

    async def close_async(self) -> None:
        """Nothing to release here: the worker handle closes the actor and its engine."""

    def get_version(self) -> int:
        """The weight version last set."""
        return self._version

    def set_version(self, version: int) -> None:
        """Set the weight version here and in the worker (ordered, fire and forget)."""
        self._version = version
        if self._link.alive:
            self._link.actor.set_version.remote(version, self._link.next_seq())

    async def pause_generation_async(self) -> None:
        """Server side pause through the worker's engine."""
        if self._link.alive:
            await self._link.actor.pause_generation_async.remote()

    async def continue_generation_async(self) -> None:
        """Undo :meth:`pause_generation_async` through the worker's engine."""
        if self._link.alive:
            await self._link.actor.continue_generation_async.remote()

    async def health_async(self) -> dict[str, bool]:
        """The worker engine's server health."""
        await self._link.ensure_started()
        return dict(await self._link.actor.health_async.remote())

    async def server_metrics_async(self) -> pd.DataFrame:
        """The worker engine's server metrics."""
        await self._link.ensure_started()
        df: pd.DataFrame = await self._link.actor.server_metrics_async.remote()
        return df

    def __repr__(self) -> str:
        return f"RayEngineProxy(name={self.name!r}, alive={self._link.alive})"
