"""``InferenceEngine``: what every engine offers — generation and server control only.

An engine knows nothing of tasks, executors or controllers: a
:class:`~rollout_kit.executor.WorkflowExecutor` is *given* an engine and runs workflows on
it. (AReaL's ``engine.submit / wait / rollout_batch`` calling style lives in
:mod:`rollout_kit.areal`, as an adapter over a one-worker controller.)

Two kinds of pause exist and are named apart (AReaL #446):

* :meth:`InferenceEngine.pause_generation_async` / :meth:`continue_generation_async` act on
  the **servers** (abort in-flight generations, hold or reject new ones), e.g. around a
  weight update;
* the controller's ``pause()`` / ``resume()`` only stop the **client** from dispatching.

Naming: every coroutine method ends in ``_async``. Engines written against the old names
(``agenerate``, ``initialize``, ``aclose``, ``pause_generation``, ``continue_generation``,
``health``, ``server_metrics``) keep working for one release: a subclass that defines an
old name gets it under the new one too, with one ``DeprecationWarning``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .._deprecation import warn_renamed
from ..io import ModelRequest, ModelResponse

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["InferenceEngine"]

#: old coroutine names → the ``_async`` names (kept as deprecated aliases for one release)
RENAMED: dict[str, str] = {
    "agenerate": "generate_async",
    "initialize": "initialize_async",
    "aclose": "close_async",
    "pause_generation": "pause_generation_async",
    "continue_generation": "continue_generation_async",
    "health": "health_async",
    "server_metrics": "server_metrics_async",
}


class InferenceEngine(ABC):
    """Generates from one or more inference servers; an async context manager.

    Attributes:
        name: a short name for traces and reprs.
    """

    name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for old, new in RENAMED.items():
            impl = cls.__dict__.get(old)
            if impl is not None and new not in cls.__dict__:
                warn_renamed(f"{cls.__qualname__}.{old}", f"{cls.__qualname__}.{new}")
                setattr(cls, new, impl)

    @abstractmethod
    async def initialize_async(self) -> None:
        """Check the servers and get ready; called by ``async with``."""

    @abstractmethod
    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """Generate one completion for ``req``."""

    @abstractmethod
    async def close_async(self) -> None:
        """Release connections and background tasks; idempotent."""

    @abstractmethod
    def get_version(self) -> int:
        """The weight version that newly arriving tokens are stamped with."""

    @abstractmethod
    def set_version(self, version: int) -> None:
        """Set the weight version (after a weight update)."""

    @abstractmethod
    async def pause_generation_async(self) -> None:
        """Server side: abort in-flight generations and hold new ones on every server."""

    @abstractmethod
    async def continue_generation_async(self) -> None:
        """Server side: undo :meth:`pause_generation_async` on every server."""

    @abstractmethod
    async def health_async(self) -> dict[str, bool]:
        """Whether each server answers its health endpoint."""

    @abstractmethod
    async def server_metrics_async(self) -> pd.DataFrame:
        """The servers' Prometheus metrics as a DataFrame (server, metric, labels, value)."""

    # -- deprecated names (one release) --------------------------------------------------
    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """Deprecated alias of :meth:`generate_async`."""
        warn_renamed("InferenceEngine.agenerate", "generate_async")
        return await self.generate_async(req)

    async def initialize(self) -> None:
        """Deprecated alias of :meth:`initialize_async`."""
        warn_renamed("InferenceEngine.initialize", "initialize_async")
        await self.initialize_async()

    async def aclose(self) -> None:
        """Deprecated alias of :meth:`close_async`."""
        warn_renamed("InferenceEngine.aclose", "close_async")
        await self.close_async()

    async def pause_generation(self) -> None:
        """Deprecated alias of :meth:`pause_generation_async`."""
        warn_renamed("InferenceEngine.pause_generation", "pause_generation_async")
        await self.pause_generation_async()

    async def continue_generation(self) -> None:
        """Deprecated alias of :meth:`continue_generation_async`."""
        warn_renamed("InferenceEngine.continue_generation", "continue_generation_async")
        await self.continue_generation_async()

    async def health(self) -> dict[str, bool]:
        """Deprecated alias of :meth:`health_async`."""
        warn_renamed("InferenceEngine.health", "health_async")
        return await self.health_async()

    async def server_metrics(self) -> pd.DataFrame:
        """Deprecated alias of :meth:`server_metrics_async`."""
        warn_renamed("InferenceEngine.server_metrics", "server_metrics_async")
        return await self.server_metrics_async()

    async def __aenter__(self) -> Self:
        await self.initialize_async()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close_async()
