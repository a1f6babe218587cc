"""The tracer's calls that work on its live table alone (tasks not finalized yet, their
sessions and open phases): task and session annotations, sessions, phases and the scopes
that make a task or a session current. :class:`~.core.Tracer` adds the task lifecycle, the
store and the trace file."""

from __future__ import annotations

from contextvars import Context
from time import perf_counter_ns

from ...errors import ConfigError, TraceStateError
from .. import context as ctx
from .. import schema as S
from ..codes import STATUS_CODES
from ..dumps import TrajectoryDump
from ..live import ENDED, NEW, OPEN, LiveSession, LiveTable
from ..scopes import PhaseScope, SessionScope, TaskScope
from ..starts import TaskStarts
from ..store import AttrValue, check_attrs, check_counts

__all__ = ["SESSION_RESERVED", "TASK_RESERVED", "LiveCalls"]

TASK_RESERVED = frozenset(S.TASK_COLUMNS) | {S.TASK_ID, S.SESSION_ID}
SESSION_RESERVED = frozenset({S.TASK_ID, S.SESSION_ID, S.STATUS, S.START_TS, S.END_TS,
                               S.TOTAL_S})


class LiveCalls:
    """Annotations, sessions and phases of a tracer's live tasks (see :class:`~.core.Tracer`)."""

    enabled: bool
    live: LiveTable
    dump: TrajectoryDump | None

    def annotate_task(self, task_id: int | None = None, **attrs: AttrValue) -> None:
        """Set attributes of a live task (the current task when ``task_id`` is None).

        Raises:
            UnknownTaskIdError: the task is not live; TraceStateError: no current task.
        """
        if not self.enabled or not attrs:
            return
        check_attrs(attrs, TASK_RESERVED)
        if task_id is None:
            task_id = ctx.TASK.get() if ctx.TRACER.get() is self else None
            if task_id is None:
                raise TraceStateError("annotate_task(): no task_id given and no current task")
        live = self.live
        with live.lock:
            t = live.tasks.get(task_id)
            if t is None:
                raise live.not_live(task_id, "annotate_task")
            if t.attrs is None:
                t.attrs = {}
            t.attrs.update(attrs)

    def task_scope(self, task_id: int) -> TaskScope:
        """Context manager making ``task_id`` (and this tracer) current; restores on exit.

        Usable with ``with`` and ``async with``: phases, sessions and the module-level
        helpers inside find the task (the executor gives each workflow run a
        :meth:`task_context` instead).

        Raises:
            UnknownTaskIdError: the task is not registered (TraceStateError if finalized).
        """
        return TaskScope(self, task_id)

    def task_context(self, task_id: int) -> Context:
        """A new context in which ``task_id`` and this tracer are current (what
        :meth:`task_scope` makes current), for ``loop.create_task(coro, context=...)``.

        Nothing in it needs restoring: it ends with its asyncio task. Making it is cheaper
        than entering and leaving a task scope; the executor's
        :meth:`task_starts` copies a kept template instead (kept by the caller: kept here,
        the template would hold the tracer in a cycle).

        Raises:
            UnknownTaskIdError: the task is not registered (TraceStateError if finalized).
        """
        if self.enabled and task_id not in self.live.tasks:
            raise self.live.not_live(task_id, "task_context")
        context = Context()
        context.run(ctx.TRACER.set, self)
        context.run(ctx.TASK.set, task_id)
        return context

    def task_starts(self) -> TaskStarts:
        """The ``dispatch`` / ``start`` marks and task contexts of this tracer's tasks in
        one object, for the caller that starts tasks to keep (the executor keeps one): see
        :class:`~rollout_kit.tracing.starts.TaskStarts`."""
        return TaskStarts(self)

    # -- sessions -------------------------------------------------------------------------
    def register_session(self, task_id: int | None = None) -> int:
        """Start a session of ``task_id`` (the current task when None); return its id.

        Session ids count 0, 1, 2, … per tracer.

        Raises:
            TraceStateError: no task given and none current; UnknownTaskIdError: not live.
        """
        if not self.enabled:
            return self.live.next_session_id()
        if task_id is None:
            task_id = ctx.TASK.get() if ctx.TRACER.get() is self else None
            if task_id is None:
                raise TraceStateError("register_session(): no task_id and no current task")
        return self.live.new_session(task_id).session_id

    def end_session(self, session_id: int, status: str | None = None) -> None:
        """End a session registered with :meth:`register_session` (optionally set status).

        Raises:
            TraceStateError: unknown or finished session, or already ended.
            ConfigError: unknown status.
        """
        if not self.enabled:
            return
        code = None if status is None else STATUS_CODES.get(status)
        if status is not None and not code:
            raise ConfigError(f"unknown session status {status!r}")
        now = perf_counter_ns()
        with self.live.lock:
            s = self._session(session_id, "end_session")
            if s.end is not None:
                raise TraceStateError(f"session {session_id} already ended")
            s.end = now
            if code is not None:
                s.status = code

    def session(self, task_id: int | None = None) -> SessionScope:
        """Context manager / decorator: a new session of ``task_id`` (current task if None).

        ``with`` and ``async with`` both work; the value is the session id. It becomes the
        current session (and the task the current task) until exit, when the previous
        values are restored; an exception marks the session ``failed`` (``cancelled`` for
        ``asyncio.CancelledError``).
        """
        return SessionScope(self, task_id, strict=True)

    def _session(self, session_id: int | None, what: str) -> LiveSession:
        """The live session ``session_id`` or the current one (caller holds the lock)."""
        if session_id is None:
            session_id = ctx.SESSION.get() if ctx.TRACER.get() is self else None
            if session_id is None:
                raise TraceStateError(f"{what}(): no session_id given and no current session")
        return self.live.session(session_id, what)

    def annotate(self, session_id: int | None = None, **attrs: AttrValue) -> None:
        """Set attributes of a session (current session when None), e.g. ``server=...``.

        Values must be None, bool, int (64-bit), float or str — anything else raises
        ``ConfigError`` here, so a record can always be written.

        Raises:
            ConfigError: bad value or reserved name; TraceStateError: no such live session.
        """
        if not self.enabled or not attrs:
            return
        check_attrs(attrs, SESSION_RESERVED)
        lock = self.live.lock
        lock.acquire()
        try:
            self._session(session_id, "annotate").annotate(attrs)
        finally:
            lock.release()

    def increment(self, session_id: int | None = None, **counts: int | float) -> None:
        """Add to numeric session attributes, e.g. ``prompt_tokens=12, retries=1``.

        Raises:
            ConfigError: a non-numeric value; TraceStateError: no such live session.
        """
        if not self.enabled or not counts:
            return
        check_counts(counts, SESSION_RESERVED)
        lock = self.live.lock
        lock.acquire()
        try:
            self._session(session_id, "increment").increment(counts)
        finally:
            lock.release()

    # -- phases ---------------------------------------------------------------------------
    def phase(self, name: str, session_id: int | None = None) -> PhaseScope:
        """A span of phase ``name``: ``with``/``async with`` context manager or decorator.

        Attaches to ``session_id``, else the current session, else the current task
        (session NA); with neither it records nothing. Unregistered names are registered
        with a palette colour. An exception inside flags the span ``raised``.
        """
        return PhaseScope(self, name, session_id)

    def begin_phase(self, name: str, session_id: int | None = None) -> PhaseScope:
        """Open a span now and return its handle for :meth:`end_phase`."""
        return self.phase(name, session_id).__enter__()

    def end_phase(self, handle: PhaseScope) -> None:
        """Close a span opened by :meth:`begin_phase`.

        A span already closed by ``finalize`` is left alone.

        Raises:
            TraceStateError: the handle was never started or was already ended.
        """
        if not isinstance(handle, PhaseScope):
            raise TraceStateError(f"end_phase() needs a handle from begin_phase(), got "
                                  f"{handle!r}")
        state = handle.state
        if state == NEW:
            raise TraceStateError(f"phase {handle.name!r} was never started")
        if state == ENDED:
            raise TraceStateError(f"phase {handle.name!r} was already ended")
        if state == OPEN:
            handle.__exit__(None, None, None)
