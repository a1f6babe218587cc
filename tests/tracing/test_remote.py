"""``reanchor``: a task traced in another process joins this process's time axis."""

from __future__ import annotations

import math

import pytest

from rollout_kit import TraceSchemaError
from rollout_kit.tracing import Tracer, reanchor
from rollout_kit.tracing import _codes as codes
from rollout_kit.tracing._codes import CONSUME, DISPATCH, END, START, SUBMIT


def _header(wall_epoch: float, worker: str) -> dict[str, object]:
    return {"kind": "header", "format": "rollout_kit.trace", "schema": 1,
            "wall_epoch": wall_epoch, "epoch_ns": 0, "worker": worker, "pid": 1}


def _task(marks: list[int | None], worker: str) -> dict[str, object]:
    return {"kind": "task", "task_id": 7, "worker": worker, "status": "accepted",
            "reason": None, "error": None, "marks": marks, "attrs": {}, "sessions": [],
            "spans": []}


def test_mark_codes_follow_the_schema() -> None:
    from rollout_kit.tracing.schema import LIFECYCLE_EVENTS
    assert [LIFECYCLE_EVENTS[c] for c in (SUBMIT, DISPATCH, START, END, CONSUME)] == [
        "submit", "dispatch", "start", "end", "consume"]
    assert codes.EVENT_CODES["consume"] == CONSUME


def test_local_marks_are_shifted_onto_the_remote_axis_and_consume_dropped() -> None:
    # remote clock 2 s ahead; its epoch 0.5 s after the local one (true time)
    remote_head = _header(1000.5 + 2.0, "w0")
    remote = _task([1, 2, 3_000, 9_000, 10_000], "w0")
    local_head = _header(1000.0, "ctrl")
    local = _task([100, 200, None, None, None], "ctrl")
    head, rec = reanchor(remote_head, remote, clock_offset_s=2.0, local=(local_head, local))
    assert head["wall_epoch"] == pytest.approx(1000.5)
    # local t -> remote t - 0.5 s
    assert rec["marks"] == [100 - 500_000_000, 200 - 500_000_000, 3_000, 9_000, None]
    assert remote["marks"] == [1, 2, 3_000, 9_000, 10_000]  # inputs untouched
    assert remote_head["wall_epoch"] == 1002.5


def test_missing_local_marks_keep_the_remote_ones_and_codes_are_configurable() -> None:
    head, rec = reanchor(_header(5.0, "w"), _task([1, 2, 3, 4, 5], "w"),
                         local=(_header(5.0, "c"), _task([10, None, None, None, None], "c")),
                         local_marks=(SUBMIT, DISPATCH), drop_marks=())
    assert rec["marks"] == [10, 2, 3, 4, 5] and head["wall_epoch"] == 5.0
    _, rec = reanchor(_header(5.0, "w"), _task([1, 2, 3, 4, 5], "w"), drop_marks=(END,))
    assert rec["marks"] == [1, 2, 3, None, 5]


def test_malformed_input_raises_trace_schema_error() -> None:
    with pytest.raises(TraceSchemaError):
        reanchor({"kind": "header"}, _task([1, 2, 3, 4, 5], "w"))
    with pytest.raises(TraceSchemaError):
        reanchor(_header(1.0, "w"), {"kind": "task"})


def test_ingested_record_matches_what_each_side_saw() -> None:
    ctrl = Tracer(worker="ctrl")  # submits and dispatches
    ctrl.register_task(7)
    ctrl.mark(7, "dispatch")
    worker = Tracer(worker="w0")  # runs the task
    worker.register_task(7)
    worker.mark(7, "start")
    with worker.session(7), worker.phase("generate"):
        pass
    worker.mark(7, "consume")  # the worker's private consume: dropped
    worker.finalize(7, "accepted")
    ctrl.finalize(7, "accepted")
    chead, crec = ctrl.drain_records()
    whead, wrec = worker.drain_records()
    skewed = dict(whead, wall_epoch=float(whead["wall_epoch"]) + 3.0)  # worker clock +3 s

    main = Tracer()
    main.ingest(reanchor(skewed, wrec, clock_offset_s=3.0, local=(chead, crec)))
    ref = Tracer()  # the truth, each side ingested on its own
    ref.ingest([chead, crec])
    ref.ingest([whead, wrec])
    got = main.tasks_df().loc[7]
    sides = ref.tasks_df().set_index("worker")
    for col, side in (("submit_ts", "ctrl"), ("dispatch_ts", "ctrl"), ("start_ts", "w0"),
                      ("end_ts", "w0")):
        # frame times are seconds since each tracer's own wall-clock anchor
        want = float(sides.loc[side, col]) + ref.wall_epoch - main.wall_epoch
        assert got[col] == pytest.approx(want, abs=2e-6), col
    assert math.isnan(float(got["consume_ts"]))
    assert got["worker"] == "w0" and got["n_sessions"] == 1
