"""Trace files of batches of columns (schema 2, issue 19): what a line holds, round trips,
schema 1 files still read, malformed batches refused with a one-line error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from rollout_kit import TraceSchemaError
from rollout_kit.tracing import Tracer, load_traces, schema
from rollout_kit.tracing._codes import CONTINUE
from rollout_kit.tracing._frames.files import read_records


def _fill(tr: Tracer, ids: range) -> None:
    for i in ids:
        tr.register_task(i, split="train" if i % 2 else "test", weight=i * 0.5)
        with tr.task_scope(i):
            tr.mark(i, "dispatch")
            if i % 2:
                tr.mark(i, "start")
            for k in range(i % 3):
                with tr.session() as sid:
                    with tr.phase("generate"):
                        pass
                    tr.annotate(server=f"s{k}", flag=bool(k), note="é ☃" if k else None)
                    tr.increment(prompt_tokens=i, completion_tokens=2 * i + k)
                    if i % 4 == 1:
                        assert sid is not None
                        tr.live.add_event(sid, CONTINUE, tr.epoch_ns + 1000 * i,
                                          7 if k else -(2**63))
            with tr.phase("toolcall"):  # the task's own span (no session)
                pass
            if i % 5 == 0:
                tr.begin_phase("reward")  # left open: closed at finalize
        tr.finalize(i, ("accepted", "rejected", "failed")[i % 3],
                    reason="filtered" if i % 4 == 0 else None,
                    error=RuntimeError("x") if i % 7 == 0 else None)
        if i % 2 == 0:
            tr.mark(i, "consume")  # late mark


def _same(a: Any, b: Any) -> None:
    for name in ("tasks", "sessions", "spans", "events"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def test_one_line_of_columns_per_flush(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, flush_threshold=10**6, parquet=False)
    _fill(tr, range(12))
    tr.flush()
    tr.flush()  # nothing new: no line
    lines = _lines(path)
    assert [r["kind"] for r in lines] == ["header", "columns"]
    assert lines[0]["schema"] == schema.SCHEMA_VERSION == 2
    batch = lines[1]
    assert batch["tasks"]["task_id"] == list(range(12))
    assert batch["names"]["status"] == list(schema.STATUSES)
    assert [batch["names"]["status"][c] for c in batch["tasks"]["status"]] == [
        ("accepted", "rejected", "failed")[i % 3] for i in range(12)]
    assert sum(batch["tasks"]["n_sessions"]) == len(batch["sessions"]["session_id"])
    assert batch["tasks"]["marks"]["dispatch"] is not None
    start = batch["tasks"]["marks"]["start"]  # absent for some tasks: null there
    assert [v is None for v in start] == [i % 2 == 0 for i in range(12)]
    assert batch["marks"]["task_id"] == [i for i in range(12) if i % 2 == 0]
    assert batch["reason"][0] == [0, 4, 8] and batch["reason"][1] == ["filtered"] * 3
    assert set(batch["session_attrs"]) >= {"server", "flag", "prompt_tokens"}
    assert batch["events"]["value"] == [None, None, 7]  # tasks 1 and 5: 1 + 2 sessions
    # every line re-encodes to itself: plain JSON, no numpy artefacts
    for line in path.read_bytes().splitlines():
        assert orjson.dumps(orjson.loads(line)) == line


@pytest.mark.parametrize("threshold", [1, 3, 1000])
def test_round_trip_through_batches_of_any_size(tmp_path: Path, threshold: int) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, flush_threshold=threshold, worker="w0")
    _fill(tr, range(30))
    tr.close()
    loaded = load_traces(path)
    _same(tr.frames(), loaded)
    _same(loaded, load_traces(tmp_path / "t.parquet"))  # compacted from memory
    assert loaded.wall_epoch == tr.wall_epoch
    assert loaded.spans["closed_at_finalize"].sum() == 6
    assert len(loaded.events) == tr.frames().events.shape[0] > 0


def test_non_finite_floats_load_as_missing_as_before(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, parquet=False)
    tr.register_task(0, score=math.nan)
    tr.register_task(1, score=1.5)
    tr.finalize(0, "accepted")
    tr.finalize(1, "accepted")
    tr.flush()
    scores = load_traces(path).tasks["score"]
    assert scores.isna().tolist() == [True, False] and scores.iloc[1] == 1.5


def test_ingest_of_a_read_back_file_then_a_late_mark(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, flush_threshold=4, parquet=False)
    _fill(tr, range(9))
    tr.flush()
    other = Tracer()
    assert other.ingest(read_records(path)) == 9
    other.mark(3, "consume")  # an ingested id: recorded like a finalized task's
    assert other.tasks_df().loc[3, "consume_ts"] > 0
    _same(load_traces(path), tr.frames())


def test_schema_1_files_still_load(tmp_path: Path) -> None:
    tr = Tracer(worker="old")
    _fill(tr, range(10))
    frames = tr.frames()
    recs = tr.drain_records()  # one record per task, as schema 1 files hold them
    recs[0] = {**recs[0], "schema": 1}
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    _same(frames, load_traces(old))
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(orjson.dumps({**recs[0], "schema": 3}) + b"\n")
    with pytest.raises(TraceSchemaError, match="schema 3"):
        load_traces(newer)


def _batch(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, flush_threshold=10**6, parquet=False)
    _fill(tr, range(6))
    tr.flush()
    header, batch = _lines(path)
    return header, batch


def _set(rec: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(rec))
    *parents, last = where.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize(("where", "value"), [
    ("tasks.task_id", "x"),
    ("tasks.task_id", [1.5, 2.5, 3.5, 4.5, 5.5, 6.5]),
    ("tasks.status", [0, 1, 2, 99, 0, 0]),
    ("tasks.status", [-1, 1, 1, 1, 1, 1]),
    ("tasks.n_sessions", [9, 9, 9, 9, 9, 9]),
    ("tasks.marks.submit", [1, 2]),
    ("tasks.marks", [1, 2]),
    ("names.status", ["accepted", "nope", "x", "y", "z"]),
    ("names", None),
    ("spans.session", [5] * 12),
    ("spans.start", None),
    ("sessions", {}),
    ("reason", [[0, 0], ["a", "b"]]),
    ("reason", [[0], [["not", "a", "scalar"]]]),
    ("task_attrs.split", [[99], ["x"]]),
    ("events.task", [40, 41]),
    ("marks.event", [9, 9, 9]),
])
def test_malformed_batches_are_one_line_errors(tmp_path: Path, where: str,
                                                value: Any) -> None:
    header, batch = _batch(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(orjson.dumps(header) + b"\n" + orjson.dumps(_set(batch, where, value))
                    + b"\n")
    with pytest.raises(TraceSchemaError, match="malformed record 1") as info:
        load_traces(bad)
    assert "\n" not in str(info.value)


def test_a_refused_batch_adds_nothing(tmp_path: Path) -> None:
    header, batch = _batch(tmp_path)
    tr = Tracer()
    bad = _set(batch, "task_attrs.brand_new", [[0, 1], ["only one value"]])
    with pytest.raises(TraceSchemaError):
        tr.ingest([header, bad])
    assert len(tr) == 0 and "brand_new" not in tr.tasks_df().columns
    assert tr.ingest([header, batch]) == 6
