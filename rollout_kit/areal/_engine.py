"""AReaL's calling style, for code ported from AReaL: ``engine.submit / wait / rollout_batch``.

In AReaL an inference engine owns a ``WorkflowExecutor`` and answers the rollout calls
itself. rollout_kit keeps the engine to generation and server control, so this module is a
thin adapter: :class:`AReaLEngine` wraps any :class:`~rollout_kit.engines.InferenceEngine`
in a one-worker :class:`~rollout_kit.RolloutController` (the one owner of ids and
results) and offers AReaL's method names on top, returning what AReaL's return:
trajectories (AReaL's dicts of ``[1, L]`` tensors, or whatever the workflow returns), not
:class:`~rollout_kit.RolloutResult` objects. ``engine.controller`` has the results with their
status and reason, and the traces.

Usage::

    from rollout_kit.areal import AReaLEngine

    engine = AReaLEngine(RemoteSGLangEngine(["127.0.0.1:30000"]))
    engine.initialize()
    tid = engine.submit({"messages": [...]}, workflow)
    [trajectory] = engine.wait(1)
    batch = engine.rollout_batch(data, workflow)        # accepted trajectories
    engine.destroy()
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._controller import RolloutController, workflow_error
from .._errors import ConfigError, RolloutTimeoutError
from ._tensors import concat_padded_tensors, holds_tensors

if TYPE_CHECKING:
    import pandas as pd

    from .._config import ExecutorConfig
    from .._executor import AcceptFnSpec, WorkflowSpec
    from .._io import ModelResponse, RolloutResult
    from ..engines import InferenceEngine
    from ..tracing import Tracer

__all__ = ["AReaLEngine"]


class _Grouped:
    """AReaL's ``group_size``: the workflow ``group_size`` times on one data item, in
    parallel, as one task; tensor trajectories concatenated, others as a list of the runs
    that were not rejected (None if every run was)."""

    def __init__(self, workflow: Any, group_size: int) -> None:
        self.workflow = workflow
        self.group_size = group_size

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        runs = await asyncio.gather(*[self.workflow.arun_episode(engine, data)
                                      for _ in range(self.group_size)])
        kept = [r for r in runs if r is not None]
        if not kept:
            return None
        if all(holds_tensors(r) for r in kept):
            return concat_padded_tensors(kept)
        return kept


def _cycle_items(dataloader: Iterable[Any]) -> Iterator[Any]:
    """The items of a dataloader's batches, pass after pass (AReaL's ``cycle_dataloader``)."""
    for batch in _passes(dataloader):
        yield from batch


def _passes(dataloader: Iterable[Any]) -> Iterator[Any]:
    while True:
        empty = True
        for batch in dataloader:
            empty = False
            yield batch
        if empty:
            raise ConfigError("the dataloader yielded no batch")


def _trajectories(results: Sequence[RolloutResult]) -> list[Any]:
    return [r.trajectory if r.ok else None for r in results]


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
        self._items: dict[int, Iterator[Any]] = {}  # prepare_batch's pass per dataloader

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
    async def agenerate(self, req: Any) -> ModelResponse:
        """One generation: AReaL's or rollout_kit's request (see
        :meth:`InferenceEngine.agenerate <rollout_kit.engines.InferenceEngine.agenerate>`)."""
        return await self.engine.agenerate(req)

    # -- rollouts (AReaL's names and returns, over the controller) ------------------------
    def _workflow(self, workflow: WorkflowSpec, group_size: int, is_eval: bool) -> WorkflowSpec:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group_size must be an int >= 1, got {group_size!r}")
        if is_eval:
            raise ConfigError("is_eval=True: AReaL's evaluation statistics scope is not kept; "
                              "run evaluation rollouts on a controller of their own")
        if group_size == 1:
            return workflow
        if isinstance(workflow, str | type):
            raise ConfigError("group_size > 1 takes a workflow instance, not a class or an "
                              "import path")
        return _Grouped(workflow, group_size)

    def submit(self, data: Any, workflow: WorkflowSpec,
               workflow_kwargs: dict[str, Any] | None = None,
               should_accept_fn: AcceptFnSpec | None = None, group_size: int = 1,
               task_id: int | None = None, is_eval: bool = False) -> int:
        """Queue one rollout; returns its task id at once (``group_size`` runs of the
        workflow on ``data`` make one task, their tensors concatenated, as in AReaL)."""
        return self.controller.submit(data, self._workflow(workflow, group_size, is_eval),
                                      workflow_kwargs, should_accept_fn, task_id)

    def wait(self, count: int, timeout: float | None = None,
             raise_timeout: bool = True) -> list[Any]:
        """The trajectories of ``count`` finished tasks (completion order; ``None`` for a
        rejected one). A failed task raises :class:`~rollout_kit.WorkflowError`; with
        ``raise_timeout=False`` a timeout returns ``[]`` and the results stay for the next
        call."""
        try:
            return _trajectories(self.controller.wait(count, timeout, raise_on_failure=True))
        except RolloutTimeoutError:
            if raise_timeout:
                raise
            return []

    def wait_for_task(self, task_id: int, timeout: float | None = None,
                      raise_timeout: bool = True) -> Any:
        """The trajectory of one task (``None`` if rejected; a failed one raises)."""
        try:
            result = self.controller.wait_for(task_id, timeout, raise_on_failure=True)
        except RolloutTimeoutError:
            if raise_timeout:
                raise
            return None
        return result.trajectory if result.ok else None

    def rollout_batch(self, data: Sequence[Any], workflow: WorkflowSpec,
                      workflow_kwargs: dict[str, Any] | None = None,
                      should_accept_fn: AcceptFnSpec | None = None,
                      group_size: int = 1) -> list[Any]:
        """Run every item; return the accepted trajectories (input order), as AReaL's
        ``rollout_batch`` does. A failed task raises :class:`~rollout_kit.WorkflowError`."""
        results = self.controller.rollout_batch(
            data, self._workflow(workflow, group_size, False), workflow_kwargs,
            should_accept_fn)
        for r in results:
            if r.status == "failed":
                raise workflow_error(r)
        return [r.trajectory for r in results if r.ok]

    def prepare_batch(self, dataloader: Iterable[Any], workflow: WorkflowSpec,
                      workflow_kwargs: dict[str, Any] | None = None,
                      should_accept_fn: AcceptFnSpec | None = None, group_size: int = 1,
                      dynamic_bs: bool = False, *, batch_size: int | None = None) -> list[Any]:
        """Submit items until a batch is accepted; return its trajectories.

        As AReaL's: ``dataloader`` yields batches (lists of items) and is cycled; the batch
        size is ``dataloader.batch_size`` (or ``batch_size``); later calls continue the same
        pass over it.
        """
        if dynamic_bs:
            raise ConfigError("dynamic_bs=True is not supported: the batch is batch_size "
                              "accepted trajectories")
        size = batch_size if batch_size is not None else getattr(dataloader, "batch_size", None)
        if size is None:
            raise ConfigError("prepare_batch needs batch_size= when the dataloader has no "
                              "batch_size")
        items = self._items.get(id(dataloader))
        if items is None:
            items = self._items[id(dataloader)] = _cycle_items(dataloader)
        results = self.controller.prepare_batch(
            items, self._workflow(workflow, group_size, False), size, workflow_kwargs,
            should_accept_fn)
        return [r.trajectory for r in results]

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
