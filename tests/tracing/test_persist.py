"""JSONL persistence: round trips, orjson limits, torn files, multi-worker merge."""

from __future__ import annotations

import time
import uuid
import warnings
from pathlib import Path

import orjson
import pandas as pd
import pytest

from rollout_kit import ConfigError, TraceSchemaError
from rollout_kit.tracing import TornTraceWarning, Tracer, load_traces, trace_phase


def _fill(tr: Tracer, ids: range, *, statuses: tuple[str, ...] = ("accepted", "rejected")
          ) -> None:
    for i in ids:
        tr.register_task(i, split="train" if i % 2 else "test")
        with tr.task_scope(i):
            tr.mark(i, "dispatch")
            for k in range(2):
                with tr.session():
                    with trace_phase("generate"):
                        pass
                    tr.annotate(server=f"s{k}", stop_reason="stop", note="é ☃")
                    tr.increment(prompt_tokens=i, completion_tokens=2 * i + k)
            if i % 3 == 0:
                tr.begin_phase("reward")  # left open: closed at finalize
        tr.finalize(i, statuses[i % len(statuses)],
                    reason="filtered" if i % 4 == 0 else None,
                    error=RuntimeError("x") if i % 5 == 0 else None)
        tr.mark(i, "consume")


def _assert_same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_round_trip_is_identical(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    tr = Tracer(path=path, flush_threshold=7, worker="w0")
    _fill(tr, range(50))
    tr.close()
    orig = tr.frames()
    loaded = load_traces(path)
    _assert_same(orig.tasks, loaded.tasks)
    _assert_same(orig.sessions, loaded.sessions)
    _assert_same(orig.spans, loaded.spans)
    assert loaded.wall_epoch == tr.wall_epoch
    assert loaded.spans["closed_at_finalize"].sum() == 17


def test_batches_are_written_at_threshold(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, flush_threshold=10)
    _fill(tr, range(9))
    lines = path.read_bytes().splitlines()
    # finalize + consume per task: the 10th record (task 4's consume) triggers one batch,
    # written as one line of columns (5 tasks, 5 late marks)
    assert len(lines) == 1 + 1
    batch = orjson.loads(lines[1])
    assert batch["kind"] == "columns" and batch["tasks"]["task_id"] == [0, 1, 2, 3, 4]
    assert batch["marks"]["task_id"] == [0, 1, 2, 3, 4]
    assert tr.stats["unwritten"] == 8
    tr.flush()
    lines = path.read_bytes().splitlines()
    assert orjson.loads(lines[0])["kind"] == "header"
    assert len(lines) == 3
    assert sum(len(orjson.loads(x)["tasks"]["task_id"]) for x in lines[1:]) == 9
    assert tr.stats["unwritten"] == 0


def test_every_record_round_trips_through_orjson(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl")
    _fill(tr, range(20))
    tr.flush()
    for line in (tmp_path / "t.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        assert orjson.dumps(rec) == line


def test_orjson_rejects_uuid_sized_ints_so_ids_are_sequential() -> None:
    big = uuid.uuid4().int | (1 << 100)  # a uuid4 int is ~128 bits
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps({"task_id": big})
    assert orjson.loads(orjson.dumps({"task_id": 2**63 - 1}))["task_id"] == 2**63 - 1
    with pytest.raises(ValueError):  # InvalidTaskIdError is a ValueError
        Tracer().register_task(big)


def test_torn_last_line_warns_and_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path)
    _fill(tr, range(4))
    tr.flush()
    data = path.read_bytes()
    path.write_bytes(data + b'{"kind": "task", "task_id": 99, "sta')
    with pytest.warns(TornTraceWarning):
        loaded = load_traces(path)
    assert list(loaded.tasks.index) == [0, 1, 2, 3]
    # a corrupt line in the middle is an error, not a warning
    lines = data.splitlines()
    path.write_bytes(b"\n".join([lines[0], b"{oops", *lines[1:]]) + b"\n")
    with pytest.raises(TraceSchemaError, match="line 2"):
        load_traces(path)


def test_not_a_trace(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"a": 1}\n')
    with pytest.raises(TraceSchemaError, match="not a rollout_kit trace"):
        load_traces(p)
    p.write_bytes(b'{"kind": "header", "format": "rollout_kit.trace", "schema": 1}\n')
    with pytest.raises(TraceSchemaError, match="wall_epoch"):
        load_traces(p)
    p.write_bytes(b"")
    with pytest.raises(TraceSchemaError):
        load_traces(p)
    with pytest.raises(ConfigError):
        load_traces(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError):
        load_traces(str(tmp_path / "nothing*.jsonl"))


def test_multi_file_glob_merges_on_wall_clock(tmp_path: Path) -> None:
    a = Tracer(path=tmp_path / "w0.jsonl", worker="w0")
    time.sleep(0.02)
    b = Tracer(path=tmp_path / "w1.jsonl", worker="w1")
    _fill(a, range(5))
    _fill(b, range(5, 10))
    a.close()
    b.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merged = load_traces(str(tmp_path / "w*.jsonl"))
    assert merged.wall_epoch == a.wall_epoch
    assert list(merged.tasks.index) == list(range(10))
    assert set(merged.tasks["worker"]) == {"w0", "w1"}
    # b's times are shifted by the difference of the wall anchors
    own = b.tasks_df()["submit_ts"]
    shift = b.wall_epoch - a.wall_epoch
    assert shift > 0.015
    pd.testing.assert_series_equal(merged.tasks.loc[5:, "submit_ts"], own + shift,
                                   check_exact=False, atol=1e-6)
    same = load_traces([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"])
    pd.testing.assert_frame_equal(same.tasks, merged.tasks)
    by_dir = load_traces(tmp_path)
    pd.testing.assert_frame_equal(by_dir.spans, merged.spans)


def test_drain_and_ingest_between_tracers() -> None:
    worker = Tracer(worker="ray-1")
    main = Tracer(worker="driver")
    _fill(worker, range(6))
    worker.register_task(6)  # live: stays in the worker
    recs = worker.drain_records()
    assert recs[0]["kind"] == "header" and len(worker.tasks_df()) == 1
    assert main.ingest(recs) == 6
    _fill(worker, range(7, 9))
    worker.finalize(6, "cancelled")
    assert main.ingest(worker.drain_records()) == 3
    assert worker.drain_records() == []
    f = main.frames()
    assert sorted(f.tasks.index) == list(range(9))
    assert set(f.tasks["worker"]) == {"ray-1"}
    assert f.tasks.loc[6, "status"] == "cancelled"
    assert f.tasks["consume_ts"].notna().sum() == 8
    assert len(f.sessions) == 16 and f.sessions["server"].notna().all()
    with pytest.raises(TraceSchemaError, match="before any header"):
        main.ingest(recs[1:])
    with pytest.raises(TraceSchemaError):
        main.ingest([recs[0], {"kind": "task", "task_id": 1}])


def test_controller_file_keeps_ingested_workers(tmp_path: Path) -> None:
    worker = Tracer(worker="w7")
    _fill(worker, range(3))
    main = Tracer(path=tmp_path / "main.jsonl")
    main.ingest(worker.drain_records())
    main.close()
    loaded = load_traces(tmp_path / "main.jsonl")
    pd.testing.assert_frame_equal(loaded.tasks, main.tasks_df())
    assert set(loaded.tasks["worker"]) == {"w7"}
