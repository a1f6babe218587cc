"""The current tracer, task and session, carried in ``contextvars``.

asyncio copies the context into every task it creates, so coroutines started with
``create_task``/``gather`` inside a task scope see the same task id; every scope that sets a
variable restores the previous value on exit (AReaL's ``session_context`` never restores).

The tracer variable is typed by :class:`Recorder`, what the scopes need of a tracer, so this
module depends on the live table only; :func:`~rollout_kit.tracing.current_tracer`
returns it typed as a ``Tracer``.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

from ._live import LiveTable
from .dumps import TrajectoryDump


class Recorder(Protocol):
    """What a scope (and an engine call) needs of a tracer: whether it records, its live
    table, and its trajectory dump if it has one."""

    @property
    def enabled(self) -> bool: ...

    @property
    def live(self) -> LiveTable: ...

    @property
    def dump(self) -> TrajectoryDump | None: ...


TRACER: ContextVar[Recorder | None] = ContextVar("rollout_kit_tracer", default=None)
TASK: ContextVar[int | None] = ContextVar("rollout_kit_task_id", default=None)
SESSION: ContextVar[int | None] = ContextVar("rollout_kit_session_id", default=None)


def current_task_id() -> int | None:
    """The task id of the enclosing ``task_scope``, or ``None``."""
    return TASK.get()


def current_session_id() -> int | None:
    """The session id of the enclosing ``session()``, or ``None``."""
    return SESSION.get()
