"""``BlockingTwins``: the sync rollout methods (AReaL's names), written once.

``WorkflowExecutor``, ``RolloutController`` and every engine (``ExecutorDelegation``) define
the async methods (``wait_async`` …) and ``_blocking(coro, what)``; this mixin derives
``wait``, ``wait_for``, ``rollout_batch`` and ``prepare_batch`` from them, so the sync
surface cannot drift between the three.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..io import RolloutResult
    from .resolve import AcceptFnSpec, WorkflowSpec

__all__ = ["BlockingTwins"]

T = TypeVar("T")


class BlockingTwins:
    """Mixin: blocking twins of the ``*_async`` rollout methods."""

    def _blocking(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        raise NotImplementedError

    async def wait_async(self, count: int | None = None, timeout: float | None = None,
                         raise_on_failure: bool = False) -> list[RolloutResult]:
        raise NotImplementedError

    async def wait_for_async(self, task_id: int, timeout: float | None = None,
                             raise_on_failure: bool = False) -> RolloutResult:
        raise NotImplementedError

    async def rollout_batch_async(
        self, data: Sequence[Any], workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None, timeout: float | None = None,
        progress: bool = False,
    ) -> list[RolloutResult]:
        raise NotImplementedError

    async def prepare_batch_async(
        self, data: Iterable[Any], workflow: WorkflowSpec, batch_size: int,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None, timeout: float | None = None,
        raise_on_failure: bool = True,
        progress: bool = False,
    ) -> list[RolloutResult]:
        raise NotImplementedError

    def wait(self, count: int | None = None, timeout: float | None = None,
             raise_on_failure: bool = False) -> list[RolloutResult]:
        """Blocking twin of ``wait_async``."""
        return self._blocking(self.wait_async(count, timeout, raise_on_failure), "wait()")

    def wait_for(self, task_id: int, timeout: float | None = None,
                 raise_on_failure: bool = False) -> RolloutResult:
        """Blocking twin of ``wait_for_async``."""
        return self._blocking(self.wait_for_async(task_id, timeout, raise_on_failure),
                              "wait_for()")

    def rollout_batch(
        self, data: Sequence[Any], workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None, timeout: float | None = None,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Blocking twin of ``rollout_batch_async`` (``progress=True``: a tqdm bar)."""
        return self._blocking(self.rollout_batch_async(
            data, workflow, workflow_kwargs, should_accept_fn, timeout, progress),
            "rollout_batch()")

    def prepare_batch(
        self, data: Iterable[Any], workflow: WorkflowSpec, batch_size: int,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None, timeout: float | None = None,
        raise_on_failure: bool = True,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Blocking twin of ``prepare_batch_async`` (``progress=True``: a tqdm bar)."""
        return self._blocking(self.prepare_batch_async(
            data, workflow, batch_size, workflow_kwargs, should_accept_fn, timeout,
            raise_on_failure, progress), "prepare_batch()")
