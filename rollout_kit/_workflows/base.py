"""``RolloutWorkflow``: AReaL's workflow interface, ``async arun_episode(engine, data)``.

A workflow turns one data item into a trajectory by calling ``await engine.generate_async(...)``
as often as it likes; returning ``None`` rejects the item. Any object with an async
``arun_episode(engine, data)`` method works (AReaL workflows port unchanged); subclassing
:class:`RolloutWorkflow` is optional but documents intent.

A workflow may also define ``validate(data)``: the executor and the controller call it in
``submit`` (and for every item of a batch call, before the first task is queued), so data the
workflow cannot use raises ``ConfigError`` in the caller and no task id is spent on it. The
default is a no-op; keep it cheap (type checks, no tokenizing): it runs once per task.

Writing your own workflow, with a custom traced phase::

    from rollout_kit.tracing import register_phase, trace_phase, trace_session

    register_phase("verify", color="#2ca02c")   # gets a ``verify_s`` column everywhere

    class VerifiedAnswer(RolloutWorkflow):
        async def arun_episode(self, engine, data):
            with trace_session():                 # one session = one generated sample
                with trace_phase("generate"):
                    resp = await engine.generate_async(ModelRequest(text=data["prompt"]))
                with trace_phase("verify"):
                    ok = check(resp.text)
            return {"text": resp.text, "reward": float(ok)} if ok else None
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..engines import InferenceEngine


@runtime_checkable
class WorkflowLike(Protocol):
    """Structural type of a workflow: anything with an async ``arun_episode``."""

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> Any:
        """Run one episode; return a trajectory, or ``None`` to reject."""


class RolloutWorkflow(ABC):
    """Base class of rollout workflows (AReaL's interface)."""

    @abstractmethod
    async def arun_episode(self, engine: InferenceEngine, data: Any) -> Any:
        """Run one episode for ``data`` and return its trajectory, or ``None`` to reject.

        Args:
            engine: the engine to call ``await engine.generate_async(ModelRequest(...))`` on.
            data: one item of the dataset (usually a dict).
        """

    def validate(self, data: Any) -> None:  # noqa: B027 - an optional hook, not abstract
        """Check ``data`` when it is submitted; raise ``ConfigError`` to refuse it.

        Called by ``submit`` and by the batch calls before a task id is taken, so bad data
        fails in the caller instead of as a ``failed`` task later. The default accepts
        everything. Keep it cheap: it runs once per submitted task.
        """


@runtime_checkable
class ValidatesData(Protocol):
    """A workflow with the optional ``validate(data)`` hook (see
    :meth:`RolloutWorkflow.validate`)."""

    def validate(self, data: Any) -> None:
        """Raise to refuse ``data`` at submit."""


def is_workflow(obj: object) -> bool:
    """Whether ``obj`` is a workflow instance (has an ``arun_episode``)."""
    return not isinstance(obj, type) and isinstance(obj, WorkflowLike)
