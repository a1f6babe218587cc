"""``InferenceEngine``: what every engine offers — generation and server control only.

An engine knows nothing of tasks, executors or controllers: a
:class:`~rollout_kit.WorkflowExecutor` is *given* an engine and runs workflows on
it. (AReaL's ``engine.submit / wait / rollout_batch`` calling style lives in
:mod:`rollout_kit.areal`, as an adapter over a one-worker controller.)

Two kinds of pause exist and are named apart (AReaL #446):

* :meth:`InferenceEngine.pause_generation_async` / :meth:`continue_generation_async` act on
  the **servers** (abort in-flight generations, hold or reject new ones), e.g. around a
  weight update;
* the controller's ``pause()`` / ``resume()`` only stop the **client** from dispatching.

Naming: every coroutine method ends in ``_async``; its blocking twin, where there is one, has
the plain name. AReaL's names (``agenerate``, ``submit``, ``wait``) live only in the workflow
hook and in :mod:`rollout_kit.areal`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .._io import ModelRequest, ModelResponse
from ..tracing import current_session_id, trace_phase, trace_session
from ._areal_io import request_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

    from ._scrape import ScrapeTarget

class InferenceEngine(ABC):
    """Generates from one or more inference servers; an async context manager.

    Attributes:
        name: a short name for traces and reprs.
    """

    name: str = ""

    @abstractmethod
    async def initialize_async(self) -> None:
        """Check the servers and get ready; called by ``async with``."""

    @abstractmethod
    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """Generate one completion for ``req``."""

    async def agenerate(self, req: Any) -> ModelResponse:
        """AReaL's name for :meth:`generate_async`, so AReaL's workflows run unchanged.

        ``req`` is rollout_kit's :class:`~rollout_kit.ModelRequest` or AReaL's (read by its
        attribute names, every field mapped or refused with a ``ConfigError`` naming it); the
        response carries AReaL's ``tokenizer``-based properties (``end_with_stop``,
        ``output_tokens_without_stop``). Called in a task with no session open (AReaL's
        workflows open none of rollout_kit's), the call is one session with its ``generate``
        phase, so each sample shows on the timeline.
        """
        ours, tokenizer = request_of(req)
        if current_session_id() is None:
            with trace_session(), trace_phase("generate"):
                resp = await self.generate_async(ours)
        else:
            resp = await self.generate_async(ours)
        if tokenizer is not None:
            resp.tokenizer = tokenizer
        return resp

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

    def scrape_targets(self) -> Sequence[ScrapeTarget]:
        """The servers whose ``/metrics`` a controller scrapes during a run
        (:class:`~rollout_kit.engines.MetricsScraper`); none by default."""
        return ()

    async def __aenter__(self) -> Self:
        await self.initialize_async()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close_async()
