"""``TaskStarts``: the two lifecycle marks of a task's start (``dispatch`` and ``start``) and
the context its asyncio task runs in, for the one caller that starts tasks (the executor).

Per task the executor marks ``dispatch``, makes the task's context (the task and its tracer
current) and, in the task's first step, marks ``start``. ``Tracer.mark`` and
``Tracer.task_context`` do the same with checks a caller that passes a known event never
needs, and build each context from scratch; this copies a kept template context instead,
which is cheaper on a path every task takes (see ``bench/bench_task_cost.py``). The template
holds the tracer, so the *caller* keeps it: kept by the tracer it would be a reference cycle,
and a closed controller is freed by reference counting alone.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import Context
from time import perf_counter_ns

from . import _context as ctx
from ._codes import DISPATCH, START
from ._context import Recorder
from ._live import LiveTable

#: Run with each task's id in its new context at dispatch: another library's own "current
#: task" variable (AReaL's ``perf_tracer.set_task_id``, :mod:`._areal`) is set there.
TASK_CONTEXT_HOOKS: list[Callable[[int], object]] = []


class TaskStarts:
    """Start marks and contexts of one tracer's tasks (``Tracer.task_starts()``).

    With a disabled tracer nothing is marked or checked.
    """

    __slots__ = ("_enabled", "_live", "_template")

    def __init__(self, tracer: Recorder) -> None:
        self._live: LiveTable = tracer.live
        self._enabled = tracer.enabled
        self._template = Context()
        self._template.run(ctx.TRACER.set, tracer)

    def dispatch(self, task_id: int) -> Context:
        """Mark ``dispatch`` of a live task now; return a new context in which the task and
        the tracer are current (what ``Tracer.task_context`` returns), for
        ``asyncio.Task(..., context=...)``.

        Raises:
            UnknownTaskIdError: the task is not registered (TraceStateError if finalized).
        """
        if self._enabled:
            self._mark(task_id, DISPATCH, "dispatch")
        context = self._template.copy()
        context.run(ctx.TASK.set, task_id)
        for hook in TASK_CONTEXT_HOOKS:
            context.run(hook, task_id)
        return context

    def start(self, task_id: int) -> None:
        """Mark ``start`` of a live task now (its first step).

        Raises:
            UnknownTaskIdError: the task is not registered (TraceStateError if finalized).
        """
        if self._enabled:
            self._mark(task_id, START, "start")

    def _mark(self, task_id: int, code: int, what: str) -> None:
        now = perf_counter_ns()
        live = self._live
        lock = live.lock
        lock.acquire()  # not ``with``: twice per task
        try:
            t = live.tasks.get(task_id)
            if t is not None:
                t.marks[code] = now
                return
        finally:
            lock.release()
        raise live.not_live(task_id, what)
