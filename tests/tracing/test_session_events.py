"""Session events (a continuation after a server abort, with its weight version): recorded
on the current session, kept through records, JSONL and ingest, read as ``Traces.events``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_kit import ConfigError
from rollout_kit.tracing import Tracer, load_traces, session_event
from rollout_kit.tracing import schema as S


def _two_tasks(tr: Tracer) -> None:
    for tid in (0, 1):
        tr.register_task(tid)
        with tr.task_scope(tid), tr.session():
            if tid == 1:
                session_event(S.CONTINUE, version=7)
                session_event(S.CONTINUE)
        tr.finalize(tid, "accepted")


def test_events_frame_and_records(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl")
    _two_tasks(tr)
    ev = tr.frames().events
    assert list(ev.columns) == list(S.EVENT_COLUMNS)
    assert ev[S.TASK_ID].tolist() == [1, 1] and ev[S.SESSION_ID].tolist() == [1, 1]
    assert ev[S.EVENT].tolist() == ["continue", "continue"]
    assert ev[S.VERSION].tolist()[0] == 7 and ev[S.VERSION].isna().tolist() == [False, True]
    assert ev[S.TS].is_monotonic_increasing
    sess = tr.frames().sessions.loc[(1, 1)]
    assert sess[S.START_TS] < ev[S.TS].iloc[0] < sess[S.END_TS]
    recs = tr.drain_records()
    tasks = [r for r in recs if r["kind"] == "task"]
    assert "events" not in tasks[0]  # nothing written for a task without events
    assert [e[1:2] + e[3:] for e in tasks[1]["events"]] == [["continue", 7],
                                                            ["continue", None]]
    # ingested elsewhere and loaded from the JSONL: the same rows, moved with their session
    other = Tracer()
    other.ingest(recs)
    since_start = ev[S.TS].to_numpy() - sess[S.START_TS]
    for got in (other.frames(), load_traces(tmp_path / "t.jsonl")):
        assert got.events[S.VERSION].tolist()[0] == 7 and len(got.events) == 2
        start = got.sessions.loc[(1, 1), S.START_TS]
        assert got.events[S.TS].to_numpy() - start == pytest.approx(since_start, abs=1e-6)


def test_live_tasks_show_their_events() -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0), tr.session():
        session_event(S.CONTINUE, version=1)
        fr = tr.frames()
    assert fr.tasks.loc[0, S.STATUS] == "pending" and len(fr.events) == 1


def test_no_session_no_event_and_bad_arguments() -> None:
    session_event(S.CONTINUE, version=1)  # no tracer: nothing to do
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0):
        session_event(S.CONTINUE)  # a task but no session
        with pytest.raises(ConfigError, match="unknown session event"):
            session_event("abort")
        with tr.session(), pytest.raises(ConfigError, match="needs an int"):
            session_event(S.CONTINUE, version=True)
    off = Tracer(enabled=False)
    off.register_task(0)
    with off.task_scope(0), off.session():
        session_event(S.CONTINUE)
    assert tr.frames().events.empty and off.frames().events.empty
    assert tr.frames().events.dtypes.to_dict() == Tracer().frames().events.dtypes.to_dict()
