"""rollout_kit.analysis: numbers checked against hand-computed values on small frames."""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from rollout_kit import ConfigError, TraceSchemaError, analysis
from rollout_kit.tracing import schema as S
from tests._trace_factories import hand_tasks, make_traces, record_with_tracer


def test_summary_matches_hand_computed_values() -> None:
    s = analysis.summary(hand_tasks())
    lat = s.latency
    assert list(lat.columns) == list(analysis.LATENCY_STATS)
    assert lat.loc[S.TOTAL_S, "p50"] == pytest.approx(1.5)  # median of 1, 3, 1, 2
    assert lat.loc[S.TOTAL_S, "max"] == 3.0
    assert lat.loc[S.TOTAL_S, "mean"] == pytest.approx(1.75)
    # sorted queue waits 0, 0, .5, 1: p90 at rank 2.7 -> .5 + .7 * .5
    assert lat.loc[S.QUEUE_S, "p90"] == pytest.approx(0.85)
    assert lat.loc["generate_s", "p50"] == pytest.approx(0.75)
    assert lat.loc[S.TOTAL_S, "count"] == 4
    thr = s.throughput
    assert thr["duration_s"] == 4.0  # last end 4 - first submit 0
    assert thr["tasks_per_s"] == pytest.approx(1.0)
    assert thr["accepted_per_s"] == pytest.approx(0.5)
    assert thr["completion_tokens_per_s"] == pytest.approx(100 / 4)
    assert s.status.to_dict() == {"pending": 0, "accepted": 2, "rejected": 1, "failed": 1,
                                  "cancelled": 0}


def test_summary_ttft_from_sessions_and_unused_phases_skipped() -> None:
    f = make_traces(5, sessions=2)
    f.tasks["toolcall_s"] = 0.0  # registered but never used
    s = analysis.summary(f.tasks, sessions=f.sessions)
    assert s.latency.loc[S.TTFT_S, "count"] == 10  # one per session
    assert s.latency.loc[S.TTFT_S, "p50"] == pytest.approx(f.sessions[S.TTFT_S].median())
    assert "toolcall_s" not in s.latency.index
    assert "reward_s" in s.latency.index


def test_summary_markdown_and_series() -> None:
    s = analysis.summary(hand_tasks())
    md = s.to_markdown()
    assert "| total_s | 4 | 1.75 | 1.5 |" in md
    assert "| accepted | 2 |" in md
    flat = s.as_series()
    assert flat["total_s p99"] == pytest.approx(np.percentile([1, 3, 1, 2], 99))
    assert flat["status failed"] == 1
    assert "<h4>Latency (s)</h4>" in s._repr_html_()


def test_summary_empty_is_well_formed() -> None:
    s = analysis.summary(hand_tasks().iloc[:0])
    assert list(s.latency.columns) == list(analysis.LATENCY_STATS)
    assert (s.latency["count"] == 0).all()
    assert s.throughput["duration_s"] == 0.0
    assert np.isnan(s.throughput["tasks_per_s"])
    assert s.status.sum() == 0 and list(s.status.index) == list(S.STATUSES)


def test_missing_columns_are_named() -> None:
    with pytest.raises(TraceSchemaError, match="end_ts"):
        analysis.summary(hand_tasks().drop(columns=[S.END_TS]))
    with pytest.raises(TraceSchemaError, match="DataFrame"):
        analysis.summary([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(TraceSchemaError, match="server"):
        analysis.by_server(pd.DataFrame({S.TOTAL_S: [1.0]}))
    with pytest.raises(TraceSchemaError, match="phase"):
        analysis.by_phase(pd.DataFrame({S.DURATION: [1.0]}))


def test_throughput_windows() -> None:
    thr = analysis.throughput(hand_tasks(), window=1.0)
    # ends at 1, 3, 2, 4 s after the first submit -> one per window 1..4
    assert list(thr.index) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert thr["tasks"].tolist() == [0, 1, 1, 1, 1]
    assert thr["accepted"].tolist() == [0, 1, 0, 1, 0]
    assert thr["completion_tokens_per_s"].tolist() == [0, 10, 30, 20, 40]
    thr2 = analysis.throughput(hand_tasks(), window=2.0)
    assert thr2["tasks"].tolist() == [1, 2, 1]
    assert thr2["tasks_per_s"].tolist() == [0.5, 1.0, 0.5]
    with pytest.raises(ConfigError):
        analysis.throughput(hand_tasks(), window=0)
    empty = analysis.throughput(hand_tasks().iloc[:0])
    assert empty.empty and "tasks_per_s" in empty.columns


def test_concurrency_sweep_line_on_tasks() -> None:
    c = analysis.concurrency(hand_tasks())
    # running intervals [0,1] [1,3] [1,2] [2.5,4]
    assert c["time"].tolist() == [0.0, 1.0, 2.0, 2.5, 3.0, 4.0]
    assert c["in_flight"].tolist() == [1, 2, 1, 2, 1, 0]
    q = analysis.concurrency(hand_tasks(), kind="queued")
    assert q["in_flight"].max() == 1 and q["in_flight"].iloc[-1] == 0
    tot = analysis.concurrency(hand_tasks(), kind="total")
    # submit->end intervals [0,1] [0,3] [1,2] [2,4]
    assert tot["in_flight"].tolist() == [2, 2, 2, 1, 0]
    with pytest.raises(ConfigError):
        analysis.concurrency(hand_tasks(), kind="nope")


def test_concurrency_touching_and_open_intervals() -> None:
    spans = pd.DataFrame({S.TASK_ID: [0, 1, 2], S.PHASE: ["generate"] * 3,
                          S.START: [0.0, 1.0, 1.5], S.END: [1.0, 2.0, np.nan]})
    c = analysis.concurrency(spans)
    assert c["in_flight"].tolist() == [1, 1, 2, 0]  # touching spans never overlap
    assert c["time"].tolist() == [0.0, 1.0, 1.5, 2.0]  # the open one ends at the last time
    only = analysis.concurrency(spans, phase="reward")
    assert only.empty and list(only.columns) == ["time", "in_flight"]


def test_concurrency_spans_with_phase_filter() -> None:
    f = make_traces(10, sessions=3, parallel=True)
    gen = analysis.concurrency(f.spans, phase="generate")
    assert gen["in_flight"].iloc[-1] == 0
    assert gen["in_flight"].max() >= 3  # three parallel sessions of a task overlap
    # brute force check of the in-flight count at each change time
    g = f.spans[f.spans[S.PHASE] == "generate"]
    t0 = g[S.START].min()
    for t, n in zip(gen["time"], gen["in_flight"], strict=True):
        tt = t + t0
        assert n == int(((g[S.START] <= tt + 1e-12) & (g[S.END] > tt + 1e-12)).sum())


def test_by_server_hand_values() -> None:
    sessions = pd.DataFrame({
        S.SERVER: ["a", "a", "b"], S.TOTAL_S: [1.0, 3.0, 2.0],
        S.STATUS: ["accepted", "failed", "accepted"], S.TTFT_S: [0.1, 0.3, 0.2],
        S.COMPLETION_TOKENS: pd.array([10, 30, 5], dtype="Int64"),
        S.RETRIES: pd.array([0, 2, 1], dtype="Int64"),
    })
    t = analysis.by_server(sessions)
    assert t.loc["a", "sessions"] == 2 and t.loc["b", "sessions"] == 1
    assert t.loc["a", "failed"] == 1
    assert t.loc["a", "p50"] == 2.0 and t.loc["a", "max"] == 3.0
    assert t.loc["a", "ttft_p50"] == pytest.approx(0.2)
    assert t.loc["a", "completion_tokens_per_s"] == pytest.approx(40 / 4)
    assert t.loc["a", S.RETRIES] == 2
    assert analysis.by_server(sessions.iloc[:0]).empty


def test_by_phase_hand_values_and_registry_order() -> None:
    spans = pd.DataFrame({S.PHASE: ["reward", "generate", "generate", "zz_custom"],
                          S.START: [0.0, 0.0, 1.0, 0.0], S.END: [1.0, 2.0, 5.0, 2.0]})
    t = analysis.by_phase(spans)
    assert list(t.index) == ["generate", "reward", "zz_custom"]
    assert t.loc["generate", "count"] == 2
    assert t.loc["generate", "total_s"] == 6.0
    assert t.loc["generate", "share"] == pytest.approx(6 / 9)
    assert t["share"].sum() == pytest.approx(1.0)


def test_slowest() -> None:
    top = analysis.slowest(hand_tasks(), 2)
    assert list(top.index) == [1, 3]
    assert list(analysis.slowest(hand_tasks(), 1, by=S.QUEUE_S).index) == [1]
    assert analysis.slowest(hand_tasks(), 2, columns=[S.TOTAL_S]).columns.tolist() == [S.TOTAL_S]
    with pytest.raises(ConfigError):
        analysis.slowest(hand_tasks(), -1)
    with pytest.raises(TraceSchemaError, match="nope"):
        analysis.slowest(hand_tasks(), by="nope")


def test_compare_side_by_side() -> None:
    a, b = hand_tasks(), make_traces(8).tasks
    t = analysis.compare({"a": a, "b": b})
    assert list(t.columns) == ["a", "b"]
    assert t.loc["total_s p50", "a"] == analysis.summary(a).latency.loc[S.TOTAL_S, "p50"]
    assert t.loc["total_s p50", "b"] == analysis.summary(b).latency.loc[S.TOTAL_S, "p50"]
    assert np.isnan(t.loc["reward_s p50", "a"])  # a has no reward phase
    assert t.index[0] == "queue_s p50"  # summary order kept, not alphabetical
    with pytest.raises(ConfigError):
        analysis.compare({})


def test_on_real_tracer_frames() -> None:
    fr = record_with_tracer(6).frames()  # type: ignore[attr-defined]
    s = analysis.summary(fr.tasks, sessions=fr.sessions)
    assert s.status["failed"] == 2 and s.status["accepted"] == 4
    assert s.latency.loc[S.TTFT_S, "count"] == 12
    assert "generate_s" in s.latency.index and "toolcall_s" not in s.latency.index
    srv = analysis.by_server(fr.sessions)
    assert srv["sessions"].sum() == 12 and len(srv) == 2
    ph = analysis.by_phase(fr.spans)
    assert ph.loc["generate", "count"] == 12
    assert analysis.concurrency(fr.spans)["in_flight"].iloc[-1] == 0


def test_summary_is_vectorised_on_many_rows() -> None:
    # not a timing assertion: just that 200k rows go through the numpy path correctly
    n = 200_000
    rng = np.random.default_rng(1)
    submit = rng.uniform(0, 100, n)
    tasks = pd.DataFrame({S.STATUS: pd.Categorical(["accepted"] * n, categories=S.STATUSES),
                          S.SUBMIT_TS: submit, S.END_TS: submit + 1.0})
    s = analysis.summary(tasks)
    assert s.latency.loc[S.TOTAL_S, "p99"] == pytest.approx(1.0)
    assert s.status["accepted"] == n




def test_analysis_does_not_import_matplotlib() -> None:
    import subprocess

    code = ("import sys, rollout_kit.analysis; "
            "sys.exit(1 if any(m.startswith('matplotlib') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_summary_uses_phase_wall_time_of_parallel_sessions() -> None:
    f = make_traces(8, sessions=4, parallel=True)
    assert analysis.phase_names(f.tasks) == ["generate", "reward"]  # no "generate_session"
    s = analysis.summary(f.tasks, sessions=f.sessions)
    assert "generate_session_s" not in s.latency.index
    gen = f.tasks[S.phase_column("generate")]
    assert s.latency.loc["generate_s", "p50"] == pytest.approx(gen.median())
    assert (gen <= f.tasks[S.TOTAL_S]).all()  # wall time fits in the task
    summed = f.tasks[S.phase_session_column("generate")]
    assert (summed > gen).all() and (summed > f.tasks[S.TOTAL_S]).any()


def test_phase_names_keeps_a_phase_whose_name_ends_in_session() -> None:
    tasks = hand_tasks().assign(warm_session_s=1.0, generate_session_s=2.0)
    assert analysis.phase_names(tasks) == ["generate", "warm_session"]
