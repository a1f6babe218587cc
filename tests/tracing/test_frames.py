"""Per-phase seconds of the frames: wall time (union of spans) vs summed session-seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from rollout_kit import ConfigError, analysis
from rollout_kit.tracing import Tracer, load_traces, schema
from rollout_kit.tracing._frames.build import _union_seconds, build_traces
from rollout_kit.tracing._store import FORMAT, Store
from tests._trace_factories import union_length

MS = 1_000_000  # ns


def _task(tid: int, end_ms: int, sessions: int,
          spans: list[tuple[int, str, int, int]]) -> dict[str, object]:
    return {
        "kind": "task", "task_id": tid, "worker": "w0", "status": "accepted", "reason": None,
        "error": None, "marks": [0, 0, 0, end_ms * MS, None], "attrs": {},
        "sessions": [{"session_id": 10 * tid + k, "status": "accepted", "start": 0,
                      "end": end_ms * MS, "attrs": {}} for k in range(sessions)],
        "spans": [[sess, ph, a * MS, b * MS, 0] for sess, ph, a, b in spans],
    }


# Spans are listed in close order, as the tracer records them (not in start order).
HAND = [
    {"kind": "header", "format": FORMAT, "schema": schema.SCHEMA_VERSION,
     "wall_epoch": 1.7e9, "epoch_ns": 0, "worker": "w0", "pid": 1},
    # task 5 comes first: frames are sorted by task id afterwards
    _task(5, 2000, 1, [(0, "generate", 0, 1000), (0, "generate", 1000, 2000)]),  # touching
    _task(3, 4000, 4, [
        (0, "generate", 0, 1000),       # overlaps the next one
        (0, "reward", 1000, 1200),
        (1, "generate", 500, 1500),
        (1, "reward", 1500, 1600),
        (2, "generate", 2100, 2300),    # inside the next span of the same session
        (3, "generate", 2200, 2400),    # inside the next one as well
        (2, "generate", 2000, 2500),    # disjoint from the first block
        (-1, "toolcall", 3200, 4000),   # task-level spans (no session), overlapping
        (-1, "toolcall", 3000, 3500),
    ]),
    _task(4, 100, 0, []),  # no spans at all
]


def _hand_file(tmp_path: Path) -> Path:
    path = tmp_path / "hand.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in HAND))
    return path


def _check_hand(tasks: pd.DataFrame, sessions: pd.DataFrame) -> None:
    t3 = tasks.loc[3]
    # generate: [0, 1.5] ∪ [2.0, 2.5] = 2.0 s of wall time; spans sum to 1 + 1 + .2 + .2 + .5
    assert t3["generate_s"] == pytest.approx(2.0)
    assert t3["generate_session_s"] == pytest.approx(2.9)
    assert t3["reward_s"] == pytest.approx(0.3) and t3["reward_session_s"] == pytest.approx(0.3)
    assert t3["toolcall_s"] == pytest.approx(1.0)  # [3.0, 4.0]
    assert t3["toolcall_session_s"] == pytest.approx(1.3)
    assert t3["generate_s"] <= t3["total_s"] == pytest.approx(4.0)
    t5 = tasks.loc[5]
    assert t5["generate_s"] == pytest.approx(2.0) and t5["generate_session_s"] == pytest.approx(2.0)
    t4 = tasks.loc[4]
    assert t4["generate_s"] == 0.0 and t4["generate_session_s"] == 0.0
    # sessions: wall time within the session; session 32 has [2.0, 2.5] ⊇ [2.1, 2.3]
    assert sessions.loc[(3, 32), "generate_s"] == pytest.approx(0.5)
    assert sessions.loc[(3, 30), "generate_s"] == pytest.approx(1.0)
    assert sessions.loc[(3, 31), "reward_s"] == pytest.approx(0.1)
    assert sessions.loc[(5, 50), "generate_s"] == pytest.approx(2.0)
    assert schema.phase_session_column("generate") not in sessions.columns
    # column order: the fixed columns, wall times, then session-seconds of every phase
    phases = [c[:-2] for c in tasks.columns[len(schema.TASK_COLUMNS):] if c.endswith("_s")
              and not c.endswith("_session_s")]
    n = len(schema.TASK_COLUMNS)
    assert list(tasks.columns[n:n + 2 * len(phases)]) == (
        [schema.phase_column(p) for p in phases]
        + [schema.phase_session_column(p) for p in phases])


def test_phase_wall_time_is_the_union_of_spans_across_sessions(tmp_path: Path) -> None:
    f = load_traces(_hand_file(tmp_path))
    assert list(f.tasks.index) == [3, 4, 5]
    _check_hand(f.tasks, f.sessions)


def test_in_memory_frames_match_loaded_frames(tmp_path: Path) -> None:
    store = Store()
    store.ingest(HAND, 0, 1.7e9)
    mem = build_traces(store.snapshot(), 0, 1.7e9)
    _check_hand(mem.tasks, mem.sessions)
    disk = load_traces(_hand_file(tmp_path))
    pd.testing.assert_frame_equal(mem.tasks, disk.tasks, check_exact=True)
    pd.testing.assert_frame_equal(mem.sessions, disk.sessions, check_exact=True)


def test_summary_reports_wall_time_not_the_sum(tmp_path: Path) -> None:
    f = load_traces(_hand_file(tmp_path))
    s = analysis.summary(f.tasks, sessions=f.sessions)
    assert s.latency.loc["generate_s", "max"] == pytest.approx(2.0)
    assert "generate_session_s" not in s.latency.index
    assert "generate_session" not in analysis.phase_names(f.tasks)


def test_tracer_parallel_sessions_do_not_add_up() -> None:
    import asyncio

    tr = Tracer()

    async def sample() -> None:
        with tr.session(), tr.phase("generate"):
            await asyncio.sleep(0.05)

    async def task() -> None:
        tr.register_task(0)
        with tr.task_scope(0):
            tr.mark(0, "start")
            await asyncio.gather(*(sample() for _ in range(4)))
            tr.mark(0, "end")
        tr.finalize(0, "accepted")

    asyncio.run(task())
    row = tr.frames().tasks.loc[0]
    assert row["generate_s"] <= row["run_s"] + 1e-9
    assert row["generate_session_s"] >= 3.5 * row["generate_s"]


def _reference(owner: np.ndarray, phase: np.ndarray, start: np.ndarray, end: np.ndarray,
               n: int, n_phase: int) -> np.ndarray:
    out = np.zeros((n, n_phase))
    for o in range(n):
        for p in range(n_phase):
            sel = (owner == o) & (phase == p)
            out[o, p] = union_length(zip(start[sel], np.maximum(end[sel], start[sel]),
                                         strict=True)) / 1e9
    return out


@pytest.mark.parametrize("seed", range(8))
def test_union_matches_reference_on_random_spans(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_task, n_phase, m = 5, 3, 80
    task = np.sort(rng.integers(0, n_task, m))  # a task's spans are consecutive
    per_task = 1 + seed % 3  # owners: tasks, or 2-3 sessions per task, interleaved
    owner = task * per_task + rng.integers(0, per_task, m)
    owner[rng.random(m) < 0.1] = -1  # spans left out (no session)
    phase = rng.integers(0, n_phase, m)
    start = rng.integers(0, 10_000, m) * MS
    end = start + rng.integers(-3_000, 3_000, m) * MS  # negative ones count as 0
    n = n_task * per_task
    base = pd.Series(start).groupby(task).transform("min").to_numpy()
    keep = owner >= 0
    args = ((owner * n_phase + phase)[keep], start[keep], end[keep],
            (end[keep] - start[keep]) / 1e9, base[keep], n * n_phase)
    want = _reference(owner, phase, start, end, n, n_phase)
    for singles in (False, True):
        got = _union_seconds(*args, singles=singles).reshape(n, n_phase)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
        one_base = (*args[:4], int(start.min()), args[5])  # one base for the whole run
        got = _union_seconds(*one_base, singles=singles).reshape(n, n_phase)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_span_ending_before_it_starts_counts_zero_and_stays_in_its_group() -> None:
    # group 0: [0, 10] and a span "ending" at 5 after starting at 20 (a clock step back);
    # group 1: [0, 3] ∪ [1, 4]. The late start must not sort into group 1.
    start = np.array([0, 20, 0, 1], dtype=np.int64) * MS
    end = np.array([10, 5, 3, 4], dtype=np.int64) * MS
    group = np.array([0, 0, 1, 1])
    got = _union_seconds(group, start, end, (end - start) / 1e9, 0, 2, singles=False)
    np.testing.assert_allclose(got, [0.010, 0.004])


def test_union_of_very_long_spans_does_not_overflow() -> None:
    start = np.array([0, 2**61, 5, 2**61 + 10, 2**61, 2**61 + 10], dtype=np.int64)
    end = np.array([2**62, 2**62 + 5, 10, 2**62, 2**61 + 20, 2**61 + 30], dtype=np.int64)
    owner = np.array([0, 0, 1, 1, 2, 2])
    base = np.array([0, 0, 5, 5, 2**61, 2**61], dtype=np.int64)
    got = _union_seconds(owner, start, end, (end - start) / 1e9, base, 3, singles=False)
    np.testing.assert_allclose(got, [(2**62 + 5) / 1e9, (5 + 2**62 - 2**61 - 10) / 1e9,
                                     30 / 1e9])


def test_tasks_decades_apart_use_per_task_sort_keys(tmp_path: Path) -> None:
    far = 2**62 // MS  # ms: one base for the whole run would overflow the int64 keys
    records = [HAND[0], _task(1, 1000, 2, [(0, "generate", 0, 600), (1, "generate", 400, 1000)]),
               _task(2, far + 1000, 2, [(1, "generate", far + 500, far + 900),
                                        (0, "generate", far, far + 300)])]
    path = tmp_path / "far.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    f = load_traces(path)
    assert f.tasks.loc[1, "generate_s"] == pytest.approx(1.0)
    assert f.tasks.loc[1, "generate_session_s"] == pytest.approx(1.2)
    assert f.tasks.loc[2, "generate_s"] == pytest.approx(0.7)
    assert f.sessions.loc[(2, 21), "generate_s"] == pytest.approx(0.4)


def test_session_seconds_name_is_reserved() -> None:
    tr = Tracer()
    with pytest.raises(ConfigError, match="reserved"):
        tr.register_task(0, generate_session_s=1.0)
