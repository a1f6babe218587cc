"""``InferenceEngine``: what every engine offers (AReaL's names).

Two kinds of pause exist and are named apart (AReaL #446):

* :meth:`InferenceEngine.pause_generation` / :meth:`~InferenceEngine.continue_generation`
  act on the **servers** (abort in-flight generations, hold or reject new ones), e.g. around
  a weight update;
* ``pause()`` / ``resume()`` (from :class:`~rollout_kit.engines.delegation.ExecutorDelegation`)
  only stop the **client** from dispatching new rollouts.

The rollout methods (``submit``, ``wait``, ``rollout_batch``, ``prepare_batch`` and their async
twins) come from the delegation mixin, which forwards them to the engine's
``WorkflowExecutor``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING, Self

from ..io import ModelRequest, ModelResponse
from .delegation import ExecutorDelegation

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["InferenceEngine"]


class InferenceEngine(ExecutorDelegation, ABC):
    """Generates from one or more inference servers; an async context manager.

    Attributes:
        name: a short name for traces and reprs.
    """

    name: str

    @abstractmethod
    async def initialize(self) -> None:
        """Check the servers and get ready; called by ``async with``."""

    @abstractmethod
    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """Generate one completion for ``req``."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections and background tasks; idempotent."""

    @abstractmethod
    def get_version(self) -> int:
        """The weight version that newly arriving tokens are stamped with."""

    @abstractmethod
    def set_version(self, version: int) -> None:
        """Set the weight version (after a weight update)."""

    @abstractmethod
    async def pause_generation(self) -> None:
        """Server side: abort in-flight generations and hold new ones on every server."""

    @abstractmethod
    async def continue_generation(self) -> None:
        """Server side: undo :meth:`pause_generation` on every server."""

    @abstractmethod
    async def health(self) -> dict[str, bool]:
        """Whether each server answers its health endpoint."""

    @abstractmethod
    async def server_metrics(self) -> pd.DataFrame:
        """The servers' Prometheus metrics as a DataFrame (server, metric, labels, value)."""

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()
