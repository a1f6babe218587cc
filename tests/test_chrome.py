"""Chrome / Perfetto export: one track per task, well-formed events, no overlap per track.

Flows, counters and continuations on a simulated run: ``tests/tracing/test_chrome_flows.py``.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_kit import ConfigError, TraceSchemaError
from rollout_kit.tracing import schema as S
from rollout_kit.tracing._frames.chrome import QUEUED_EVENT, to_chrome_trace
from tests._chrome_format import check_trace
from tests._trace_factories import make_traces, record_with_tracer


def _x_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _span_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The phase spans and queue waits (not the session slices and marks nested around
    and between them)."""
    return [e for e in _x_events(trace) if e["cat"] in ("phase", "queue")]


def _thread_names(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def assert_well_formed(trace: dict[str, Any]) -> None:
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    assert check_trace(trace) == []


def assert_no_overlap_per_track(trace: dict[str, Any]) -> None:
    """Phase spans of one track sit side by side (the checker allows nesting)."""
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in _span_events(trace):
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, iv in tracks.items():
        iv.sort()
        for (_, b), (c, _) in itertools.pairwise(iv):
            assert c >= b - 1e-6, f"overlap on track {key}: {b} > {c}"


def test_one_track_per_task_sequential_sessions() -> None:
    f = make_traces(12, sessions=2)
    trace = to_chrome_trace(f.spans, tasks=f.tasks)
    assert_well_formed(trace)
    assert_no_overlap_per_track(trace)
    by_task: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for e in _x_events(trace):
        by_task[e["args"]["task_id"]].add((e["pid"], e["tid"]))
    assert sorted(by_task) == list(range(12))
    names = _thread_names(trace)
    for task, tracks in by_task.items():
        assert len(tracks) == 1  # sequential sessions + queue wait share one track
        (track,) = tracks
        assert track[1] == task + 1  # tid = task_id + 1: Perfetto reads tid 0 as unset
        assert names[track] == f"task {task}"


def test_overlapping_sessions_go_to_sub_tracks() -> None:
    f = make_traces(5, sessions=3, parallel=True)
    trace = to_chrome_trace(f.spans, tasks=f.tasks)
    assert_well_formed(trace)
    assert_no_overlap_per_track(trace)
    names = _thread_names(trace)
    stride = trace["otherData"]["lane_tid_stride"]
    for task in range(5):
        tracks = {(e["pid"], e["tid"]) for e in _x_events(trace) if e["args"]["task_id"] == task}
        assert len(tracks) == 3  # three parallel sessions need three lanes
        assert {tid % stride for _, tid in tracks} == {task + 1}
        assert all(names[t].startswith(f"task {task}") for t in tracks)
        # a session's spans stay on one track
        per_session = defaultdict(set)
        for e in _span_events(trace):
            if e["args"]["task_id"] == task and e["name"] != QUEUED_EVENT:
                per_session[e["args"]["session_id"]].add(e["tid"])
        assert all(len(v) == 1 for v in per_session.values())


def test_overlapping_spans_inside_one_session() -> None:
    spans = pd.DataFrame({S.TASK_ID: [0, 0, 0], S.SESSION_ID: [0, 0, 0],
                          S.PHASE: ["generate", "toolcall", "reward"],
                          S.START: [0.0, 0.5, 2.0], S.END: [1.0, 1.5, 3.0]})
    trace = to_chrome_trace(spans)
    assert_well_formed(trace)
    assert_no_overlap_per_track(trace)
    assert len({e["tid"] for e in _x_events(trace)}) == 2


def test_microsecond_timestamps_and_queued_segments() -> None:
    f = make_traces(4)
    trace = to_chrome_trace(f.spans, tasks=f.tasks)
    row = f.spans.iloc[0]
    ev = next(e for e in _x_events(trace) if e["args"]["task_id"] == row[S.TASK_ID]
              and e["name"] == row[S.PHASE])
    assert ev["ts"] == pytest.approx(row[S.START] * 1e6, abs=1e-3)
    assert ev["dur"] == pytest.approx((row[S.END] - row[S.START]) * 1e6, abs=1e-3)
    queued = [e for e in _x_events(trace) if e["name"] == QUEUED_EVENT]
    assert len(queued) == 4
    t = f.tasks.loc[queued[0]["args"]["task_id"]]
    assert queued[0]["ts"] == pytest.approx(t[S.SUBMIT_TS] * 1e6, abs=1e-3)
    assert queued[0]["dur"] == pytest.approx((t[S.DISPATCH_TS] - t[S.SUBMIT_TS]) * 1e6,
                                             abs=1e-3)
    no_tasks = to_chrome_trace(f.spans)
    assert not [e for e in _x_events(no_tasks) if e["name"] == QUEUED_EVENT]


def test_one_process_per_worker() -> None:
    f = make_traces(6, workers=2)
    trace = to_chrome_trace(f.spans, tasks=f.tasks)
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == ["server 127.0.0.1:1", "server 127.0.0.1:2",
                                      "worker w0", "worker w1"]  # servers: their counters
    for e in _x_events(trace):
        worker = f.tasks.loc[e["args"]["task_id"], S.WORKER]
        assert procs[e["pid"]] == f"worker {worker}"


def test_worker_column_on_spans_separates_repeated_ids() -> None:
    a, b = make_traces(3), make_traces(3, seed=1)  # both use task ids 0..2 (SPMD ranks)
    spans = pd.concat([a.spans.assign(**{S.WORKER: "r0"}), b.spans.assign(**{S.WORKER: "r1"})])
    trace = to_chrome_trace(spans)
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"
             and e["args"]["name"].startswith("worker")}
    assert sorted(procs.values()) == ["worker r0", "worker r1"]
    per_proc = defaultdict(set)
    for e in _x_events(trace):
        per_proc[procs[e["pid"]]].add(e["tid"])
    assert per_proc == {"worker r0": {1, 2, 3}, "worker r1": {1, 2, 3}}
    assert_no_overlap_per_track(trace)


def test_writes_json_with_orjson(tmp_path: Path) -> None:
    f = make_traces(3)
    path = tmp_path / "t.json"
    trace = to_chrome_trace(f.spans, path, tasks=f.tasks)
    assert json.loads(path.read_bytes()) == trace
    with pytest.raises(ConfigError, match="does not exist"):
        to_chrome_trace(f.spans, tmp_path / "nope" / "t.json")


def test_bad_input() -> None:
    f = make_traces(3)
    with pytest.raises(TraceSchemaError, match="end"):
        to_chrome_trace(f.spans.drop(columns=[S.END]))
    with pytest.raises(TraceSchemaError):
        to_chrome_trace("spans.jsonl")  # type: ignore[arg-type]
    empty = to_chrome_trace(f.spans.iloc[:0])
    assert _x_events(empty) == [] and empty["traceEvents"] == []


def test_open_spans_are_left_out_and_counted() -> None:
    f = make_traces(3)
    spans = f.spans.copy()
    spans.loc[0, S.END] = float("nan")
    trace = to_chrome_trace(spans)
    assert trace["otherData"]["open_spans_dropped"] == 1
    assert len(_span_events(trace)) == len(spans) - 1


def test_real_tracer_frames(tmp_path: Path) -> None:
    fr = record_with_tracer(5).frames()  # type: ignore[attr-defined]
    trace = to_chrome_trace(fr.spans, tmp_path / "x.json", tasks=fr.tasks)
    assert_well_formed(trace)
    assert_no_overlap_per_track(trace)
    tasks = {e["args"]["task_id"] for e in _x_events(trace)}
    assert tasks == set(range(5))
    assert {e["name"] for e in _x_events(trace)} >= {"generate", "reward"}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(0, 10),
                          st.floats(0, 5)), min_size=1, max_size=30))
def test_no_overlap_property(rows: list[tuple[int, int, float, float]]) -> None:
    spans = pd.DataFrame({S.TASK_ID: [r[0] for r in rows], S.SESSION_ID: [r[1] for r in rows],
                          S.PHASE: "generate", S.START: [r[2] for r in rows],
                          S.END: [r[2] + r[3] for r in rows]})
    trace = to_chrome_trace(spans)
    assert_well_formed(trace)
    assert_no_overlap_per_track(trace)
    assert len(_span_events(trace)) == len(rows)
