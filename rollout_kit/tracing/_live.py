"""The live table: tasks not yet finalized, their sessions, open phase spans and session
events, one lock.

A :class:`~rollout_kit.Tracer` owns one :class:`LiveTable`; the scopes of
:mod:`._scopes` open and close spans and sessions through it, so neither module reaches into
the other. ``LiveTable.lock`` guards the table (and the tracer's store, which the tracer
updates in the same critical sections). Methods documented "caller holds ``lock``" are
called by the tracer inside its own ``with table.lock:``; the others take the lock (on the
per-session paths with ``acquire()`` / ``try`` / ``finally: release()``: a ``with`` statement
on a lock costs about three times as much in CPython 3.11).

Live objects are small slotted records; their attributes are read and written only under
the lock, by this module and by the tracer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from time import perf_counter_ns
from types import MappingProxyType
from typing import Final

from .._errors import ConfigError, DuplicateTaskIdError, TraceStateError, UnknownTaskIdError
from .._ids import validate_task_id
from ._codes import END, N_MARKS, SUBMIT
from ._store import (
    FLAG_CLOSED_AT_FINALIZE,
    MISSING,
    AttrValue,
    EventRow,
    IdSet,
    SessionRow,
    SpanRow,
    Store,
)

# Phase scope / span states. NEW: not entered yet; NOOP: entered with nothing to attach to;
# OPEN: recording; ENDED: closed by its scope; CLOSED: closed by ``finalize`` of its task.
NEW: Final = 0
OPEN: Final = 1
ENDED: Final = 2
CLOSED: Final = 3
NOOP: Final = 4

#: the attributes of a task or session that has none (read only: one object, not one per task)
_NO_ATTRS: Mapping[str, AttrValue] = MappingProxyType({})
_NO_SPANS: list[int] = []  # the spans of a task that has none (never written to)


class LiveSpan:
    """A phase span: its task while open, session index (or -1), phase code, start, state.

    :class:`~rollout_kit.tracing._scopes.PhaseScope` is a ``LiveSpan`` (no second object per
    span). The scope sets ``code`` and the states ``NEW``/``NOOP``; :meth:`LiveTable.open_span`,
    :meth:`close` and ``finalize`` set the rest. ``task`` is ``None`` unless the span is open,
    so a kept handle holds no task. Read-only for everyone else.
    """

    __slots__ = ("code", "local", "start", "state", "task")

    code: int
    local: int
    start: int
    state: int
    task: LiveTask | None

    def close(self, end: int, flags: int) -> None:
        """End the span at ``end`` (a no-op unless open: ``finalize`` may have closed it)."""
        task = self.task
        if task is None:
            return
        lock = task.lock
        lock.acquire()  # not ``with``: on the per-span path the statement costs ~3×
        try:
            if self.state != OPEN:
                return
            self.state = ENDED
            self.task = None
            assert task.open is not None  # it holds this open span
            task.open.remove(self)
            spans = task.spans  # flat: P_STRIDE values per span, as the store keeps them
            if spans is None:
                task.spans = [self.local, self.code, self.start, end, flags]
            else:
                spans.extend((self.local, self.code, self.start, end, flags))
        finally:
            lock.release()


class LiveTask:
    """A registered, not yet finalized task: marks, attributes, sessions, spans, events."""

    __slots__ = ("attrs", "calls", "events", "lock", "marks", "open", "sessions", "spans",
                 "task_id", "wcode")

    def __init__(self, task_id: int, lock: threading.Lock, now: int, wcode: int) -> None:
        self.task_id = task_id
        self.wcode = wcode
        self.lock = lock
        self.marks = [MISSING] * N_MARKS
        self.marks[SUBMIT] = now
        self.attrs: dict[str, AttrValue] | None = None
        # made on first use: most tasks of a plain generate have no session or span
        self.sessions: list[LiveSession] | None = None
        self.spans: list[int] | None = None  # flat rows (store.P_STRIDE values per span)
        self.open: list[LiveSpan] | None = None
        self.events: list[EventRow] | None = None  # session events: rare (continuations)
        self.calls = 0  # engine calls outside any session, counted for a trajectory dump

    def add_span(self, row: SpanRow) -> None:
        """Keep a closed span's row (caller holds ``lock``)."""
        if self.spans is None:
            self.spans = []
        self.spans.extend(row)

    def commit(self, store: Store, status: int, reason: str | None, error: str | None,
               now: int | None) -> None:
        """Write this task into ``store`` (caller holds ``lock``).

        With ``now`` (finalize): the ``end`` mark defaults to ``now``, open spans are closed
        now and flagged ``closed_at_finalize``, open sessions end now. ``now=None`` writes a
        snapshot of a live task (status pending) and changes nothing.
        """
        marks = self.marks
        if now is not None:
            if marks[END] == MISSING:
                marks[END] = now
            for sp in self.open or ():
                self.add_span((sp.local, sp.code, sp.start, now, FLAG_CLOSED_AT_FINALIZE))
                sp.state = CLOSED
                sp.task = None
            self.open = None
        open_end = now if now is not None else MISSING
        sessions: list[SessionRow] = []
        for s in self.sessions or ():  # a loop, not a comprehension: usually one session
            sessions.append((s.session_id, status if s.status is None else s.status, s.start,
                             s.end if s.end is not None else open_end, s.attrs or _NO_ATTRS))
        store.commit(self.task_id, status, self.wcode, marks, reason, error,
                     self.attrs or _NO_ATTRS, sessions, self.spans or _NO_SPANS,
                     self.events or ())
        if now is not None:  # finalized: break the task <-> session cycle (freed at once)
            self.sessions = None


class LiveSession:
    """A session of a live task; ``local`` is its index within the task."""

    __slots__ = ("attrs", "calls", "end", "local", "session_id", "start", "status", "task")

    def __init__(self, session_id: int, task: LiveTask, local: int, start: int) -> None:
        self.session_id = session_id
        self.task = task
        self.local = local
        self.start = start
        self.end: int | None = None
        self.status: int | None = None
        self.attrs: dict[str, AttrValue] | None = None
        self.calls = 0  # engine calls counted for a trajectory dump (replay coordinates)

    def finish(self, end: int, status: int | None) -> None:
        """End the session unless already ended; set ``status`` unless it has one."""
        lock = self.task.lock
        lock.acquire()
        try:
            if self.end is None:
                self.end = end
            if status is not None and self.status is None:
                self.status = status
        finally:
            lock.release()

    def annotate(self, attrs: Mapping[str, AttrValue]) -> None:
        """Set attributes (caller holds ``lock``)."""
        if self.attrs is None:
            self.attrs = dict(attrs)
        else:
            self.attrs.update(attrs)

    def increment(self, counts: Mapping[str, int | float]) -> None:
        """Add to numeric attributes (caller holds ``lock``).

        Raises:
            ConfigError: an attribute to add to holds a non-number.
        """
        if self.attrs is None:
            self.attrs = {}
        a = self.attrs
        for k, v in counts.items():
            old = a.get(k)
            if old is not None and (isinstance(old, bool) or not isinstance(old, int | float)):
                raise ConfigError(f"increment({k}=...): attribute holds {old!r}")
            a[k] = v if old is None else old + v


class LiveTable:
    """Live tasks by id, live sessions by id, the finished ids, and the lock over them."""

    __slots__ = ("_next_sid", "done", "lock", "sessions", "tasks")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: dict[int, LiveTask] = {}
        self.sessions: dict[int, LiveSession] = {}
        self.done = IdSet()
        self._next_sid = 0

    # -- called with ``lock`` held -----------------------------------------------------
    def add_task(self, task_id: int, now: int, wcode: int,
                 attrs: dict[str, AttrValue] | None) -> None:
        """Register a live task (caller holds ``lock``).

        Raises:
            DuplicateTaskIdError: the id is live or was finalized since the last restart.
        """
        if task_id in self.tasks or (task_id < self.done.top and task_id in self.done):
            state = "live" if task_id in self.tasks else "already finalized"
            raise DuplicateTaskIdError(f"task_id {task_id} is {state} in this tracer")
        t = LiveTask(task_id, self.lock, now, wcode)
        if attrs:
            t.attrs = attrs
        self.tasks[task_id] = t

    def finish_task(self, task_id: int, store: Store, status: int, reason: str | None,
                    error: str | None, now: int) -> None:
        """Finalize a live task at ``now``: remove it and its sessions, remember its id as
        finished, commit it into ``store`` (caller holds ``lock``).

        Raises:
            TraceStateError: already finalized; UnknownTaskIdError: never registered.
        """
        t = self.tasks.pop(task_id, None)
        if t is None:
            if validate_task_id(task_id) in self.done:
                raise TraceStateError(f"task_id {task_id} was already finalized")
            raise UnknownTaskIdError(
                f"finalize(): task_id {task_id} was never registered in this tracer")
        self.done.add(task_id)
        if t.sessions:
            sessions = self.sessions
            for s in t.sessions:
                del sessions[s.session_id]
        t.commit(store, status, reason, error, now)

    def not_live(self, task_id: object, what: str) -> Exception:
        """The error for ``what`` on a task that is not live (finalized or unknown)."""
        tid = validate_task_id(task_id)
        if tid in self.done:
            return TraceStateError(f"{what}: task_id {tid} is already finalized")
        return UnknownTaskIdError(f"{what}: task_id {tid} was never registered in this tracer")

    def session(self, session_id: int, what: str) -> LiveSession:
        """The live session ``session_id`` (caller holds ``lock``).

        Raises:
            TraceStateError: unknown session, or its task is finalized.
        """
        s = self.sessions.get(session_id)
        if s is None:
            raise TraceStateError(
                f"{what}(): session {session_id!r} is unknown or its task is finalized")
        return s

    def restart(self) -> None:
        """Forget the finished ids; session ids restart at 0 if none is live (holds ``lock``)."""
        self.done = IdSet()
        if not self.sessions:
            self._next_sid = 0

    # -- take ``lock`` themselves ------------------------------------------------------
    def next_session_id(self) -> int:
        """A fresh session id without a session (for a disabled tracer)."""
        with self.lock:
            self._next_sid += 1
            return self._next_sid - 1

    def new_session(self, task_id: int) -> LiveSession:
        """Start a session of a live task now.

        Raises:
            UnknownTaskIdError: the task was never registered; TraceStateError: finalized.
        """
        now = perf_counter_ns()
        lock = self.lock
        lock.acquire()
        try:
            t = self.tasks.get(task_id)
            if t is None:
                raise self.not_live(task_id, "register_session")
            sid = self._next_sid
            self._next_sid = sid + 1
            if t.sessions is None:
                t.sessions = []
            s = LiveSession(sid, t, len(t.sessions), now)
            t.sessions.append(s)
            self.sessions[sid] = s
        finally:
            lock.release()
        return s

    def next_call(self, task_id: int, session_id: int | None) -> tuple[int, int] | None:
        """Count one engine call of a live task: ``(sample, call)``, the session's index
        within the task (-1 outside a session) and the call's index within it; ``None``
        when the task is not live."""
        lock = self.lock
        lock.acquire()
        try:
            s = self.sessions.get(session_id) if session_id is not None else None
            if s is not None:
                n = s.calls
                s.calls = n + 1
                return s.local, n
            t = self.tasks.get(task_id)
            if t is None:
                return None
            n = t.calls
            t.calls = n + 1
            return -1, n
        finally:
            lock.release()

    def add_event(self, session_id: int, kind: int, ts: int, value: int) -> bool:
        """Record a session event (kind code, ``perf_counter_ns`` time, value or
        ``MISSING``) on a live session; ``False`` when the session is not live."""
        with self.lock:
            s = self.sessions.get(session_id)
            if s is None:
                return False
            t = s.task
            if t.events is None:
                t.events = []
            t.events.append((s.local, kind, ts, value))
            return True

    def open_span(self, span: LiveSpan, name: str, session_id: int | None,
                  task_id: int | None) -> None:
        """Open ``span`` (phase ``name``) now in a live session, else in a live task.

        Raises:
            TraceStateError: the session is unknown or its task finalized.
            UnknownTaskIdError: the task is not live.
        """
        lock = self.lock
        lock.acquire()
        try:
            if session_id is not None:
                sess = self.sessions.get(session_id)
                if sess is None:
                    raise TraceStateError(f"phase {name!r}: session {session_id} is unknown "
                                          "or its task is finalized")
                task = sess.task
                span.local = sess.local
            else:
                t = self.tasks.get(task_id)  # type: ignore[arg-type]
                if t is None:
                    raise UnknownTaskIdError(
                        f"phase {name!r}: task {task_id} is not live in this tracer")
                task = t
                span.local = -1
            if task.open is None:
                task.open = []
            task.open.append(span)
            span.task = task
            span.state = OPEN
            span.start = perf_counter_ns()
        finally:
            lock.release()
