"""The tracer's live table at its edges: the replay coordinates it counts for a trajectory
dump (per session and outside any), attributes set and added in several calls, spans still
open at ``finalize``, session ids across ``reset``, and the exact errors for tasks and
sessions that are not live."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_kit import TraceStateError, UnknownTaskIdError
from rollout_kit.tracing import (
    Tracer,
    TrajectoryDump,
    annotate,
    dump_call,
    increment,
    trace_phase,
)
from rollout_kit.tracing import (
    schema as S,
)
from rollout_kit.tracing._live import CLOSED, ENDED
from rollout_kit.tracing.dumps import Coordinate


def _coordinate() -> Coordinate:
    got = dump_call()
    assert got is not None
    return got[1]


def test_dump_coordinates_count_calls_per_session_and_outside(tmp_path: Path) -> None:
    tr = Tracer(dump=TrajectoryDump(tmp_path))
    tr.register_task(3)
    assert dump_call() is None  # no task is current
    with tr.task_scope(3):
        assert _coordinate() == Coordinate(3, None, -1, 0)  # outside a session
        assert _coordinate() == Coordinate(3, None, -1, 1)
        with tr.session() as a:
            assert _coordinate() == Coordinate(3, a, 0, 0)
            assert _coordinate() == Coordinate(3, a, 0, 1)
            assert _coordinate() == Coordinate(3, a, 0, 2)
        with tr.session() as b:
            assert _coordinate() == Coordinate(3, b, 1, 0)  # the task's second session
        assert _coordinate() == Coordinate(3, None, -1, 2)  # its own count went on
    assert tr.live.next_call(3, 12345) == (-1, 3)  # an unknown session: the task's count
    tr.finalize(3, "accepted")
    assert tr.live.next_call(3, None) is None  # not live any more


def test_attributes_set_and_added_over_several_calls() -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0), tr.session():
        increment(retries=1)  # on a session with no attribute yet
        increment(retries=2)
        annotate(server="h:1")
        annotate(rid="r-1")  # a second annotate keeps the first one's keys
    tr.finalize(0, "accepted")
    s = tr.frames().sessions.iloc[0]
    assert (s[S.RETRIES], s[S.SERVER], s["rid"]) == (3, "h:1", "r-1")


def test_spans_still_open_at_finalize_are_closed_quietly() -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0):
        with trace_phase("live-edge-done") as done:
            pass
        assert done.state == ENDED and done.task is None
        scope = trace_phase("live-edge-open")
        with scope:
            tr.finalize(0, "accepted")
            assert scope.state == CLOSED and scope.task is None
        assert scope.state == CLOSED  # its exit after finalize changes nothing
    sp = tr.frames().spans
    assert sp[S.PHASE].tolist() == ["live-edge-done", "live-edge-open"]
    assert sp[S.CLOSED_AT_FINALIZE].tolist() == [False, True]


def test_session_ids_across_reset() -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.session(task_id=0) as first:
        tr.reset()  # a session is live: ids go on, never reused
        with tr.session(task_id=0) as second:
            pass
    assert (first, second) == (0, 1)
    tr.finalize(0, "accepted")
    tr.reset()  # nothing live: ids start again at 0
    tr.register_task(0)
    with tr.session(task_id=0) as again:
        pass
    assert again == 0


def test_events_only_on_live_sessions() -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.session(task_id=0) as sid:
        assert sid is not None
        assert tr.live.add_event(sid, 0, 0, 1) is True
    assert tr.live.add_event(sid + 1, 0, 0, 1) is False


def test_errors_for_tasks_and_sessions_that_are_not_live() -> None:
    tr = Tracer()
    tr.register_task(1)
    with pytest.raises(UnknownTaskIdError,
                       match="register_session: task_id 5 was never registered in this tracer"):
        with tr.session(task_id=5):
            pass
    with pytest.raises(UnknownTaskIdError,
                       match=r"finalize\(\): task_id 3 was never registered in this tracer"):
        tr.finalize(3, "accepted")
    with tr.task_scope(1):
        tr.finalize(1, "accepted")
        with pytest.raises(UnknownTaskIdError,
                           match=r"phase 'live-edge-late': task 1 is not live in this tracer"):
            with trace_phase("live-edge-late"):
                pass
    with pytest.raises(TraceStateError,
                       match=r"^register_session: task_id 1 is already finalized$"):
        with tr.session(task_id=1):
            pass
    with pytest.raises(TraceStateError, match=r"^task_id 1 was already finalized$"):
        tr.finalize(1, "accepted")
