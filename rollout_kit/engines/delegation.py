"""``ExecutorDelegation``: the rollout methods every engine gets from its ``WorkflowExecutor``.

An engine (``RemoteSGLangEngine``, ``RemotevLLMEngine``, a test engine) inherits this mixin
and thereby answers ``submit`` / ``wait`` / ``rollout_batch`` / ``prepare_batch`` /
``pause`` / ``resume`` (and async twins) by delegating to one lazily created
:class:`~rollout_kit.executor.WorkflowExecutor` bound to the engine. A controller attaches its
tracer and executor config with :meth:`ExecutorDelegation.configure_executor` before the
first submit, so every worker records into the controller's tracer.

The executor module imports engine types, so it is imported lazily inside methods.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ControllerStateError
from ..executor.twins import BlockingTwins

if TYPE_CHECKING:
    from ..config import ExecutorConfig
    from ..executor import AcceptFnSpec, WorkflowExecutor, WorkflowSpec
    from ..ids import TaskIdGenerator
    from ..io import RolloutResult
    from ..tracing import Tracer
    from .base import InferenceEngine

__all__ = ["ExecutorDelegation"]

T = TypeVar("T")

_ATTR = "_rk_workflow_executor"


class ExecutorDelegation(BlockingTwins):
    """Mixin: rollout methods delegated to the engine's ``WorkflowExecutor``.

    The executor is created on first use with the settings given to
    :meth:`configure_executor` (defaults otherwise). No ``__init__`` is needed.
    """

    # -- the executor ------------------------------------------------------------------
    @property
    def workflow_executor(self) -> WorkflowExecutor:
        """The engine's executor, created on first access."""
        ex: WorkflowExecutor | None = getattr(self, _ATTR, None)
        if ex is None:
            ex = self.configure_executor()
        return ex

    def configure_executor(
        self,
        *,
        config: ExecutorConfig | None = None,
        tracer: Tracer | None = None,
        id_generator: TaskIdGenerator | None = None,
        worker: str | None = None,
    ) -> WorkflowExecutor:
        """Create (or replace, while unused) this engine's executor with these settings.

        Args:
            config: capacity settings; ``ExecutorConfig()`` when ``None``.
            tracer: where task lifecycles are recorded (a controller passes its own).
            id_generator: the id source for ``submit(task_id=None)``.
            worker: the worker name written into trace records (default: engine ``name``).

        Raises:
            ControllerStateError: the current executor already has tasks.
        """
        from ..executor import WorkflowExecutor

        old: WorkflowExecutor | None = getattr(self, _ATTR, None)
        if old is not None and old.has_tasks():
            raise ControllerStateError(
                "cannot reconfigure the engine's executor while it has tasks; aclose() it first"
            )
        engine: InferenceEngine = self  # type: ignore[assignment]
        if worker is None:
            worker = getattr(self, "name", None)
        ex = WorkflowExecutor(engine, config=config, tracer=tracer,
                              id_generator=id_generator, worker=worker)
        setattr(self, _ATTR, ex)
        return ex

    def _blocking(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        return self.workflow_executor._blocking(coro, what)

    def attach_executor(self, executor: WorkflowExecutor) -> None:
        """Use ``executor`` (whose engine must be this one) for the delegated methods."""
        if executor.engine is not self:
            raise ControllerStateError("the executor belongs to a different engine")
        setattr(self, _ATTR, executor)

    # -- delegated methods (sync) -------------------------------------------------------
    def submit(
        self,
        data: Any,
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        task_id: int | None = None,
    ) -> int:
        """Queue one rollout; returns its task id at once. See ``WorkflowExecutor.submit``."""
        return self.workflow_executor.submit(
            data, workflow, workflow_kwargs=workflow_kwargs,
            should_accept_fn=should_accept_fn, task_id=task_id,
        )





    def pause(self) -> None:
        """Stop dispatching new rollouts (running ones continue)."""
        self.workflow_executor.pause()

    def resume(self) -> None:
        """Restart dispatching."""
        self.workflow_executor.resume()

    # -- delegated methods (async twins) ------------------------------------------------
    async def wait_async(self, count: int | None = None, timeout: float | None = None,
                         raise_on_failure: bool = False) -> list[RolloutResult]:
        """Async twin of :meth:`wait`."""
        return await self.workflow_executor.wait_async(count, timeout=timeout,
                                                       raise_on_failure=raise_on_failure)

    async def wait_for_async(self, task_id: int, timeout: float | None = None,
                             raise_on_failure: bool = False) -> RolloutResult:
        """Async twin of :meth:`wait_for`."""
        return await self.workflow_executor.wait_for_async(
            task_id, timeout=timeout, raise_on_failure=raise_on_failure)

    async def rollout_batch_async(
        self,
        data: Sequence[Any],
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Async twin of :meth:`rollout_batch`."""
        return await self.workflow_executor.rollout_batch_async(
            data, workflow, workflow_kwargs=workflow_kwargs,
            should_accept_fn=should_accept_fn, timeout=timeout, progress=progress,
        )

    async def prepare_batch_async(
        self,
        data: Iterable[Any],
        workflow: WorkflowSpec,
        batch_size: int,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        raise_on_failure: bool = True,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Async twin of :meth:`prepare_batch`."""
        return await self.workflow_executor.prepare_batch_async(
            data, workflow, batch_size, workflow_kwargs=workflow_kwargs,
            should_accept_fn=should_accept_fn, timeout=timeout,
            raise_on_failure=raise_on_failure, progress=progress,
        )
