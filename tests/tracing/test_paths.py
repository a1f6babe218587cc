"""Every path a task can take through the tracer, mark by mark on one (fake) clock.

The tracer reads ``perf_counter_ns`` (and ``time.time`` for its wall anchor) in a few
modules; here they all read one :class:`Clock` that only moves when the test says so, so
every mark, span, session and event time of the frames is a hand-written number: accepted,
rejected, cancelled while queued, cancelled while running, failed, finalized with things
still open, abort -> continue, late marks, and traces of several processes merged through
``Tracer.ingest`` and ``load_traces`` of several files.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rollout_kit.tracing import (
    Tracer,
    load_traces,
    session_event,
)
from rollout_kit.tracing import (
    _helpers as helpers,
)
from rollout_kit.tracing import (
    _live as live,
)
from rollout_kit.tracing import (
    _scopes as scopes,
)
from rollout_kit.tracing import (
    _tracer as core,
)
from rollout_kit.tracing import (
    schema as S,
)

SEC = 10**9


class Clock:
    """A ``perf_counter_ns`` and a ``time.time`` that move only with :meth:`at`."""

    def __init__(self) -> None:
        self.ns = 1_000 * SEC  # the "process" clock, far from 0
        self.wall = 1_700_000_000.0

    def at(self, seconds: float) -> None:
        """Move to ``seconds`` after the first tracer's epoch (the clock's start)."""
        self.ns = 1_000 * SEC + round(seconds * SEC)

    def perf_counter_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.wall  # only read for a tracer's wall anchor


class _Proxy:
    def __init__(self, module: Any, **over: Any) -> None:
        self._module, self._over = module, over

    def __getattr__(self, name: str) -> Any:
        return self._over[name] if name in self._over else getattr(self._module, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    for mod in (core, live, scopes, helpers):
        monkeypatch.setattr(mod, "perf_counter_ns", c.perf_counter_ns)
    monkeypatch.setattr(core, "time", _Proxy(time, time=c.time))
    return c


def marks(tasks: pd.DataFrame, tid: int) -> list[float]:
    row = tasks.loc[tid]
    return [float(row[c]) for c in (S.SUBMIT_TS, S.DISPATCH_TS, S.START_TS, S.END_TS,
                                    S.CONSUME_TS)]


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, abs=1e-9)
        for x, y in zip(a, b))


NAN = float("nan")


def run_accepted(tr: Tracer, clock: Clock, tid: int = 0, base: float = 0.0) -> None:
    """submit 0, dispatch 1, start 1.5; session 2..6 with generate 2..4 and reward 4.5..5.5;
    end 7 (all plus ``base``)."""
    clock.at(base)
    tr.register_task(tid)
    clock.at(base + 1)
    tr.mark(tid, "dispatch")
    with tr.task_scope(tid):
        clock.at(base + 1.5)
        tr.mark(tid, "start")
        clock.at(base + 2)
        with tr.session():
            with tr.phase("generate"):
                clock.at(base + 4)
            tr.annotate(server="h:1", ttft_s=0.25)
            tr.increment(prompt_tokens=3, completion_tokens=7)
            clock.at(base + 4.5)
            with tr.phase("reward"):
                clock.at(base + 5.5)
            clock.at(base + 6)
        clock.at(base + 7)
        tr.mark(tid, "end")
    clock.at(base + 7.25)
    tr.finalize(tid, "accepted")


def test_accepted_mark_by_mark(clock: Clock) -> None:
    tr = Tracer(worker="w0")
    run_accepted(tr, clock)
    clock.at(8)
    tr.mark(0, "consume")  # after finalize: merged into the row
    f = tr.frames()
    t = f.tasks.loc[0]
    assert same(marks(f.tasks, 0), [0, 1, 1.5, 7, 8])  # end is the mark, not finalize
    assert (t[S.QUEUE_S], t[S.RUN_S], t[S.TOTAL_S]) == pytest.approx((1, 5.5, 7))
    assert t["generate_s"] == pytest.approx(2) and t["reward_s"] == pytest.approx(1)
    assert t["generate_session_s"] == pytest.approx(2) and t["toolcall_s"] == 0
    assert t[S.STATUS] == "accepted" and t[S.WORKER] == "w0" and t[S.N_SESSIONS] == 1
    assert (t[S.PROMPT_TOKENS], t[S.COMPLETION_TOKENS]) == (3, 7)
    s = f.sessions.loc[(0, 0)]
    assert (s[S.START_TS], s[S.END_TS], s[S.TOTAL_S]) == pytest.approx((2, 6, 4))
    assert s[S.STATUS] == "accepted" and s[S.TTFT_S] == 0.25 and s[S.SERVER] == "h:1"
    assert s["generate_s"] == pytest.approx(2) and s["reward_s"] == pytest.approx(1)
    sp = f.spans
    assert sp[S.PHASE].tolist() == ["generate", "reward"]
    assert sp[S.START].tolist() == pytest.approx([2, 4.5])
    assert sp[S.END].tolist() == pytest.approx([4, 5.5])
    assert sp[S.DURATION].tolist() == pytest.approx([2, 1])
    assert sp[S.SERVER].tolist() == ["h:1", "h:1"] and sp[S.SESSION_ID].tolist() == [0, 0]
    assert not sp[S.RAISED].any() and not sp[S.CLOSED_AT_FINALIZE].any()
    assert f.wall_epoch == pytest.approx(clock.wall)


def test_cancelled_while_queued(clock: Clock) -> None:
    tr = Tracer()
    tr.register_task(3)
    clock.at(2.5)
    tr.finalize(3, "cancelled", reason="cancelled")  # never dispatched: end = now
    f = tr.frames()
    assert same(marks(f.tasks, 3), [0, NAN, NAN, 2.5, NAN])
    t = f.tasks.loc[3]
    assert math.isnan(t[S.QUEUE_S]) and math.isnan(t[S.RUN_S]) and t[S.TOTAL_S] == 2.5
    assert t[S.STATUS] == "cancelled" and t[S.REASON] == "cancelled"
    assert t[S.N_SESSIONS] == 0 and pd.isna(t[S.COMPLETION_TOKENS])  # none, not 0
    assert f.sessions.empty and f.spans.empty


async def test_cancelled_while_running_is_cancelled_not_failed(clock: Clock) -> None:
    tr = Tracer()
    tr.register_task(0)
    tr.mark(0, "dispatch")
    started = asyncio.Event()

    async def work() -> None:
        with tr.task_scope(0):
            tr.mark(0, "start")
            async with tr.session():
                async with tr.phase("generate"):
                    clock.at(3)
                    started.set()
                    await asyncio.Event().wait()  # cancelled here

    task = asyncio.get_running_loop().create_task(work())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clock.at(3.5)
    tr.finalize(0, "cancelled", reason="cancelled")
    f = tr.frames()
    s = f.sessions.loc[(0, 0)]
    assert s[S.STATUS] == "cancelled"  # a cancelled session is not a failed one
    assert (s[S.START_TS], s[S.END_TS]) == pytest.approx((0, 3))
    sp = f.spans.iloc[0]
    assert sp[S.RAISED] and not sp[S.CLOSED_AT_FINALIZE] and sp[S.END] == pytest.approx(3)
    assert f.tasks.loc[0, S.STATUS] == "cancelled"
    assert same(marks(f.tasks, 0), [0, 0, 0, 3.5, NAN])


def test_failed_session_and_task(clock: Clock) -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0):
        clock.at(1)
        with pytest.raises(ValueError), tr.session():
            with tr.phase("generate"):
                clock.at(2)
                raise ValueError("boom")
        clock.at(2.5)
        with tr.session():  # a later session of the same task is fine
            clock.at(3)
    clock.at(4)
    tr.finalize(0, "failed", reason="workflow_exception", error=ValueError("boom"))
    f = tr.frames()
    assert f.sessions[S.STATUS].tolist() == ["failed", "failed"]  # the second takes the task's
    assert f.sessions[S.START_TS].tolist() == pytest.approx([1, 2.5])
    assert f.sessions[S.END_TS].tolist() == pytest.approx([2, 3])
    t = f.tasks.loc[0]
    assert t[S.ERROR] == "ValueError: boom" and t[S.REASON] == "workflow_exception"
    assert t[S.STATUS] == "failed" and t[S.N_SESSIONS] == 2
    assert f.spans[S.RAISED].tolist() == [True]


def test_session_status_of_its_own_wins_over_the_task(clock: Clock) -> None:
    tr = Tracer()
    tr.register_task(0)
    sid = tr.register_session(0)
    clock.at(1)
    tr.end_session(sid, "rejected")
    sid2 = tr.register_session(0)
    tr.end_session(sid2)
    tr.finalize(0, "accepted")
    assert tr.frames().sessions[S.STATUS].tolist() == ["rejected", "accepted"]


def test_finalize_closes_what_is_still_open(clock: Clock) -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0):
        clock.at(1)
        tr.session().__enter__()  # never exited
        h = tr.begin_phase("generate")
        clock.at(2)
        task_phase = tr.begin_phase("reward", session_id=None)  # on the session too
    clock.at(5)
    live_frames = tr.frames()  # before finalize: pending, nothing open is written
    assert live_frames.tasks.loc[0, S.STATUS] == "pending"
    assert same(marks(live_frames.tasks, 0), [0, NAN, NAN, NAN, NAN])
    assert live_frames.spans.empty and math.isnan(live_frames.sessions[S.END_TS].iloc[0])
    assert live_frames.sessions[S.STATUS].tolist() == ["pending"]
    clock.at(6)
    tr.finalize(0, "rejected")
    tr.end_phase(h)  # closed by finalize already: left alone
    tr.end_phase(task_phase)
    f = tr.frames()
    assert same(marks(f.tasks, 0), [0, NAN, NAN, 6, NAN])  # end defaults to finalize time
    assert f.spans[S.CLOSED_AT_FINALIZE].tolist() == [True, True]
    assert f.spans[S.END].tolist() == pytest.approx([6, 6])
    assert f.spans[S.START].tolist() == pytest.approx([1, 2])
    s = f.sessions.iloc[0]
    assert s[S.END_TS] == pytest.approx(6) and s[S.STATUS] == "rejected"
    assert f.tasks.loc[0, "generate_s"] == pytest.approx(5)


def test_abort_then_continue_events_and_ttft(clock: Clock) -> None:
    """What the engine leaves for a call aborted twice: one ``continue`` event per
    continuation, at its time and version, and one TTFT (the first token's)."""
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0), tr.session():
        with tr.phase("generate"):
            clock.at(1)
            session_event(S.CONTINUE, version=4)
            clock.at(2)
            session_event(S.CONTINUE)
            clock.at(3)
        tr.annotate(ttft_s=0.5)
        tr.increment(continuations=2)
    tr.finalize(0, "accepted")
    f = tr.frames()
    ev = f.events
    assert ev[S.EVENT].tolist() == ["continue", "continue"]
    assert ev[S.TS].tolist() == pytest.approx([1, 2])
    assert ev[S.VERSION].tolist()[0] == 4 and pd.isna(ev[S.VERSION].iloc[1])
    assert ev[S.SESSION_ID].tolist() == [0, 0] and ev[S.TASK_ID].tolist() == [0, 0]
    s = f.sessions.iloc[0]
    assert s[S.TTFT_S] == 0.5 and s[S.CONTINUATIONS] == 2


def test_rejected_and_pending_side_by_side(clock: Clock) -> None:
    tr = Tracer()
    run_accepted(tr, clock, tid=0)
    clock.at(8)
    tr.register_task(1)
    clock.at(9)
    tr.mark(1, "dispatch")
    clock.at(10)
    f = tr.frames()
    assert f.tasks[S.STATUS].tolist() == ["accepted", "pending"]
    assert same(marks(f.tasks, 1), [8, 9, NAN, NAN, NAN])
    assert f.tasks.loc[1, S.QUEUE_S] == pytest.approx(1) and math.isnan(f.tasks.loc[1, S.TOTAL_S])
    tr.finalize(1, "rejected", reason="returned_none")
    g = tr.frames()
    assert g.tasks.loc[1, S.STATUS] == "rejected" and g.tasks.loc[1, S.END_TS] == pytest.approx(10)


# -- several processes, one time axis ------------------------------------------------------


def _process(clock: Clock, path: Path | None, worker: str, wall: float, ns: int) -> Tracer:
    """A tracer as another process would make it: its own perf clock and wall anchor."""
    clock.wall, clock.ns = wall, ns
    return Tracer(path=path, worker=worker)


def test_merge_of_several_processes_on_the_wall_clock(clock: Clock, tmp_path: Path) -> None:
    # process A: epoch at perf 5 s, wall 1000; process B started 2.5 s later (wall) on a
    # perf clock that reads 50 s there
    a = _process(clock, tmp_path / "a.jsonl", "w0", 1000.0, 5 * SEC)
    b = _process(clock, tmp_path / "b.jsonl", "w1", 1002.5, 50 * SEC)
    clock.ns = 5 * SEC + SEC  # A: 1 s after its epoch
    a.register_task(0)
    clock.ns = 5 * SEC + 3 * SEC
    a.finalize(0, "accepted")
    clock.ns = 50 * SEC + 2 * SEC  # B: 2 s after its epoch, i.e. wall 1004.5
    b.register_task(1)
    with b.task_scope(1), b.session():
        with b.phase("generate"):
            clock.ns = 50 * SEC + 4 * SEC
    b.finalize(1, "failed", error="x")
    clock.ns = 50 * SEC + 5 * SEC
    b.mark(1, "consume")
    a.close()
    b.close()
    expect_submit, expect_end = {0: 1.0, 1: 4.5}, {0: 3.0, 1: 6.5}
    merged = load_traces([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    assert merged.wall_epoch == pytest.approx(1000.0)  # the first file's anchor
    # one driver ingesting both processes' records lands on the same axis
    clock.wall, clock.ns = 1000.0, 7 * SEC  # anchored like A (its own perf clock differs)
    driver = Tracer(worker="driver")
    for p in (a, b):
        driver.ingest(p.drain_records())
    clock.ns = 7 * SEC + 6 * SEC  # wall 1006: the driver consumes task 0
    driver.mark(0, "consume")
    ingested = driver.frames()
    for f, consume0 in ((merged, NAN), (ingested, 6.0)):
        t = f.tasks
        assert list(t.index) == [0, 1] and t[S.WORKER].tolist() == ["w0", "w1"]
        for tid in (0, 1):
            assert t.loc[tid, S.SUBMIT_TS] == pytest.approx(expect_submit[tid], abs=1e-6)
            assert t.loc[tid, S.END_TS] == pytest.approx(expect_end[tid], abs=1e-6)
        assert t.loc[1, S.CONSUME_TS] == pytest.approx(7.5, abs=1e-6)  # B's own late mark
        assert same([t.loc[0, S.CONSUME_TS]], [consume0])
        sp = f.spans.iloc[0]
        assert (sp[S.START], sp[S.END]) == pytest.approx((4.5, 6.5), abs=1e-6)
        s = f.sessions.iloc[0]
        assert (s[S.START_TS], s[S.END_TS]) == pytest.approx((4.5, 6.5), abs=1e-6)
        assert t.loc[1, S.STATUS] == "failed" and t.loc[1, S.ERROR] == "x"


def test_same_task_id_in_two_workers_keeps_both_rows_and_their_marks(clock: Clock) -> None:
    """SPMD: every worker counts from 0, so (worker, task_id) is the key; a late mark goes
    to its own worker's row."""
    w0 = _process(clock, None, "w0", 1000.0, 5 * SEC)
    w1 = _process(clock, None, "w1", 1000.0, 9 * SEC)
    for w, off, status in ((w0, 5, "accepted"), (w1, 9, "rejected")):
        clock.ns = off * SEC + SEC
        w.register_task(0)
        clock.ns = off * SEC + 2 * SEC
        w.finalize(0, status)
        clock.ns = off * SEC + (3 if w is w0 else 4) * SEC
        w.mark(0, "consume")
    driver = _process(clock, None, "driver", 1000.0, 20 * SEC)
    driver.ingest(w0.drain_records())
    driver.ingest(w1.drain_records())
    t = driver.frames().tasks
    assert list(t.index) == [0, 0] and t[S.WORKER].tolist() == ["w0", "w1"]
    assert t[S.STATUS].tolist() == ["accepted", "rejected"]
    assert t[S.SUBMIT_TS].tolist() == pytest.approx([1, 1], abs=1e-6)
    assert t[S.CONSUME_TS].tolist() == pytest.approx([3, 4], abs=1e-6)


def test_reset_restarts_the_clock_and_keeps_live_tasks(clock: Clock) -> None:
    tr = Tracer()
    run_accepted(tr, clock, tid=0)
    tr.register_task(1)  # live across the reset
    clock.at(20)
    tr.reset()
    assert tr.epoch_ns == clock.ns and len(tr.frames().tasks) == 1
    clock.at(21)
    tr.finalize(1, "accepted")
    f = tr.frames()
    assert list(f.tasks.index) == [1]
    # marks from before the reset are on the old epoch: negative on the new one
    assert f.tasks.loc[1, S.SUBMIT_TS] == pytest.approx(7.25 - 20)
    assert f.tasks.loc[1, S.END_TS] == pytest.approx(1)
    tr.register_task(0)  # finished before the reset: its id is free again
    assert np.isnan(tr.frames().tasks.loc[0, S.END_TS])


def test_overlapping_sessions_wall_time_is_the_union_and_sums_add_up(clock: Clock) -> None:
    """Two sessions of one task generate at once (2..6 and 4..9), a task-level reward span
    (9..10) belongs to no session: the task's generate wall time is the union (7 s), its
    session-seconds the sum (9 s), each session its own span."""
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0):
        clock.at(2)
        a = tr.register_session()
        ga = tr.begin_phase("generate", session_id=a)
        clock.at(4)
        b = tr.register_session()
        gb = tr.begin_phase("generate", session_id=b)
        clock.at(6)
        tr.end_phase(ga)
        tr.end_session(a)
        clock.at(9)
        tr.end_phase(gb)
        tr.end_session(b)
        with tr.phase("reward"):
            clock.at(10)
    tr.finalize(0, "accepted")
    f = tr.frames()
    t = f.tasks.loc[0]
    assert t["generate_s"] == pytest.approx(7) and t["generate_session_s"] == pytest.approx(9)
    assert t["reward_s"] == pytest.approx(1)
    s = f.sessions
    assert s["generate_s"].tolist() == pytest.approx([4, 5])
    assert s["reward_s"].tolist() == [0, 0]  # the task-level span is in no session
    assert f.spans[S.SESSION_ID].isna().tolist() == [False, False, True]
