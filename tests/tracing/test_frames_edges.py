"""The trace frames at their edges: the events frame of several tasks and sessions (which
session an event belongs to, the task order, a fresh index, NA versions), the empty events
frame's dtypes, and ``Traces.to_datetime`` of a column and of a number."""

from __future__ import annotations

import pandas as pd

from rollout_kit.tracing import Tracer, annotate, session_event
from rollout_kit.tracing import schema as S
from rollout_kit.tracing.frames import Traces, empty_events

_EVENT_DTYPES = {S.TASK_ID: "int64", S.SESSION_ID: "Int64", S.EVENT: "category",
                 S.TS: "float64", S.VERSION: "Int64"}


def test_events_of_several_tasks_and_sessions() -> None:
    tr = Tracer()
    for tid in (5, 2):
        tr.register_task(tid)
    sids: dict[tuple[int, int], int] = {}
    for tid in (5, 2):  # task 5 records first: the frame is still in task order
        with tr.task_scope(tid):
            for local in range(3):
                with tr.session() as sid:
                    assert sid is not None
                    sids[(tid, local)] = sid
                    if local > 0:  # none in the first session: the others' rows shift
                        session_event("continue", version=10 * tid + local)
                        session_event("continue")  # no version: NA, never 0
        tr.finalize(tid, "accepted")
    ev = tr.frames().events
    assert list(ev.columns) == list(S.EVENT_COLUMNS)
    assert {c: str(t) for c, t in ev.dtypes.items()} == _EVENT_DTYPES
    assert ev.index.tolist() == list(range(8))  # a fresh index after the sort
    assert ev[S.TASK_ID].tolist() == [2, 2, 2, 2, 5, 5, 5, 5]
    assert ev[S.SESSION_ID].tolist() == [sids[(2, 1)], sids[(2, 1)], sids[(2, 2)],
                                         sids[(2, 2)], sids[(5, 1)], sids[(5, 1)],
                                         sids[(5, 2)], sids[(5, 2)]]
    assert ev[S.VERSION].tolist() == [21, pd.NA, 22, pd.NA, 51, pd.NA, 52, pd.NA]
    assert (ev[S.EVENT] == "continue").all() and ev[S.TS].is_monotonic_increasing is False


def test_the_empty_events_frame_has_the_columns_and_dtypes() -> None:
    ev = empty_events()
    assert list(ev.columns) == list(S.EVENT_COLUMNS) and len(ev) == 0
    assert {c: str(t) for c, t in ev.dtypes.items()} == _EVENT_DTYPES
    assert list(ev[S.EVENT].cat.categories) == list(S.SESSION_EVENTS)
    tr = Tracer()
    tr.register_task(0)
    tr.finalize(0, "accepted")
    f = tr.frames()
    assert {c: str(t) for c, t in f.events.dtypes.items()} == _EVENT_DTYPES


def test_to_datetime_of_a_column_and_of_a_number() -> None:
    tr = Tracer()
    tr.register_task(0)
    tr.finalize(0, "accepted")
    f = tr.frames()
    t = Traces(f.tasks, f.sessions, f.spans, wall_epoch=1_700_000_000.0)
    one = t.to_datetime(1.5)
    assert one == pd.Timestamp("2023-11-14 22:13:21.5", tz="UTC")
    col = t.to_datetime(pd.Series([0.0, 2.25]))
    assert col.tolist() == [pd.Timestamp("2023-11-14 22:13:20", tz="UTC"),
                            pd.Timestamp("2023-11-14 22:13:22.25", tz="UTC")]
    assert str(col.dtype) == "datetime64[ns, UTC]"


def test_attribute_columns_take_the_kind_of_their_values() -> None:
    tr = Tracer()
    rows = [{"mixed": 1, "number": 1, "none": None, "flag": True, "word": "a", "count": 3},
            {"mixed": "a", "number": 2.5, "none": None, "flag": False, "word": "b",
             "count": 4}]
    for tid, attrs in enumerate(rows):
        tr.register_task(tid)
        with tr.task_scope(tid), tr.session():
            annotate(**attrs)  # type: ignore[arg-type]
        tr.finalize(tid, "accepted")
    s = tr.frames().sessions
    kinds = {c: str(s[c].dtype) for c in rows[0]}
    assert kinds == {"mixed": "object", "number": "float64", "none": "object",
                     "flag": "boolean", "word": "string", "count": "Int64"}
    assert s["mixed"].tolist() == [1, "a"] and s["number"].tolist() == [1.0, 2.5]
    assert s["none"].isna().all()
