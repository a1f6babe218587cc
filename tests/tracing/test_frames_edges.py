"""The trace frames at their edges: the events frame of several tasks and sessions (which
session an event belongs to, the task order, a fresh index, NA versions), the empty events
frame's dtypes, ``Traces.to_datetime`` of a column and of a number; attribute columns by the
kind of their values (an explicit None is NA), a Categorical read from Parquet, token counts
annotated as text, exact span durations, dtypes and servers (a span in no session has none);
late marks of ingested tasks (the same id in two workers, tasks that are not there), the
order of rows with the same task id; the sort bases of the span unions (one while the int64
keys fit, per task from the first width that would overflow, tasks of one span or none,
spans in no session) and the union without int64 keys, exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rollout_kit.tracing import (
    Tracer,
    annotate,
    load_traces,
    session_event,
)
from rollout_kit.tracing import (
    _phases as phases,
)
from rollout_kit.tracing import (
    schema as S,
)
from rollout_kit.tracing._frames import build as frames
from rollout_kit.tracing._frames.build import (
    Traces,
    _column,
    _union_seconds,
    build_traces,
    empty_events,
)
from rollout_kit.tracing._store import FORMAT, Store

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


def _annotated_sessions(tr: Tracer, rows: list[dict[str, object]]) -> None:
    """Task ``i`` with one session annotated with ``rows[i]``, finalized accepted."""
    for tid, attrs in enumerate(rows):
        tr.register_task(tid)
        with tr.task_scope(tid), tr.session():
            annotate(**attrs)  # type: ignore[arg-type]
        tr.finalize(tid, "accepted")


def test_attribute_columns_take_the_kind_of_their_values() -> None:
    tr = Tracer()
    rows = [{"mixed": 1, "number": 1, "none": None, "flag": True, "word": "a", "count": 3},
            {"mixed": "a", "number": 2.5, "none": None, "flag": False, "word": "b",
             "count": 4}]
    _annotated_sessions(tr, rows)
    s = tr.frames().sessions
    kinds = {c: str(s[c].dtype) for c in rows[0]}
    assert kinds == {"mixed": "object", "number": "float64", "none": "object",
                     "flag": "boolean", "word": "string", "count": "Int64"}
    assert s["mixed"].tolist() == [1, "a"] and s["number"].tolist() == [1.0, 2.5]
    assert s["none"].isna().all()


# -- frames built from records (one store, times in ns from epoch 0) -------------------------

MS = 1_000_000  # ns
_HEADER = {"kind": "header", "format": FORMAT, "schema": S.SCHEMA_VERSION, "wall_epoch": 1.7e9,
           "epoch_ns": 0, "worker": "w0", "pid": 1}


def _task(tid: int, sessions: list[dict[str, object]],
          spans: list[tuple[int, str, int, int]], worker: str = "w0",
          end: int = 0) -> dict[str, object]:
    """A task record: sessions as their attributes; spans as (session, phase, start, end)."""
    return {
        "kind": "task", "task_id": tid, "worker": worker, "status": "accepted",
        "reason": None, "error": None, "marks": [0, 0, 0, end, None], "attrs": {},
        "sessions": [{"session_id": 10 * tid + k, "status": "accepted", "start": 0,
                      "end": end, "attrs": attrs} for k, attrs in enumerate(sessions)],
        "spans": [[sess, ph, a, b, 0] for sess, ph, a, b in spans],
    }


def _frames(*records: dict[str, object]) -> Traces:
    store = Store()
    store.ingest([_HEADER, *records], 0, 1.7e9)
    return build_traces(store.snapshot(), 0, 1.7e9)


def test_attribute_values_of_each_kind_are_kept() -> None:
    tr = Tracer()
    rows: list[dict[str, object]] = [{"flag": True, "number": 2.5, "word": "a"},
                                     {"flag": False, "number": None, "word": None}]
    _annotated_sessions(tr, rows)
    s = tr.frames().sessions
    assert str(s["flag"].dtype) == "boolean" and s["flag"].tolist() == [True, False]
    # an explicit None is NA, not a reason to fall back to an object column
    assert str(s["number"].dtype) == "float64"
    assert s["number"].tolist() == pytest.approx([2.5, np.nan], nan_ok=True)
    assert str(s["word"].dtype) == "string" and s["word"].tolist() == ["a", pd.NA]


@pytest.mark.parametrize("parquet", [False, True], ids=["memory", "parquet"])
def test_an_explicit_none_among_bools_or_ints_is_na(tmp_path: Path, parquet: bool) -> None:
    """``annotate(flag=None)`` beside ``flag=True`` is NA, not False; ``[3, None]`` stays an
    Int64 column (found by the mutation round: bool() of None was False, ints fell back to
    objects). Also after the Parquet round trip, where such a mix is a JSON field."""
    tr = Tracer(path=tmp_path / "t.jsonl")
    rows: list[dict[str, object]] = [{"flag": True, "count": 3}, {"flag": None, "count": None},
                                     {"flag": False, "count": 0}, {}]
    _annotated_sessions(tr, rows)
    if parquet:
        tr.close()
        s = load_traces(tmp_path / "t.parquet").sessions
    else:
        s = tr.frames().sessions
    assert str(s["flag"].dtype) == "boolean"
    assert s["flag"].tolist() == [True, pd.NA, False, pd.NA]
    assert str(s["count"].dtype) == "Int64"
    assert s["count"].tolist() == [3, pd.NA, 0, pd.NA]


def test_a_categorical_of_strings_becomes_a_string_column() -> None:
    # what a Parquet file gives for a string attribute: codes into its words
    words = pd.Categorical.from_codes([1, 0], categories=pd.Index(["a", "b"], dtype=object))
    for dtype in (None, "string"):
        col = _column(4, np.array([0, 2]), words, dtype)
        assert str(col.dtype) == "string"
        assert col.tolist() == ["b", pd.NA, "a", pd.NA]
    # a column whose every value is null in the file: no words at all, still strings
    none = pd.Categorical.from_codes([], categories=pd.Index([], dtype=object))
    col = _column(3, np.empty(0, dtype=np.int64), none, "string")
    assert str(col.dtype) == "string" and col.isna().all() and len(col) == 3


def test_token_counts_annotated_as_text_sum_what_is_numeric() -> None:
    f = _frames(
        _task(0, [{"prompt_tokens": "abc", "completion_tokens": 1},
                  {"prompt_tokens": "7", "completion_tokens": 2}, {"prompt_tokens": 5}], []),
        _task(1, [{"prompt_tokens": "abc"}], []),
        _task(2, [], []),
    )
    # "abc" is no count: the session column keeps the values as they were given
    assert f.sessions[S.PROMPT_TOKENS].dtype == object
    assert f.sessions[S.PROMPT_TOKENS].tolist() == ["abc", "7", 5, "abc"]
    tasks = f.tasks
    assert str(tasks[S.PROMPT_TOKENS].dtype) == "Int64"
    assert tasks[S.PROMPT_TOKENS].tolist() == [12, pd.NA, pd.NA]  # "7" + 5; none numeric; none
    assert tasks[S.COMPLETION_TOKENS].tolist() == [3, pd.NA, pd.NA]


def test_span_columns_exact_durations_dtypes_and_servers() -> None:
    f = _frames(
        _task(0, [{"server": "s0"}], [(-1, "toolcall", 0, 3), (0, "generate", 7, 20)]),
        _task(1, [{"server": "s1"}, {"server": "s2"}],
              [(1, "generate", 1, 4), (-1, "reward", 2, 9)]),
    )
    spans = f.spans
    assert spans[S.DURATION].tolist() == [3 / 1e9, 13 / 1e9, 3 / 1e9, 7 / 1e9]  # exactly
    # a span in no session has no server (never the last session's)
    assert spans[S.SERVER].tolist() == [pd.NA, "s0", "s2", pd.NA]
    assert spans[S.SESSION_ID].tolist() == [pd.NA, 0, 11, pd.NA]
    assert {c: str(spans[c].dtype) for c in (S.CLOSED_AT_FINALIZE, S.RAISED, S.DURATION)} == {
        S.CLOSED_AT_FINALIZE: "bool", S.RAISED: "bool", S.DURATION: "float64"}
    assert str(f.tasks[S.N_SESSIONS].dtype) == "int64"
    assert f.tasks[S.N_SESSIONS].tolist() == [1, 2]


def test_late_marks_of_ingested_tasks_with_the_same_id_in_two_workers() -> None:
    def mark(tid: int, worker: str, ts: int) -> dict[str, object]:
        return {"kind": "mark", "task_id": tid, "worker": worker, "event": "consume", "ts": ts}

    f = _frames(_task(7, [], [], worker="w0"), _task(8, [], [], worker="w0"),
                _task(7, [], [], worker="w1"),
                mark(7, "w1", 5 * MS), mark(8, "w0", 6 * MS), mark(7, "w1", 9 * MS),
                mark(7, "w2", 4 * MS), mark(9, "w0", 3 * MS))  # no such tasks: left out
    t = f.tasks
    assert t.index.tolist() == [7, 7, 8] and t[S.WORKER].tolist() == ["w0", "w1", "w0"]
    assert t[S.CONSUME_TS].tolist() == pytest.approx([np.nan, 0.009, 0.006], nan_ok=True)
    # one id source: the plain lookup, the last mark of a task wins
    f = _frames(_task(3, [], []), _task(1, [], []), mark(1, "w0", 2 * MS),
                mark(3, "w0", 4 * MS), mark(1, "w0", 8 * MS), mark(5, "w0", MS))
    assert f.tasks.index.tolist() == [1, 3]
    assert f.tasks[S.CONSUME_TS].tolist() == [0.008, 0.004]


def test_rows_of_the_same_task_id_keep_their_order_and_sessions_are_sorted() -> None:
    # 2 x 20 tasks (enough rows for an unstable sort to reorder equal ids), in descending
    # id order, the same ids from two workers (SPMD duplicates)
    recs = [_task(tid, [{}], [], worker=w) for w in ("w0", "w1") for tid in range(19, -1, -1)]
    f = _frames(*recs)
    t = f.tasks
    assert t.index.tolist() == [tid for tid in range(20) for _ in (0, 1)]
    assert t[S.WORKER].tolist() == ["w0", "w1"] * 20
    assert f.sessions.index.tolist() == [(tid, 10 * tid) for tid in range(20) for _ in (0, 1)]
    assert f.sessions.index.is_monotonic_increasing


# -- per-task sort bases: the int64 keys of the span unions -----------------------------------

def _spy_bases(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """Record, per call of ``_union_seconds``, whether the base is per span and whether the
    sort keys ``group * width + start - base`` fit in int64 (the fast sort)."""
    calls: list[tuple[bool, bool]] = []

    def spy(group: np.ndarray, start: np.ndarray, end: np.ndarray, dur: np.ndarray,
            base: np.ndarray | int, size: int, *, singles: bool) -> np.ndarray:
        if group.size:
            width = int((np.maximum(end, start) - base).max()) + 1
            calls.append((isinstance(base, np.ndarray), size * width < 2**63))
        return _union_seconds(group, start, end, dur, base, size, singles=singles)

    monkeypatch.setattr(frames, "_union_seconds", spy)
    return calls


def test_one_sort_base_while_the_keys_fit_and_per_task_bases_from_the_first_width_that_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_bases(monkeypatch)
    n_phase = len(phases.registered_phases())
    k = 2 * n_phase  # two tasks, two sessions: the largest group code is below k
    edge = -(-(2**63) // k)  # the smallest span width (last end - first start + 1) that overflows
    origin = 1000 * MS  # spans start well after the epoch: a width is not the last end + 1
    for width, per_task in ((edge - 1, False), (edge, True)):
        calls.clear()
        last = origin + width - 1
        f = _frames(_task(0, [{}], [(0, "generate", origin, origin + MS)]),
                    _task(1, [{}], [(0, "generate", last - 2 * MS, last)]))
        assert calls == [(per_task, True)] * 2  # tasks, sessions: both fit in int64
        assert f.tasks["generate_s"].tolist() == [0.001, 0.002]
        assert f.sessions["generate_s"].tolist() == [0.001, 0.002]


def test_per_task_bases_with_tasks_of_one_span_none_and_task_level_spans(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_bases(monkeypatch)
    far = 2**62  # ns: one base for the whole run would overflow the keys
    f = _frames(
        _task(1, [{}], [(0, "generate", 5 * MS, 9 * MS)]),  # one span
        _task(2, [{}, {}], [(0, "generate", far, far + 4 * MS),
                            (0, "generate", far + 2 * MS, far + 6 * MS),  # overlaps
                            (-1, "toolcall", far + MS, far + 3 * MS),  # in no session
                            (1, "generate", far + 5 * MS, far + 8 * MS)]),
        _task(3, [{}], []),  # none (the last task)
    )
    assert calls == [(True, True), (True, True)]
    t = f.tasks
    assert t["generate_s"].tolist() == pytest.approx([0.004, 0.008, 0.0])
    assert t["generate_session_s"].tolist() == pytest.approx([0.004, 0.011, 0.0])
    assert t["toolcall_s"].tolist() == pytest.approx([0.0, 0.002, 0.0])
    assert f.sessions["generate_s"].tolist() == pytest.approx([0.004, 0.006, 0.003, 0.0])


def test_union_without_int64_keys_exact() -> None:
    # width 2**62 + 1 over 4 groups: the keys would overflow, the lexsort way is taken.
    # group 0: a huge span; 1: [0, 100] ∪ [50, 150] ∪ [60, 70] (nested: adds nothing);
    # 2: one span (with singles it is never sorted); 3: none (the last group)
    group = np.array([0, 0, 1, 1, 1, 2])
    start = np.array([0, 1, 0, 50, 60, 5], dtype=np.int64)
    end = np.array([2**62, 2, 100, 150, 70, 8], dtype=np.int64)
    want = [2**62 / 1e9, 100 / 1e9 + 50 / 1e9, 3 / 1e9, 0.0]
    for singles in (False, True):
        got = _union_seconds(group, start, end, (end - start) / 1e9, 0, 4, singles=singles)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
