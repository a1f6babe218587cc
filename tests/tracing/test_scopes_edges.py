"""The tracer's scopes on their less common paths: an async phase of a given session (its
fast path) and a scope entered twice, phases and sessions as decorators of a given tracer
(called where no tracer is current), a session of an explicit task under another current
task, a session of another tracer, async task scopes, task contexts (what the executor runs
a workflow in), and the exact error messages.

Phase names here are made afresh (:func:`_fresh`), so each is unregistered at its first use
(the registration path of ``PhaseScope``) even when one process runs the tests many times,
as mutmut's workers do."""

from __future__ import annotations

import asyncio
import contextvars
import re
import uuid
from typing import Any

import pytest

from rollout_kit import TraceStateError, UnknownTaskIdError
from rollout_kit.tracing import (
    Tracer,
    current_session_id,
    current_task_id,
    current_tracer,
    trace_phase,
    traceparent,
)
from rollout_kit.tracing import (
    schema as S,
)
from rollout_kit.tracing._live import ENDED, NOOP, OPEN
from rollout_kit.tracing._scopes import PhaseScope


def _fresh(name: str) -> str:
    """A phase name no tracer has registered yet."""
    return f"{name}-{uuid.uuid4().hex[:12]}"


def _tracer(*task_ids: int) -> Tracer:
    tr = Tracer()
    for tid in task_ids:
        tr.register_task(tid)
    return tr


async def test_async_phase_of_a_given_session_and_a_scope_entered_twice() -> None:
    tr = _tracer(0)
    async with tr.session(task_id=0) as sid:
        assert sid is not None
        name = _fresh("scopes-edge-given")
        scope = tr.phase(name, session_id=sid)
        async with scope:
            assert scope.state == OPEN
        assert scope.state == ENDED
        for _ in range(2):  # async, then sync: the same refusal
            with pytest.raises(TraceStateError, match=f"^phase {re.escape(repr(name))}: this "
                                                      "scope was already entered$"):
                if _ == 0:
                    async with scope:
                        pass
                else:
                    with scope:
                        pass
    tr.finalize(0, "accepted")
    sp = tr.frames().spans
    assert sp[S.PHASE].tolist() == [name]
    assert sp[S.TASK_ID].tolist() == [0] and sp[S.SESSION_ID].tolist() == [0]


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_phase_of_an_unknown_session_names_it(is_async: bool) -> None:
    tr = _tracer(0)
    scope = tr.phase("scopes-edge-unknown", session_id=99)
    with pytest.raises(TraceStateError, match=r"^phase 'scopes-edge-unknown': session 99 is "
                                              r"unknown or its task is finalized$"):
        if is_async:
            async with scope:
                pass
        else:
            with scope:
                pass
    assert scope.state == NOOP  # entered, nothing attached


def test_a_phase_with_nothing_to_attach_to_is_a_noop() -> None:
    with trace_phase("scopes-edge-nothing") as scope:
        assert scope.state == NOOP and scope.name == "scopes-edge-nothing"


async def test_a_phase_of_a_given_session_of_the_current_tracer() -> None:
    tr = _tracer(0)
    with tr.task_scope(0):
        async with tr.session() as sid:
            pass
        name = _fresh("scopes-edge-current")
        with PhaseScope(None, name, sid):  # the current tracer's session
            pass
    tr.finalize(0, "accepted")
    sp = tr.frames().spans
    assert sp[S.PHASE].tolist() == [name]
    assert sp[S.SESSION_ID].tolist() == [0]


async def test_decorators_of_a_given_tracer_work_where_none_is_current() -> None:
    tr = _tracer(0, 1)
    seen: list[Any] = []

    names = _fresh("scopes-edge-deco-async"), _fresh("scopes-edge-deco-sync")
    with tr.session(task_id=0) as sid:
        @tr.phase(names[0], session_id=sid)
        async def async_step() -> str:
            return "a"

        @tr.phase(names[1], session_id=sid)
        def sync_step() -> str:
            return "s"

        empty = contextvars.Context()  # no tracer, task or session is current there
        assert await asyncio.get_running_loop().create_task(async_step(), context=empty) == "a"
        assert contextvars.Context().run(sync_step) == "s"
        assert async_step.__name__ == "async_step" and sync_step.__name__ == "sync_step"

    @tr.session(task_id=1)
    async def in_session() -> None:
        seen.append((current_tracer() is tr, current_task_id(), current_session_id()))

    @tr.session()
    async def needs_a_task() -> None:
        seen.append("ran")

    await asyncio.get_running_loop().create_task(in_session(), context=contextvars.Context())
    with pytest.raises(TraceStateError, match=r"^session\(\) needs a task: pass task_id or "
                                              r"enter task_scope\(\) first$"):
        await asyncio.get_running_loop().create_task(needs_a_task(),
                                                     context=contextvars.Context())
    tr.finalize(0, "accepted")
    tr.finalize(1, "accepted")
    f = tr.frames()
    assert f.spans[S.PHASE].tolist() == list(names)
    assert seen == [(True, 1, 1)]  # the tracer's second session, of task 1
    assert f.sessions.reset_index()[S.TASK_ID].tolist() == [0, 1]


async def test_a_session_of_an_explicit_task_under_another_current_task() -> None:
    tr = _tracer(0, 1)
    with tr.task_scope(0):
        outer = traceparent()
        with tr.session(task_id=1) as sid:
            inner = traceparent()
            assert current_tracer() is tr
            assert (current_task_id(), current_session_id()) == (1, sid)
        assert (current_task_id(), current_session_id()) == (0, None)  # restored
        assert traceparent() == outer
    assert current_tracer() is None and current_task_id() is None
    assert outer is not None and inner is not None
    assert inner.split("-")[1] == tr.trace_prefix + f"{1:016x}"  # task 1's trace
    assert outer.split("-")[1] == tr.trace_prefix + f"{0:016x}"
    tr.finalize(0, "accepted")
    tr.finalize(1, "accepted")
    s = tr.frames().sessions.reset_index()
    assert s[S.TASK_ID].tolist() == [1] and s[S.END_TS].notna().all()


async def test_a_session_of_another_tracer_needs_its_own_task() -> None:
    a, b = _tracer(0), _tracer(0)
    with a.task_scope(0):
        with pytest.raises(TraceStateError, match=r"^session\(\) needs a task"):
            with b.session():  # a's task is current, not b's
                pass
        with b.session(task_id=0):
            assert current_tracer() is b
        assert current_tracer() is a
    b.finalize(0, "accepted")
    assert len(b.frames().sessions) == 1


async def test_an_async_session_that_raises_is_failed_and_async_task_scopes() -> None:
    tr = _tracer(4)
    async with tr.task_scope(4) as tid:
        assert tid == 4 and current_task_id() == 4
        with pytest.raises(ValueError):
            async with tr.session():
                raise ValueError("x")
    assert current_task_id() is None
    tr.finalize(4, "accepted")
    assert tr.frames().sessions[S.STATUS].tolist() == ["failed"]


def test_a_task_scope_of_an_unknown_or_finalized_task() -> None:
    tr = _tracer(1)
    with pytest.raises(UnknownTaskIdError,
                       match=r"task_scope: task_id 7 was never registered in this tracer"):
        with tr.task_scope(7):
            pass
    tr.finalize(1, "accepted")
    with pytest.raises(TraceStateError, match=r"^task_scope: task_id 1 is already finalized$"):
        with tr.task_scope(1):
            pass


async def test_a_task_context_makes_the_task_current_in_its_asyncio_task_only() -> None:
    tr = _tracer(5, 6)
    context = tr.task_context(5)
    assert current_task_id() is None and current_tracer() is None  # not in the caller's
    assert context.run(current_task_id) == 5 and context.run(current_tracer) is tr

    async def work() -> tuple[int | None, int | None]:
        with tr.session() as sid:  # the task is current: the session is the task's
            return current_task_id(), sid

    got = await asyncio.get_running_loop().create_task(work(), context=context)
    assert got == (5, 0) and current_task_id() is None
    assert tr.task_context(6).run(current_task_id) == 6  # each context its own task
    tr.finalize(5, "accepted")
    assert tr.frames().sessions.index.get_level_values(S.TASK_ID).tolist() == [5]
    with pytest.raises(TraceStateError, match=r"^task_context: task_id 5 is already "
                                              r"finalized$"):
        tr.task_context(5)
    with pytest.raises(UnknownTaskIdError, match=r"task_context: task_id 9 was never"):
        tr.task_context(9)
    off = Tracer(enabled=False)
    assert off.task_context(9).run(current_tracer) is off  # a disabled tracer checks nothing
