"""Task, phase and session scopes: each is a sync and async context manager.

Phase and session scopes are also decorators. A scope object is cheap;
``Tracer.phase()``/``trace_phase()`` make a new one per use, and the decorator form makes a
new one per call, so the same decorated function can run concurrently in many coroutines.
Scopes reach the tracer's state only through its :class:`~._live.LiveTable` (``tracer.live``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from contextvars import Token
from time import perf_counter_ns
from types import TracebackType
from typing import Any, TypeVar, cast

from .._errors import TraceStateError
from . import _context as ctx
from ._codes import CANCELLED, FAILED
from ._context import Recorder
from ._live import NEW, NOOP, LiveSession, LiveSpan
from ._phases import CODES, phase_code
from ._store import FLAG_RAISED

F = TypeVar("F", bound=Callable[..., Any])


def _decorate(make: Callable[[], Any], fn: F) -> F:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            async with make():
                return await fn(*args, **kwargs)
        return cast(F, awrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with make():
            return fn(*args, **kwargs)
    return cast(F, wrapper)


class TaskScope:
    """Makes a task (and its tracer) current; restores the previous values on exit."""

    __slots__ = ("_task_id", "_tokens", "_tracer")

    def __init__(self, tracer: Recorder, task_id: int) -> None:
        self._tracer = tracer
        self._task_id = task_id
        self._tokens: tuple[Token[Any], Token[Any], Token[Any]] | None = None

    def __enter__(self) -> int:
        tr, tid = self._tracer, self._task_id
        if tr.enabled and tid not in tr.live.tasks:
            raise tr.live.not_live(tid, "task_scope")
        self._tokens = (ctx.TRACER.set(tr), ctx.TASK.set(tid), ctx.SESSION.set(None))
        return tid

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        tokens, self._tokens = self._tokens, None
        if tokens is not None:
            ctx.SESSION.reset(tokens[2])
            ctx.TASK.reset(tokens[1])
            ctx.TRACER.reset(tokens[0])

    async def __aenter__(self) -> int:
        return self.__enter__()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(et, ev, tb)


class PhaseScope(LiveSpan):
    """One span of phase ``name`` (registered on first use); see :meth:`Tracer.phase`.

    With ``tracer=None`` the current tracer is used; with ``session_id=None`` the current
    session, else the current task; with none of them the scope records nothing. The scope
    is itself the :class:`~._live.LiveSpan` its tracer's live table opens and closes;
    ``state`` is ``NEW``, ``NOOP`` (entered, nothing to attach to), ``OPEN``, ``ENDED`` or
    ``CLOSED`` (by ``finalize`` of its task).
    """

    __slots__ = ("_name", "_sid", "_tracer")

    def __init__(self, tracer: Recorder | None, name: str, session_id: int | None) -> None:
        self._tracer = tracer
        self._name = name
        self._sid = session_id
        try:
            self.code = CODES[name]  # a subscript, not a call, for a known name
        except KeyError:
            self.code = phase_code(name)
        self.state = NEW
        self.task = None

    @property
    def name(self) -> str:
        """The phase name."""
        return self._name

    def __enter__(self) -> PhaseScope:
        if self.state != NEW:
            raise TraceStateError(f"phase {self._name!r}: this scope was already entered")
        self.state = NOOP
        tr, sid, tid = self._tracer, self._sid, None
        if tr is None or sid is None:
            cur = ctx.TRACER.get()
            if tr is None:
                if cur is None:
                    return self
                tr = cur
            if sid is None:
                if cur is not tr:
                    return self
                sid = ctx.SESSION.get()
                if sid is None:
                    tid = ctx.TASK.get()
                    if tid is None:
                        return self
        if tr.enabled:
            tr.live.open_span(self, self._name, sid, tid)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.task is not None:
            self.close(perf_counter_ns(), FLAG_RAISED if et is not None else 0)

    async def __aenter__(self) -> PhaseScope:
        tr, sid = self._tracer, self._sid
        if tr is not None and sid is not None and self.state == NEW and tr.enabled:
            self.state = NOOP  # what __enter__ does for a given tracer and session
            tr.live.open_span(self, self._name, sid, None)
            return self
        return self.__enter__()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self.task is not None:  # what __exit__ does, without a second call per span
            self.close(perf_counter_ns(), FLAG_RAISED if et is not None else 0)

    def __call__(self, fn: F) -> F:
        """Use as a decorator: every call of ``fn`` is one span."""
        tracer, name, sid = self._tracer, self._name, self._sid
        return _decorate(lambda: PhaseScope(tracer, name, sid), fn)


class SessionScope:
    """A session of a task; see :meth:`Tracer.session`.

    Entering registers the session and makes it current (with its tracer and task); exiting
    records its end, status ``failed`` on an exception (``cancelled`` on cancellation), and
    restores the previous context values.
    """

    __slots__ = ("_sess", "_strict", "_task_id", "_tokens", "_tracer")

    def __init__(self, tracer: Recorder | None, task_id: int | None, strict: bool) -> None:
        self._tracer = tracer
        self._task_id = task_id
        self._strict = strict
        self._sess: LiveSession | None = None
        self._tokens: tuple[Token[Any] | None, Token[Any] | None, Token[Any]] | None = None

    def __enter__(self) -> int | None:
        cur = ctx.TRACER.get()
        tr = self._tracer or cur
        if tr is None or not tr.enabled:
            return None
        tid = self._task_id
        if tid is None:
            tid = ctx.TASK.get() if cur is tr else None
            if tid is None:
                if self._strict:
                    raise TraceStateError(
                        "session() needs a task: pass task_id or enter task_scope() first")
                return None
        sess = tr.live.new_session(tid)
        self._sess = sess
        sid = sess.session_id
        if cur is tr and self._task_id is None:  # tracer and task are current: only the session
            self._tokens = (None, None, ctx.SESSION.set(sid))
        else:
            self._tokens = (ctx.TRACER.set(tr), ctx.TASK.set(tid), ctx.SESSION.set(sid))
        return sid

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        sess, tokens = self._sess, self._tokens
        if sess is None or tokens is None:
            return
        self._sess = self._tokens = None
        status = None
        if et is not None:
            status = CANCELLED if issubclass(et, asyncio.CancelledError) else FAILED
        sess.finish(perf_counter_ns(), status)
        tracer_token, task_token, session_token = tokens
        ctx.SESSION.reset(session_token)
        if task_token is not None:
            ctx.TASK.reset(task_token)
        if tracer_token is not None:
            ctx.TRACER.reset(tracer_token)

    async def __aenter__(self) -> int | None:
        return self.__enter__()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(et, ev, tb)

    def __call__(self, fn: F) -> F:
        """Use as a decorator: every call of ``fn`` runs in a new session."""
        tracer, tid, strict = self._tracer, self._task_id, self._strict
        return _decorate(lambda: SessionScope(tracer, tid, strict), fn)
