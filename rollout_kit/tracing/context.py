"""The current tracer, task and session, carried in ``contextvars``.

asyncio copies the context into every task it creates, so coroutines started with
``create_task``/``gather`` inside a task scope see the same task id; every scope that sets a
variable restores the previous value on exit (AReaL's ``session_context`` never restores).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tracer import Tracer

__all__ = ["current_session_id", "current_task_id", "current_tracer"]

TRACER: ContextVar[Tracer | None] = ContextVar("rollout_kit_tracer", default=None)
TASK: ContextVar[int | None] = ContextVar("rollout_kit_task_id", default=None)
SESSION: ContextVar[int | None] = ContextVar("rollout_kit_session_id", default=None)


def current_tracer() -> Tracer | None:
    """The tracer of the enclosing ``task_scope``/``session``, or ``None``."""
    return TRACER.get()


def current_task_id() -> int | None:
    """The task id of the enclosing ``task_scope``, or ``None``."""
    return TASK.get()


def current_session_id() -> int | None:
    """The session id of the enclosing ``session()``, or ``None``."""
    return SESSION.get()
