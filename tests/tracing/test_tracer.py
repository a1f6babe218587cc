"""Tracer lifecycle, scopes, context restoration, frames and bad input."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rollout_kit import (
    ConfigError,
    DuplicateTaskIdError,
    InvalidTaskIdError,
    TraceStateError,
    UnknownTaskIdError,
)
from rollout_kit.tracing import (
    Tracer,
    annotate,
    atrace_phase,
    current_session_id,
    current_task_id,
    current_tracer,
    increment,
    register_phase,
    registered_phases,
    schema,
    trace_phase,
    trace_session,
)


def _row(df: pd.DataFrame, key: Any) -> dict[str, Any]:
    row: Any = df.loc[key]
    return {str(k): v for k, v in row.to_dict().items()}


def _one_task(tr: Tracer, tid: int = 0) -> int:
    tr.register_task(tid, dataset="d")
    with tr.task_scope(tid):
        tr.mark(tid, "dispatch")
        tr.mark(tid, "start")
        with tr.session() as sid:
            with trace_phase("generate"):
                pass
            annotate(server="127.0.0.1:1", stop_reason="stop", ttft_s=0.01)
            increment(prompt_tokens=12, completion_tokens=30)
            increment(completion_tokens=5, retries=1)
            with trace_phase("reward"):
                pass
        tr.mark(tid, "end")
    tr.finalize(tid, "accepted")
    assert sid is not None
    return sid


def test_full_lifecycle_frames() -> None:
    tr = Tracer(worker="w0")
    sid = _one_task(tr)
    tr.mark(0, "consume")  # after finalize: recorded as a late mark
    f = tr.frames()
    row = _row(f.tasks, 0)
    assert row["status"] == "accepted" and row["worker"] == "w0" and row["dataset"] == "d"
    ts = [row[c] for c in ("submit_ts", "dispatch_ts", "start_ts", "end_ts", "consume_ts")]
    assert all(math.isfinite(t) for t in ts) and ts == sorted(ts)
    assert row["queue_s"] == pytest.approx(ts[1] - ts[0])
    assert row["run_s"] == pytest.approx(ts[3] - ts[2])
    assert row["total_s"] == pytest.approx(ts[3] - ts[0])
    assert row["n_sessions"] == 1
    assert row["prompt_tokens"] == 12 and row["completion_tokens"] == 35
    s = _row(f.sessions, (0, sid))
    assert s["server"] == "127.0.0.1:1" and s["retries"] == 1 and s["status"] == "accepted"
    assert s["ttft_s"] == 0.01
    assert list(f.spans["phase"]) == ["generate", "reward"]
    assert (f.spans["server"] == "127.0.0.1:1").all()
    assert s["generate_s"] == pytest.approx(f.spans["duration"].iloc[0])
    assert row["generate_s"] + row["reward_s"] == pytest.approx(f.spans["duration"].sum())
    assert list(f.tasks.columns[: len(schema.TASK_COLUMNS)]) == list(schema.TASK_COLUMNS)
    assert list(f.sessions.columns[: len(schema.SESSION_COLUMNS)]) == list(schema.SESSION_COLUMNS)
    assert list(f.spans.columns[: len(schema.SPAN_COLUMNS)]) == list(schema.SPAN_COLUMNS)
    assert f.to_datetime(0.0).timestamp() == pytest.approx(tr.wall_epoch)


def test_empty_frames_have_stable_columns_and_dtypes() -> None:
    full = Tracer()
    _one_task(full)
    full_f = full.frames()
    empty = Tracer().frames()
    assert len(empty.tasks) == len(empty.sessions) == len(empty.spans) == 0
    for a, b in ((empty.tasks, full_f.tasks.drop(columns="dataset")),
                 (empty.sessions, full_f.sessions), (empty.spans, full_f.spans)):
        assert list(a.columns) == list(b.columns)
        assert [str(t) for t in a.dtypes] == [str(t) for t in b.dtypes]
    assert empty.tasks.index.name == "task_id" and empty.tasks.index.dtype == np.int64
    assert empty.sessions.index.names == ["task_id", "session_id"]
    assert isinstance(full_f.tasks["status"].dtype, pd.CategoricalDtype)
    assert list(full_f.tasks["status"].cat.categories) == list(schema.STATUSES)


def test_live_tasks_show_as_pending_and_finalize_closes_open_things() -> None:
    tr = Tracer()
    tr.register_task(5)
    sid = tr.register_session(5)
    h = tr.begin_phase("toolcall", sid)
    f = tr.frames()
    live = _row(f.tasks, 5)
    assert live["status"] == "pending" and math.isnan(live["end_ts"])
    assert len(f.spans) == 0  # open spans are not shown
    tr.finalize(5, "failed", reason="boom", error=ValueError("bad value"))
    f = tr.frames()
    t = _row(f.tasks, 5)
    assert t["status"] == "failed" and t["reason"] == "boom"
    assert t["error"] == "ValueError: bad value"
    assert math.isfinite(t["end_ts"])
    span = f.spans.iloc[0].to_dict()
    assert bool(span["closed_at_finalize"]) and math.isfinite(span["end"])
    assert span["end"] == pytest.approx(t["end_ts"])
    s = _row(f.sessions, (5, sid))
    assert s["status"] == "failed" and math.isfinite(s["end_ts"])
    tr.end_phase(h)  # closed by finalize: lenient no-op
    assert len(tr.frames().spans) == 1
    assert tr.stats["live_tasks"] == 0 and tr.stats["live_sessions"] == 0


def test_session_restores_context_and_failed_status() -> None:
    tr = Tracer()
    tr.register_task(1)
    assert current_tracer() is None
    with tr.task_scope(1):
        assert current_tracer() is tr and current_task_id() == 1
        with tr.session() as outer:
            assert current_session_id() == outer
            with pytest.raises(RuntimeError), tr.session() as inner:
                assert current_session_id() == inner
                raise RuntimeError("x")
            assert current_session_id() == outer  # restored, unlike AReaL
        assert current_session_id() is None
    assert current_task_id() is None and current_tracer() is None
    tr.finalize(1, "accepted")
    df = tr.sessions_df()
    assert _row(df, (1, inner))["status"] == "failed"
    assert _row(df, (1, outer))["status"] == "accepted"
    assert (outer, inner) == (0, 1)


async def test_async_scopes_and_decorators() -> None:
    tr = Tracer()

    @trace_phase("reward")
    def reward() -> int:
        return 3

    @trace_phase("generate")
    async def generate() -> int:
        await asyncio.sleep(0)
        return 1

    @trace_session()
    async def sample() -> int | None:
        r = await generate() + reward()
        async with atrace_phase("toolcall"):
            await asyncio.sleep(0)
        return r

    @tr.phase("reward")
    def raising() -> None:
        raise KeyError("k")

    tr.register_task(0)
    with tr.task_scope(0):
        out = await asyncio.gather(*(sample() for _ in range(4)))
        async with tr.session() as sid:
            with pytest.raises(KeyError):
                raising()
    tr.finalize(0, "accepted")
    assert out == [4, 4, 4, 4]
    f = tr.frames()
    assert f.tasks.loc[0, "n_sessions"] == 5
    assert len(f.spans) == 13
    assert f.spans.groupby("session_id").size().loc[0:3].tolist() == [3, 3, 3, 3]
    raised = f.spans[f.spans["raised"]]
    assert len(raised) == 1 and raised["session_id"].iloc[0] == sid


def test_phase_on_task_without_session_and_noops_without_context() -> None:
    tr = Tracer()
    tr.register_task(0)
    with tr.task_scope(0), tr.phase("generate"):
        assert tr.register_session() == 0  # None: the current task
    with pytest.raises(TraceStateError, match="no current task"):
        tr.register_session()
    # no tracer in context: all module-level helpers are silent no-ops
    with trace_phase("generate"), trace_session() as sid:
        annotate(server="x")
        increment(prompt_tokens=1)
    assert sid is None
    with tr.phase("generate"):  # no current task either: no-op
        pass
    tr.finalize(0, "accepted")
    spans = tr.spans_df()
    assert len(spans) == 1 and spans["session_id"].isna().all()
    assert tr.tasks_df().loc[0, "n_sessions"] == 1
    assert pd.isna(spans["server"].iloc[0])


def test_registry_new_phase_gets_columns_without_edits() -> None:
    register_phase("verify_tr", color="#123456")
    tr = Tracer()
    tr.register_task(0)
    sid = tr.register_session(0)
    with tr.phase("verify_tr", sid), tr.phase("auto_registered_tr", sid):
        pass
    tr.finalize(0, "accepted")
    f = tr.frames()
    assert "auto_registered_tr" in registered_phases()
    for col in ("verify_tr_s", "auto_registered_tr_s"):
        assert col in f.tasks.columns and col in f.sessions.columns
        assert _row(f.tasks, 0)[col] > 0
    assert set(f.spans["phase"].cat.categories) >= {"verify_tr", "generate"}


def test_reset_is_safe_and_keeps_live_tasks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tr = Tracer(path=tmp_path / "t.jsonl")
    _one_task(tr, 0)
    tr.register_task(1)
    old_epoch = tr.epoch_ns
    tr.reset()
    tr.reset()
    assert tr.epoch_ns > old_epoch
    tr.register_task(0)  # finished ids may be registered again after reset
    tr.finalize(0, "rejected")
    tr.finalize(1, "accepted")  # was live across the reset
    f = tr.frames()
    assert sorted(f.tasks.index) == [0, 1] and f.tasks.loc[0, "status"] == "rejected"
    assert _row(f.tasks, 1)["submit_ts"] < 0  # registered before the new epoch
    with pytest.raises(DuplicateTaskIdError):
        tr.register_task(1)


def test_disabled_tracer_is_noop() -> None:
    tr = Tracer(enabled=False)
    tr.register_task(0)
    assert [tr.register_session(0), tr.register_session(0)] == [0, 1]
    with tr.task_scope(0), tr.session() as sid, tr.phase("generate"):
        tr.annotate(server="x")
    assert sid is None
    tr.finalize(0, "accepted")
    assert len(tr.tasks_df()) == 0 and len(tr) == 0


# -- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, True, 1.0, "3", 2**64])
def test_invalid_task_ids(bad: object) -> None:
    with pytest.raises(InvalidTaskIdError, match=repr(bad) if isinstance(bad, str) else None):
        Tracer().register_task(bad)  # type: ignore[arg-type]


def test_bad_input_errors() -> None:
    tr = Tracer()
    tr.register_task(0)
    with pytest.raises(DuplicateTaskIdError):
        tr.register_task(0)
    with pytest.raises(UnknownTaskIdError):
        tr.register_session(99)
    with pytest.raises(UnknownTaskIdError):
        tr.mark(99, "start")
    with pytest.raises(UnknownTaskIdError):
        tr.finalize(99, "accepted")
    with pytest.raises(UnknownTaskIdError), tr.task_scope(99):
        pass
    with pytest.raises(ConfigError, match="unknown lifecycle event"):
        tr.mark(0, "started")
    with pytest.raises(ConfigError, match="unknown final status"):
        tr.finalize(0, "ok")
    with pytest.raises(ConfigError):
        tr.finalize(0, "pending")
    with pytest.raises(TraceStateError, match="no current session"):
        tr.annotate(server="x")
    with pytest.raises(TraceStateError, match="unknown"):
        tr.annotate(12345, server="x")
    with pytest.raises(TraceStateError):
        with tr.phase("generate", session_id=777):
            pass
    with pytest.raises(TraceStateError, match="needs a task"):
        with tr.session():
            pass
    sid = tr.register_session(0)
    with pytest.raises(ConfigError, match="must be None, bool, int, float or str"):
        tr.annotate(sid, versions=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="64 bits"):
        tr.annotate(sid, big=2**70)
    with pytest.raises(ConfigError, match="reserved"):
        tr.annotate(sid, status="x")
    with pytest.raises(ConfigError, match="reserved"):
        tr.annotate(sid, generate_s=1.0)
    with pytest.raises(ConfigError, match="int or float"):
        tr.increment(sid, prompt_tokens="3")  # type: ignore[arg-type]
    tr.annotate(sid, stop_reason="length")
    with pytest.raises(ConfigError, match="attribute holds"):
        tr.increment(sid, stop_reason=1)
    h = tr.phase("generate", sid)
    with pytest.raises(TraceStateError, match="never started"):
        tr.end_phase(h)
    h = tr.begin_phase("generate", sid)
    tr.end_phase(h)
    with pytest.raises(TraceStateError, match="already ended"):
        tr.end_phase(h)
    tr.end_session(sid)
    with pytest.raises(TraceStateError, match="already ended"):
        tr.end_session(sid)
    tr.finalize(0, "accepted")
    with pytest.raises(TraceStateError, match="already finalized"):
        tr.finalize(0, "accepted")
    with pytest.raises(TraceStateError):
        tr.annotate(sid, server="late")  # task finalized: session released
    with pytest.raises(DuplicateTaskIdError):
        tr.register_task(0)
    with pytest.raises(ConfigError):
        Tracer(flush_threshold=0)
    # nothing invalid was stored, nothing was lost
    f = tr.frames()
    assert list(f.tasks.index) == [0] and len(f.spans) == 1
    assert f.sessions["stop_reason"].iloc[0] == "length"
