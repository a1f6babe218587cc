"""Phase and session scopes: each is a sync and async context manager and a decorator.

A scope object is cheap; ``Tracer.phase()``/``trace_phase()`` make a new one per use, and
the decorator form makes a new one per call, so the same decorated function can run
concurrently in many coroutines.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from contextvars import Token
from time import perf_counter_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..errors import TraceStateError, UnknownTaskIdError
from . import context as ctx
from .store import FLAG_RAISED

if TYPE_CHECKING:
    from .tracer import Tracer, _LiveSession, _LiveTask

__all__ = ["CLOSED", "ENDED", "NEW", "NOOP", "OPEN", "PhaseScope", "SessionScope"]

# PhaseScope states
NEW, OPEN, ENDED, CLOSED, NOOP = range(5)  # CLOSED: by finalize; NOOP: nothing to attach to

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


class PhaseScope:
    """One span of phase ``code``; see :meth:`Tracer.phase`.

    With ``tracer=None`` the current tracer is used; with ``session_id=None`` the current
    session, else the current task; with none of them the scope records nothing.
    """

    __slots__ = ("_code", "_local", "_name", "_sid", "_start", "_state", "_task", "_tracer")

    def __init__(self, tracer: Tracer | None, name: str, code: int,
                 session_id: int | None) -> None:
        self._tracer = tracer
        self._name = name
        self._code = code
        self._sid = session_id
        self._task: _LiveTask | None = None
        self._local = -1
        self._start = 0
        self._state = NEW

    def __enter__(self) -> PhaseScope:
        if self._state != NEW:
            raise TraceStateError(f"phase {self._name!r}: this scope was already entered")
        self._state = NOOP
        tr = self._tracer
        cur = ctx.TRACER.get()
        if tr is None:
            tr = cur
            if tr is None:
                return self
        if not tr.enabled:
            return self
        sid = self._sid
        if sid is None and cur is tr:
            sid = ctx.SESSION.get()
        with tr._lock:
            if sid is not None:
                sess = tr._sessions.get(sid)
                if sess is None:
                    raise TraceStateError(
                        f"phase {self._name!r}: session {sid} is unknown or its task is finalized")
                task = sess.task
                self._local = sess.local
            else:
                tid = ctx.TASK.get() if cur is tr else None
                if tid is None:
                    return self
                task = tr._live.get(tid)  # type: ignore[assignment]
                if task is None:
                    raise UnknownTaskIdError(
                        f"phase {self._name!r}: task {tid} is not live in this tracer")
            self._task = task
            task.open.append(self)
            self._state = OPEN
            self._start = perf_counter_ns()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        end = perf_counter_ns()
        task = self._task
        if task is None:
            return
        with task.lock:
            if self._state != OPEN:  # closed by finalize meanwhile
                return
            self._state = ENDED
            self._task = None
            task.open.remove(self)
            task.spans.append((self._local, self._code, self._start, end,
                               FLAG_RAISED if et is not None else 0))

    async def __aenter__(self) -> PhaseScope:
        return self.__enter__()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(et, ev, tb)

    def __call__(self, fn: F) -> F:
        """Use as a decorator: every call of ``fn`` is one span."""
        tracer, name, code, sid = self._tracer, self._name, self._code, self._sid
        return _decorate(lambda: PhaseScope(tracer, name, code, sid), fn)


class SessionScope:
    """A session of a task; see :meth:`Tracer.session`.

    Entering registers the session and makes it current (with its tracer and task); exiting
    records its end, status ``failed`` on an exception (``cancelled`` on cancellation), and
    restores the previous context values.
    """

    __slots__ = ("_sess", "_strict", "_task_id", "_tokens", "_tracer")

    def __init__(self, tracer: Tracer | None, task_id: int | None, strict: bool) -> None:
        self._tracer = tracer
        self._task_id = task_id
        self._strict = strict
        self._sess: _LiveSession | None = None
        self._tokens: tuple[Token[Any], Token[Any], Token[Any]] | None = None

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
        sess = tr._new_session(tid)
        self._sess = sess
        self._tokens = (ctx.TRACER.set(tr), ctx.TASK.set(tid), ctx.SESSION.set(sess.session_id))
        return sess.session_id

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        sess, tokens = self._sess, self._tokens
        if sess is None or tokens is None:
            return
        self._sess = self._tokens = None
        status = None
        if et is not None:
            status = 3 if not issubclass(et, asyncio.CancelledError) else 4  # failed/cancelled
        end = perf_counter_ns()
        with sess.task.lock:
            if sess.end is None:
                sess.end = end
            if status is not None and sess.status is None:
                sess.status = status
        ctx.SESSION.reset(tokens[2])
        ctx.TASK.reset(tokens[1])
        ctx.TRACER.reset(tokens[0])

    async def __aenter__(self) -> int | None:
        return self.__enter__()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(et, ev, tb)

    def __call__(self, fn: F) -> F:
        """Use as a decorator: every call of ``fn`` runs in a new session."""
        tracer, tid, strict = self._tracer, self._task_id, self._strict
        return _decorate(lambda: SessionScope(tracer, tid, strict), fn)
