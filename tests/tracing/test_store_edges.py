"""The tracer's store at its edges: records drained in several rounds (each round only what
came since the last: tasks, sessions, spans, events and late marks), every field of a task
and of a late mark, empty attributes as ``{}``, and an ingest of such rounds giving back the
same frames."""

from __future__ import annotations

from typing import Any

from rollout_kit.tracing import Tracer, annotate, session_event, trace_phase
from rollout_kit.tracing import schema as S


def _run(tr: Tracer, tid: int, *, attrs: bool) -> None:
    tr.register_task(tid)
    with tr.task_scope(tid):
        with tr.session():
            if attrs:
                annotate(server="h:1")
            with trace_phase("generate"):
                session_event("continue", version=tid)
    tr.finalize(tid, "accepted")


def _kinds(records: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return [(r["kind"], r.get("task_id")) for r in records]


def test_records_drained_in_rounds_hold_only_what_is_new() -> None:
    tr = Tracer(worker="w9")
    _run(tr, 0, attrs=False)
    first = tr.drain_records()
    assert _kinds(first) == [("header", None), ("task", 0)]
    task = first[1]
    assert {"kind", "task_id", "worker", "status", "reason", "error", "marks", "attrs",
            "sessions", "spans"} <= set(task)
    assert (task["worker"], task["status"], task["attrs"]) == ("w9", "accepted", {})
    assert [s["attrs"] for s in task["sessions"]] == [{}]  # none: {}, not None
    assert len(task["spans"]) == 1
    _run(tr, 1, attrs=True)
    tr.mark(0, "consume")  # a late mark of a task drained in the first round
    second = tr.drain_records()
    assert _kinds(second) == [("header", None), ("task", 1), ("mark", 0)]
    assert second[1]["sessions"][0]["attrs"] == {"server": "h:1"}
    mark = second[2]
    assert (mark["worker"], mark["event"]) == ("w9", "consume") and mark["ts"] > 0
    assert tr.drain_records() == []  # nothing new
    tr.mark(1, "consume")
    third = tr.drain_records()
    assert _kinds(third) == [("header", None), ("mark", 1)]


def test_rounds_ingested_elsewhere_give_the_same_frames() -> None:
    src, dst = Tracer(worker="w1"), Tracer()
    _run(src, 0, attrs=True)
    dst.ingest(src.drain_records())
    _run(src, 1, attrs=False)
    src.mark(0, "consume")
    dst.ingest(src.drain_records())
    b = dst.frames()
    assert b.tasks[S.STATUS].tolist() == ["accepted", "accepted"]
    assert b.tasks[S.WORKER].tolist() == ["w1", "w1"]
    assert b.tasks[S.N_SESSIONS].tolist() == [1, 1]
    assert b.tasks[S.CONSUME_TS].notna().tolist() == [True, False]  # the late mark came
    assert b.sessions[S.SERVER].isna().tolist() == [False, True]
    assert b.sessions[S.SERVER].iloc[0] == "h:1"
    assert b.events[S.VERSION].tolist() == [0, 1]
    assert b.spans[S.PHASE].tolist() == ["generate", "generate"]
