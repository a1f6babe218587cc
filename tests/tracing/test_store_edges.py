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


def test_rows_committed_across_the_settle_threshold_read_back_in_order() -> None:
    """``commit`` keeps a task's rows in lists until SETTLE_AT values; every read (the
    counts, frames, records, an ingest appending after them) sees all rows, in order."""
    from rollout_kit.tracing._store import Store
    from rollout_kit.tracing._store.buffers import SETTLE_AT
    from rollout_kit.tracing._store.layout import T_STRIDE

    st = Store()
    assert st.worker_code(None) == 0
    n = 2 * SETTLE_AT // T_STRIDE + 7  # crosses the threshold twice, then a partial tail
    for i in range(n):
        marks = [1000 + i, 2000 + i, 3000 + i, 4000 + i, 5000 + i]
        sessions = [(i, 1, 10 + i, 20 + i, {"k": i} if i % 3 == 0 else {})]
        spans = [0, 1, 11 + i, 12 + i, 0] * (i % 2 + 1)
        st.commit(i, 1, 0, marks, "why" if i % 5 == 0 else None, None, {}, sessions, spans)
        if i in (1, SETTLE_AT // T_STRIDE, n - 2):  # reads in the middle settle the lists
            assert len(st) == i + 1 and st.n_sessions == i + 1
    assert len(st) == n and st.n_sessions == n and st.n_spans == sum(i % 2 + 1 for i in range(n))
    snap = st.snapshot()
    assert list(snap.task_id) == list(range(n))
    assert list(snap.marks[0]) == [1000 + i for i in range(n)]
    assert list(snap.session_start) == [10 + i for i in range(n)]
    assert [snap.reason[i] for i in range(0, n, 5)] == ["why"] * len(range(0, n, 5))
    rows, values = snap.session_attrs["k"]
    assert list(rows) == list(range(0, n, 3)) and values == list(range(0, n, 3))
    # a batch of columns (a trace file's line) from a cursor holds the rows still in lists
    st.commit(n, 1, 0, [1, 2, 3, 4, 5], None, None, {}, [], [])
    rec, cursor = st.columns(0, n - 3, n_spans := st.n_spans, n - 3, 0)
    assert rec is not None and list(rec["tasks"]["task_id"]) == [n - 3, n - 2, n - 1, n]
    assert cursor == (n + 1, n_spans, n, 0)
