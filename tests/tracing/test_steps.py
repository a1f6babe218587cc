"""The RL steps frames: recorded by a tracer, written to JSONL and Parquet, read back."""

from __future__ import annotations

import math
from time import perf_counter_ns

import pandas as pd
import pytest

from rollout_kit import ConfigError, TraceSchemaError
from rollout_kit.tracing import Tracer, load_traces, schema


def _record(tr: Tracer) -> None:
    t0 = perf_counter_ns()
    ms = 1_000_000
    tr.record_step({"step": 0, "version": 0, "start_ts": t0, "batch_ready_ts": t0 + 5 * ms,
                    "train_start_ts": t0 + 5 * ms, "train_end_ts": t0 + 9 * ms,
                    "update_start_ts": t0 + 9 * ms, "update_end_ts": t0 + 11 * ms,
                    "samples": 2, "tokens": 30, "status": "ok", "error": None},
                   [{"task_id": 0, "step": 0, "version_min": 0, "version_max": 0,
                     "staleness": 0, "partial": False, "tokens": 10},
                    {"task_id": 2, "step": 0, "version_min": 0, "version_max": 0,
                     "staleness": 0, "partial": False, "tokens": 20}])
    tr.record_step({"step": 1, "version": 1, "start_ts": t0 + 11 * ms,
                    "batch_ready_ts": t0 + 12 * ms, "train_start_ts": t0 + 12 * ms,
                    "train_end_ts": None, "update_start_ts": None, "update_end_ts": None,
                    "samples": 1, "tokens": 7, "status": "train_failed",
                    "error": "RuntimeError: boom"},
                   [{"task_id": 1, "step": 1, "version_min": 0, "version_max": 1,
                     "staleness": 1, "partial": True, "tokens": 7}])


def _check(steps: pd.DataFrame, samples: pd.DataFrame) -> None:
    assert list(steps.columns) == list(schema.STEP_COLUMNS)
    assert list(steps.index) == [0, 1] and steps.index.name == "step"
    assert steps.loc[0, "batch_ready_ts"] - steps.loc[0, "start_ts"] == pytest.approx(0.005)
    assert steps.loc[0, "update_end_ts"] - steps.loc[0, "update_start_ts"] == pytest.approx(
        0.002)
    assert math.isnan(steps.loc[1, "update_start_ts"])
    assert steps.loc[1, "status"] == "train_failed" and steps.loc[1, "error"].startswith("Run")
    assert pd.isna(steps.loc[0, "error"])
    assert list(samples.columns) == list(schema.STEP_SAMPLE_COLUMNS)
    assert list(samples.index) == [0, 2, 1]
    assert samples.loc[1, "partial"] and samples.loc[1, "staleness"] == 1
    assert samples["tokens"].sum() == 37


def test_steps_are_in_memory_frames_and_survive_jsonl_and_parquet(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    tr = Tracer(path=path)
    _record(tr)
    steps, samples = tr.steps_df()
    _check(steps, samples)
    _check(tr.frames().steps, tr.frames().step_samples)
    from_jsonl = load_traces(path)  # written at once: a step is flushed when recorded
    _check(from_jsonl.steps, from_jsonl.step_samples)
    pd.testing.assert_frame_equal(from_jsonl.steps, steps, rtol=0, atol=2e-9)
    tr.close()  # compacted to Parquet
    pq = tmp_path / "trace.parquet"
    assert pq.is_file()
    from_parquet = load_traces(pq)
    pd.testing.assert_frame_equal(from_parquet.steps, from_jsonl.steps, rtol=0, atol=2e-9)
    pd.testing.assert_frame_equal(from_parquet.step_samples, from_jsonl.step_samples)


def test_a_trace_without_steps_has_empty_frames_with_the_columns(tmp_path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl")
    tr.close()
    t = load_traces(tmp_path / "t.parquet")
    assert t.steps.empty and list(t.steps.columns) == list(schema.STEP_COLUMNS)
    assert t.step_samples.empty


def test_drained_steps_are_ingested_by_another_tracer() -> None:
    a, b = Tracer(), Tracer()
    _record(a)
    b.ingest(a.drain_records())
    _check(*b.steps_df())


def test_a_step_without_a_key_is_refused_and_a_bad_record_named(tmp_path) -> None:
    tr = Tracer()
    with pytest.raises(ConfigError, match="missing key 'tokens'"):
        tr.record_step({"step": 0, "version": 0, "start_ts": 0, "batch_ready_ts": 0,
                        "train_start_ts": 0, "train_end_ts": 0, "update_start_ts": 0,
                        "update_end_ts": 0, "samples": 0, "status": "ok", "error": None})
    assert tr.steps_df()[0].empty
    src = Tracer()
    _record(src)
    recs = src.drain_records()
    for r in recs:
        if r["kind"] == "rl_steps":
            r["steps"]["version"][0] = "zero"
    with pytest.raises(TraceSchemaError, match="malformed record"):
        Tracer().ingest(recs)


def test_compacting_a_jsonl_trace_keeps_its_steps(tmp_path) -> None:
    from rollout_kit.tracing import compact_trace

    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, parquet=False)
    _record(tr)
    tr.flush()
    out, _ = compact_trace(path, tmp_path / "c.parquet")
    back = load_traces(out)
    _check(back.steps, back.step_samples)
