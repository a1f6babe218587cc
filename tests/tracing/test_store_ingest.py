"""The store's readers and record forms at their edges: column batches with session events
and late marks malformed one fault at a time (each refused with its own message, word for
word: a later check refusing the same batch for another reason does not count), records
malformed the same way, the worker and the time shift a header gives the records after it,
late marks before the epoch, the record form drained from cursors, attributes of a
snapshot with live tasks, and attribute values of a subclass of a scalar type."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rollout_kit import ConfigError, TraceSchemaError
from rollout_kit.tracing import Tracer, annotate
from rollout_kit.tracing import schema as S
from rollout_kit.tracing._frames.build import build_traces
from rollout_kit.tracing._store import FORMAT, Store, check_attrs
from tests.tracing._batches import Record, set_at, traced_batch

MS = 1_000_000  # ns


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Record, Record]:
    """The header and the one column batch of a small trace: two tasks of one session and
    one span each, a session attribute, a session event of each task, a late mark."""
    header, columns = traced_batch(tmp_path / "t.jsonl", events=True)
    assert columns["kind"] == "columns" and len(columns["events"]["task"]) == 2
    assert len(columns["marks"]["task_id"]) == 1
    return header, columns


def _length(got: int, want: int) -> str:
    return repr(ValueError(f"a column has {got} values, expected {want}"))


_OBJECTS = repr(TypeError("expected a list of ints, got object values"))
_SPAN_SESSION = repr(ValueError("a span's session index is outside its task's sessions"))
_EVENT_TASK = repr(ValueError("a session event's task row is outside the record"))
_EVENT_ORDER = repr(ValueError("session events are not in task order or name a session "
                               "outside their task"))
_SPARSE = repr(TypeError("a sparse column is not [rows, values]"))
_SPARSE_ROWS = repr(ValueError("a sparse column's rows are out of range or not increasing"))
_COUNTS = repr(ValueError("the tasks' n_sessions / n_spans do not match the sessions and "
                          "spans in the record"))

# (what, change, the exception's repr at the end of the one-line error)
FAULTS: list[tuple[str, Callable[[Record], None], str]] = [
    ("task ids not a list", set_at("tasks.task_id", "01"),
     repr(TypeError("expected a list of ints, got str"))),
    ("n_spans not ints", set_at("tasks.n_spans", [1.5, 1]),
     repr(TypeError("expected a list of ints, got float64 values"))),
    ("n_sessions length", set_at("tasks.n_sessions", [2]), _length(1, 2)),
    ("n_spans length", set_at("tasks.n_spans", [2]), _length(1, 2)),
    ("negative n_sessions", set_at("tasks.n_sessions", [-1, 3]), _COUNTS),
    ("task status length", set_at("tasks.status", [1]), _length(1, 2)),
    ("task worker length", set_at("tasks.worker", [0]), _length(1, 2)),
    ("names not a list", set_at("names.status", "x"),
     repr(TypeError("a names table is not a list"))),
    ("session end length", set_at("sessions.end", [1]), _length(1, 2)),
    ("session end length with a null", set_at("sessions.end", [None]), _length(1, 2)),
    ("span end length", set_at("spans.end", [1]), _length(1, 2)),
    ("span start missing", set_at("spans.start", [None, 1]), _OBJECTS),
    ("span session below -1", set_at("spans.session", [-2, 0]), _SPAN_SESSION),
    ("span session one past", set_at("spans.session", [1, 0]), _SPAN_SESSION),
    ("event task one past", set_at("events.task", [0, 2]), _EVENT_TASK),
    ("event task negative", set_at("events.task", [-1, 1]), _EVENT_TASK),
    ("events out of task order", set_at("events.task", [1, 0]), _EVENT_ORDER),
    ("event session one past", set_at("events.session", [0, 1]), _EVENT_ORDER),
    ("event session negative", set_at("events.session", [-1, 0]), _EVENT_ORDER),
    ("event session length", set_at("events.session", [0]), _length(1, 2)),
    ("event kind length", set_at("events.kind", [0]), _length(1, 2)),
    ("event ts length", set_at("events.ts", [1]), _length(1, 2)),
    ("event ts missing", set_at("events.ts", [None, 1]), _OBJECTS),
    ("mark worker length", set_at("marks.worker", [0, 0]), _length(2, 1)),
    ("mark event length", set_at("marks.event", [0, 0]), _length(2, 1)),
    ("mark ts length", set_at("marks.ts", [1, 2]), _length(2, 1)),
    ("mark ts missing", set_at("marks.ts", [None]), _OBJECTS),
    ("sparse column of three", set_at("session_attrs.server", [[0], ["a"], []]), _SPARSE),
    ("sparse column not a list", set_at("session_attrs.server", ([0], ["a"])), _SPARSE),
    ("sparse row one past", set_at("session_attrs.server", [[0, 2], ["a", "b"]]), _SPARSE_ROWS),
    ("sparse value not a scalar", set_at("session_attrs.server", [[0], [[1, 2]]]),
     repr(TypeError("attribute value [1, 2] is not a JSON scalar"))),
    ("attribute name not a string", set_at("session_attrs", {5: [[0], ["a"]]}),
     repr(ValueError("attribute name 5 is not a string"))),
]


@pytest.mark.parametrize("what,change,error", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_malformed_batch_is_refused_with_its_own_message(
        batch: tuple[Record, Record], what: str, change: Callable[[Record], None],
        error: str) -> None:
    header, columns = batch
    bad = copy.deepcopy(columns)
    change(bad)
    with pytest.raises(TraceSchemaError) as info:
        Tracer().ingest([header, bad])
    assert str(info.value) == f"records: malformed record 1: {error}"
    Tracer().ingest([header, columns])  # the batch itself is fine


def test_a_batch_without_late_marks_or_events_has_no_columns_for_them(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, parquet=False)
    tr.register_task(0)
    tr.finalize(0, "accepted")
    tr.close()
    _, columns = (json.loads(line) for line in path.read_text().splitlines())
    assert "marks" not in columns and "events" not in columns
    assert columns["tasks"]["task_id"] == [0]


def _header(**changes: Any) -> Record:
    return {"kind": "header", "format": FORMAT, "schema": S.SCHEMA_VERSION,
            "wall_epoch": 1.7e9, "epoch_ns": 0, "worker": "hw", "pid": 1, **changes}


def _task(tid: int, **changes: Any) -> Record:
    return {"kind": "task", "task_id": tid, "status": "accepted", "reason": None,
            "error": None, "marks": [0, 0, 0, 0, None], "attrs": {},
            "sessions": [{"session_id": tid, "status": "accepted", "start": 0, "end": 9 * MS,
                          "attrs": {}}],
            "spans": [[0, "generate", 2 * MS, 5 * MS, 0]], **changes}


def _mark(tid: int, ts: int, **changes: Any) -> Record:
    return {"kind": "mark", "task_id": tid, "event": "consume", "ts": ts, **changes}


@pytest.mark.parametrize("records,error", [
    ([_header(format="other")], "records: record 0 is not a rollout_kit.trace header"),
    ([_header(), {"kind": "other"}], "records: record 1 has unknown kind 'other'"),
    ([_header(), _task(0, marks=[0, 0, 0, 0])],
     "records: malformed record 1: ValueError('marks must have 5 entries')"),
    ([_header(), _task(0, error=[])],
     "records: malformed record 1: ValueError(\"a task's error must be a string or null, "
     "got list\")"),
    ([_header(), _task(0, reason=3)],
     "records: malformed record 1: ValueError(\"a task's reason must be a string or null, "
     "got int\")"),
], ids=["not a header", "unknown kind", "four marks", "error not text", "reason not text"])
def test_malformed_records_are_refused_with_their_own_message(records: list[Record],
                                                              error: str) -> None:
    with pytest.raises(TraceSchemaError) as info:
        Store().ingest(records, 0, 1.7e9)
    assert str(info.value) == error


def test_records_without_a_worker_are_the_headers() -> None:
    store = Store()
    store.ingest([_header(), _task(7), _task(7, worker="w2"),
                  _mark(7, 20 * MS), _mark(7, 30 * MS, worker="w2")], 0, 1.7e9)
    f = build_traces(store.snapshot(), 0, 1.7e9)
    assert f.tasks[S.WORKER].tolist() == ["hw", "w2"]
    assert f.tasks[S.CONSUME_TS].tolist() == [0.02, 0.03]


def test_a_later_header_shifts_the_times_by_the_difference_of_the_anchors() -> None:
    store = Store()
    # the second segment's clock started 1.25 s after this store's: its times move by that
    store.ingest([_header(), _task(1), _header(wall_epoch=1.7e9 + 1.25, epoch_ns=3 * MS),
                  _task(2), _mark(2, 4 * MS)], 10 * MS, 1.7e9)
    snap = store.snapshot()
    # times are relative to each header's epoch_ns: + this store's epoch_ns + the shift
    assert snap.span_start.tolist() == [12 * MS, 2 * MS + 10 * MS + 1_250_000_000]
    assert snap.mark_ts.tolist() == [4 * MS + 10 * MS + 1_250_000_000]


def test_a_late_mark_before_the_epoch() -> None:
    store = Store()
    # a segment anchored 1 s before this store's epoch: its mark lands at -0.9 s
    store.ingest([_header(wall_epoch=1.7e9 - 1.0), _task(3), _mark(3, 100 * MS)], 0, 1.7e9)
    f = build_traces(store.snapshot(), 0, 1.7e9)
    assert f.tasks.loc[3, S.CONSUME_TS] == pytest.approx(-0.9)


def test_records_from_cursors_hold_only_the_rows_after_them() -> None:
    store = Store()
    store.ingest([_header(), _task(0, attrs={"split": "a"}), _mark(0, 20 * MS)], 0, 1.7e9)
    first, cursor = store.records(0, 0, 0, 0, 0)
    assert [r["kind"] for r in first] == ["task", "mark"]
    assert cursor == (1, 1, 1, 1) and all(type(c) is int for c in cursor)
    store.ingest([_header(), _task(1, attrs={"split": "b"}), _mark(1, 30 * MS),
                  _mark(0, 40 * MS, event="end")], 0, 1.7e9)
    second, cursor = store.records(0, *cursor)
    assert [(r["kind"], r["task_id"]) for r in second] == [("task", 1), ("mark", 1), ("mark", 0)]
    assert second[0]["attrs"] == {"split": "b"}
    assert [(r["event"], r["ts"]) for r in second[1:]] == [("consume", 30 * MS),
                                                             ("end", 40 * MS)]
    assert cursor == (2, 2, 2, 3) and all(type(c) is int for c in cursor)
    assert store.records(0, *cursor) == ([], cursor)


def test_frames_with_a_live_task_keep_the_finished_tasks_attributes() -> None:
    tr = Tracer()
    tr.register_task(0, split="train")
    with tr.task_scope(0), tr.session():
        annotate(server="h:0")
    tr.finalize(0, "accepted")
    tr.register_task(1)  # still running: frames copy the store to add it
    f = tr.frames()
    assert f.tasks[S.STATUS].tolist() == ["accepted", "pending"]
    assert f.tasks["split"].tolist() == ["train", pd.NA]
    assert f.sessions[S.SERVER].tolist() == ["h:0"]
    tr.finalize(1, "accepted")


class _Name(str):
    pass


def test_attribute_values_of_a_subclass_of_a_scalar_type_are_accepted() -> None:
    check_attrs({"score": np.float64(0.5), "name": _Name("a"), "n": True}, frozenset())
    with pytest.raises(ConfigError, match="must be None, bool, int, float or str, got list"):
        check_attrs({"bad": [1]}, frozenset())
