"""AReaL's calling style, for code ported from AReaL: ``engine.submit / wait / rollout_batch``.

In AReaL an inference engine owns a ``WorkflowExecutor`` and answers the rollout calls
itself. rollout_kit keeps the engine to generation and server control, so this module is a
thin adapter: :class:`AReaLEngine` wraps any :class:`~rollout_kit.engines.InferenceEngine`
in a one-worker :class:`~rollout_kit.RolloutController` (the one owner of ids and
results) and offers AReaL's method names on top. New code should hold the controller.

Usage::

    from rollout_kit.areal import AReaLEngine

    engine = AReaLEngine(RemoteSGLangEngine(["127.0.0.1:30000"]))
    engine.initialize()
    tid = engine.submit({"prompt": "What is 2+3?"}, workflow)
    [result] = engine.wait(1)
    batch = engine.rollout_batch(data, workflow)
    engine.destroy()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._controller import RolloutController

if TYPE_CHECKING:
    import pandas as pd

    from ._config import ExecutorConfig
    from ._executor import AcceptFnSpec, WorkflowSpec
    from ._io import ModelRequest, ModelResponse, RolloutResult
    from .engines import InferenceEngine
    from .tracing import Tracer

__all__ = ["AReaLEngine"]


class AReaLEngine:
    """An engine with AReaL's rollout methods, backed by a one-worker controller.

    Args:
        engine: the engine that generates (closed by :meth:`destroy` only if ``owns_engine``).
        executor_config: capacity settings (AReaL's ``max_concurrent_rollouts``, …).
        tracer: where traces go (default: a new in-memory tracer).
        owns_engine: close ``engine`` in :meth:`destroy`.

    Attributes:
        engine: the wrapped engine.
        controller: the controller doing the work (ids, results, traces).
    """

    def __init__(self, engine: InferenceEngine, *, executor_config: ExecutorConfig | None = None,
                 tracer: Tracer | None = None, owns_engine: bool = True) -> None:
        self.engine = engine
        self.owns_engine = owns_engine
        self.controller = RolloutController(engine, executor_config=executor_config,
                                            tracer=tracer)

    # -- lifecycle (AReaL: initialize / destroy) ------------------------------------------
    def initialize(self) -> None:
        """Check the servers (blocking)."""
        self.controller.initialize()

    def destroy(self) -> None:
        """Cancel unfinished tasks, flush traces, close the engine if owned (blocking)."""
        self.controller.close()
        if self.owns_engine:
            self.controller.binding.blocking(self.engine.close_async(), "destroy()")

    # -- generation -----------------------------------------------------------------------
    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """One generation (AReaL's name for :meth:`InferenceEngine.generate_async`)."""
        return await self.engine.generate_async(req)

    # -- rollouts (AReaL's names, forwarded to the controller) ----------------------------
    def submit(self, data: Any, workflow: WorkflowSpec,
               workflow_kwargs: dict[str, Any] | None = None,
               should_accept_fn: AcceptFnSpec | None = None,
               task_id: int | None = None) -> int:
        """Queue one rollout; returns its task id at once."""
        return self.controller.submit(data, workflow, workflow_kwargs, should_accept_fn,
                                      task_id)

    def wait(self, count: int, timeout: float | None = None,
             raise_on_failure: bool = False) -> list[RolloutResult]:
        """Wait for ``count`` results (completion order)."""
        return self.controller.wait(count, timeout, raise_on_failure)

    def rollout_batch(self, data: Sequence[Any], workflow: WorkflowSpec,
                      workflow_kwargs: dict[str, Any] | None = None,
                      should_accept_fn: AcceptFnSpec | None = None) -> list[RolloutResult]:
        """One result per item, in input order."""
        return self.controller.rollout_batch(data, workflow, workflow_kwargs, should_accept_fn)

    def prepare_batch(self, dataloader: Iterable[Any], workflow: WorkflowSpec,
                      batch_size: int, workflow_kwargs: dict[str, Any] | None = None,
                      should_accept_fn: AcceptFnSpec | None = None) -> list[RolloutResult]:
        """Submit items until ``batch_size`` are accepted; return those."""
        return self.controller.prepare_batch(dataloader, workflow, batch_size,
                                             workflow_kwargs, should_accept_fn)

    def pause(self) -> None:
        """Stop dispatching new rollouts (client side)."""
        self.controller.pause()

    def resume(self) -> None:
        """Restart dispatching."""
        self.controller.resume()

    def pause_generation(self) -> None:
        """Server side: abort in-flight generations and hold new ones (blocking)."""
        self.controller.pause_generation()

    def continue_generation(self) -> None:
        """Server side: undo :meth:`pause_generation` (blocking)."""
        self.controller.continue_generation()

    def set_version(self, version: int) -> None:
        """Set the weight version."""
        self.controller.set_version(version)

    def get_version(self) -> int:
        """The weight version."""
        return self.controller.get_version()

    def traces(self) -> pd.DataFrame:
        """The tasks DataFrame, indexed by ``task_id``."""
        return self.controller.traces()

    def __repr__(self) -> str:
        return f"AReaLEngine({self.engine!r})"
