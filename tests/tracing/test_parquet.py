"""Parquet form of a trace: the same frames as the JSONL it came from, compaction on close and
by ``rollout-kit convert``, Parquet preferred over its own JSONL, bad files."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_kit import ConfigError, TraceSchemaError
from rollout_kit._cli import main
from rollout_kit.tracing import (
    StaleParquetWarning,
    Tracer,
    Traces,
    compact_trace,
    load_traces,
    register_phase,
    session_event,
    trace_phase,
)
from rollout_kit.tracing import (
    schema as S,
)
from rollout_kit.tracing._frames import files as persist
from rollout_kit.tracing._frames.parquet import META_KEY, read_info

register_phase("verify")

_FRAMES = ("tasks", "sessions", "spans", "events")


def _fill(tr: Tracer, ids: range, *, worker: str | None = None) -> None:
    """Every record kind: several statuses, reasons, errors, task and session attributes of
    every type, phases in and outside sessions, spans left open (closed at finalize),
    session events, late marks."""
    for i in ids:
        tr.register_task(i, worker=worker, split="train" if i % 2 else "test", weight=i * 0.5,
                         flag=bool(i % 3), step=i, mixed=i if i % 2 else "odd",
                         maybe=None if i % 4 == 0 else i, ratio=math.nan if i == 3 else 1.5)
        with tr.task_scope(i):
            tr.mark(i, "dispatch")
            tr.mark(i, "start")
            with trace_phase("verify"):  # a task-level span: no session
                pass
            for k in range(1 + i % 3):
                with tr.session():
                    with trace_phase("generate"):
                        if i % 5 == 1:
                            session_event(S.CONTINUE, version=i)
                            session_event(S.CONTINUE)
                    tr.annotate(server=f"127.0.0.1:{30000 + k}", stop_reason="stop",
                                note="é ☃", ttft_s=0.01 * k, big=2**62 + k)
                    if k:
                        tr.annotate(odd_one=True if i % 2 else "x")
                    tr.increment(prompt_tokens=i, completion_tokens=2 * i + k, retries=k)
            if i % 3 == 0:
                tr.begin_phase("reward")  # left open: closed at finalize
        status = ("accepted", "rejected", "failed", "cancelled")[i % 4]
        tr.finalize(i, status, reason="filtered" if status == "rejected" else None,
                    error=RuntimeError(f"boom {i}") if status == "failed" else None)
        if i % 2 == 0:
            tr.mark(i, "consume")


def _assert_same(a: Traces, b: Traces) -> None:
    for name in _FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.wall_epoch == b.wall_epoch


def _traced(path: Path, ids: range = range(24), **kw: object) -> Tracer:
    tr = Tracer(path=path, flush_threshold=5, worker=path.stem, **kw)  # type: ignore[arg-type]
    _fill(tr, ids)
    return tr


# -- same frames ----------------------------------------------------------------------------

def test_close_writes_parquet_that_loads_to_the_same_frames(tmp_path: Path) -> None:
    tr = _traced(tmp_path / "w0.jsonl")
    tr.register_task(999)  # live at close: in neither form
    tr.close()
    pq_path = tmp_path / "w0.parquet"
    assert tr.parquet_path == pq_path and pq_path.is_file()
    assert (tmp_path / "w0.jsonl").is_file()  # the log stays
    from_jsonl = load_traces(tmp_path / "w0.jsonl")
    from_parquet = load_traces(pq_path)
    _assert_same(from_jsonl, from_parquet)
    t = from_parquet.tasks
    assert set(t["status"]) == {"accepted", "rejected", "failed", "cancelled"}
    assert t["error"].notna().sum() == 6 and (t["reason"] == "filtered").sum() == 6
    assert from_parquet.spans[S.CLOSED_AT_FINALIZE].sum() == 8
    assert from_parquet.spans[S.SESSION_ID].isna().sum() == 24 + 8  # task-level spans
    assert len(from_parquet.events) == 2 * 9  # two per session of tasks 1, 6, 11, 16, 21
    assert t["consume_ts"].notna().sum() == 12
    assert t["mixed"].dtype == object
    # ints with explicit Nones: an Int64 column, the Nones NA (a JSON field in the file)
    assert t["maybe"].dtype == "Int64"
    assert t["maybe"].isna().tolist() == [i % 4 == 0 for i in range(len(t))]
    assert t["flag"].dtype == "boolean" and t["step"].dtype == "Int64"
    assert from_parquet.sessions["big"].dtype == "Int64"
    info = read_info(pq_path)
    assert info.meta["schema"] == S.SCHEMA_VERSION and info.wall_epoch == tr.wall_epoch
    assert info.meta["headers"][0]["worker"] == "w0"
    assert info.source is not None and info.source["size"] == (tmp_path / "w0.jsonl").stat(
        ).st_size


def test_several_workers_files_and_a_mix_of_forms(tmp_path: Path) -> None:
    a = _traced(tmp_path / "w0.jsonl", range(10))
    b = _traced(tmp_path / "w1.jsonl", range(10, 22))
    b.register_task(50, worker="in-process-2")  # another worker through the same tracer
    b.finalize(50, "accepted")
    a.close()
    b.close()
    jsonl = load_traces([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"])
    _assert_same(jsonl, load_traces([tmp_path / "w0.parquet", tmp_path / "w1.parquet"]))
    _assert_same(jsonl, load_traces([tmp_path / "w0.parquet", tmp_path / "w1.jsonl"]))
    _assert_same(jsonl, load_traces([tmp_path / "w0.jsonl", tmp_path / "w1.parquet"]))
    assert set(jsonl.tasks["worker"]) == {"w0", "w1", "in-process-2"}
    assert jsonl.wall_epoch == min(a.wall_epoch, b.wall_epoch)


def test_ingested_and_drained_records(tmp_path: Path) -> None:
    worker = Tracer(worker="ray-1")
    _fill(worker, range(5))
    main_tr = Tracer(path=tmp_path / "main.jsonl", worker="driver")
    main_tr.ingest(worker.drain_records())
    main_tr.mark(2, "consume")
    main_tr.close()
    _assert_same(load_traces(tmp_path / "main.jsonl"), load_traces(tmp_path / "main.parquet"))
    # records drained out of a tracer are in its file only: compaction reads the file
    tr = _traced(tmp_path / "drained.jsonl", range(6))
    tr.drain_records()
    _fill(tr, range(6, 9))
    tr.close()
    parquet = load_traces(tmp_path / "drained.parquet")
    assert list(parquet.tasks.index) == list(range(9))
    _assert_same(load_traces(tmp_path / "drained.jsonl"), parquet)


def test_empty_and_attribute_free_traces(tmp_path: Path) -> None:
    empty = Tracer(path=tmp_path / "empty.jsonl")
    empty.close()
    _assert_same(load_traces(tmp_path / "empty.jsonl"), load_traces(tmp_path / "empty.parquet"))
    bare = Tracer(path=tmp_path / "bare.jsonl")
    for i in range(3):
        bare.register_task(i)
        bare.finalize(i, "accepted")
    bare.close()
    _assert_same(load_traces(tmp_path / "bare.jsonl"), load_traces(tmp_path / "bare.parquet"))


@pytest.mark.parametrize("values", [
    [1, 2, None], [1, 2.5], [True, 1], [1.0, math.inf], ["a", None, "b"], [None, None],
    [2**63 - 1, -(2**63) + 1], [0.1, -0.0, 1e300],
])
def test_attribute_values_round_trip_like_json(tmp_path: Path, values: list[object]) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl")
    for i, v in enumerate(values):
        tr.register_task(i, x=v)  # type: ignore[arg-type]
        with tr.task_scope(i), tr.session():
            tr.annotate(y=v, retries=v, ttft_s=v, server=v)  # type: ignore[arg-type]
        tr.finalize(i, "accepted")
    tr.close()
    _assert_same(load_traces(tmp_path / "t.jsonl"), load_traces(tmp_path / "t.parquet"))


def test_attribute_names_parquet_paths_could_trip_on(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl")
    odd = {"a.b": "x", "": 1, "x y": "z", "é": "q", "list.element": "w"}
    for i in range(3):
        tr.register_task(i, **odd)  # type: ignore[arg-type]
        with tr.task_scope(i), tr.session():
            tr.annotate(**{"s.t": "v", "attrs": "k"})
        tr.finalize(i, "accepted")
    tr.close()
    loaded = load_traces(tmp_path / "t.parquet")
    _assert_same(load_traces(tmp_path / "t.jsonl"), loaded)
    assert list(loaded.tasks.columns[-5:]) == list(odd)


def test_hand_made_jsonl_with_several_headers_and_a_wide_int(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _traced(a, range(3), parquet=False).close()
    _traced(b, range(3, 6), parquet=False).close()
    both = tmp_path / "both.jsonl"
    lines = a.read_bytes().splitlines() + b.read_bytes().splitlines()
    rec = orjson.loads(lines[1])  # the first batch of columns: task row 0 gets "huge"
    rec.setdefault("task_attrs", {})["huge"] = [[0], [2**64 - 1]]  # JSON holds it, not int64
    lines[1] = orjson.dumps(rec)
    both.write_bytes(b"\n".join(lines) + b"\n")
    target, snap = compact_trace(both)
    assert target == tmp_path / "both.parquet" and len(snap.task_id) == 6
    assert len(read_info(target).meta["headers"]) == 2
    _assert_same(load_traces(both), load_traces(target))
    assert assert_huge(load_traces(target).tasks) == 2**64 - 1


def assert_huge(tasks: pd.DataFrame) -> object:
    return tasks["huge"].dropna().iloc[0]


# -- compaction -------------------------------------------------------------------------------

def test_compaction_option_and_recompaction(tmp_path: Path) -> None:
    off = _traced(tmp_path / "off.jsonl", range(3), parquet=False)
    off.close()
    assert off.parquet_path is None and not (tmp_path / "off.parquet").exists()
    tr = _traced(tmp_path / "t.jsonl", range(4))
    tr.close()
    stamp = (tmp_path / "t.parquet").stat().st_mtime_ns
    tr.close()  # nothing new: not rewritten
    assert (tmp_path / "t.parquet").stat().st_mtime_ns == stamp
    _fill(tr, range(4, 8))
    tr.close()
    assert len(load_traces(tmp_path / "t.parquet").tasks) == 8
    _assert_same(load_traces(tmp_path / "t.jsonl"), load_traces(tmp_path / "t.parquet"))
    tr.reset()  # the JSONL starts over: its old Parquet form goes
    assert not (tmp_path / "t.parquet").exists()
    with pytest.raises(ConfigError, match="JSONL log"):
        Tracer(path=tmp_path / "x.parquet")
    with Tracer(path=tmp_path / "ctx.jsonl") as ctx_tr:
        _fill(ctx_tr, range(2))
    assert (tmp_path / "ctx.parquet").is_file()


def test_a_new_tracer_removes_the_parquet_of_the_file_it_truncates(tmp_path: Path) -> None:
    _traced(tmp_path / "t.jsonl", range(3)).close()
    other = tmp_path / "t2.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(other)
    Tracer(path=tmp_path / "t.jsonl")
    assert not (tmp_path / "t.parquet").exists()
    Tracer(path=tmp_path / "t2.jsonl")  # not a trace Parquet: left alone
    assert other.exists()


# -- which files a directory or glob loads ------------------------------------------------------

def test_directory_and_glob_prefer_parquet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    a = _traced(tmp_path / "w0.jsonl", range(5))
    b = _traced(tmp_path / "w1.jsonl", range(5, 9))
    a.close()
    b.close()
    expected = load_traces([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"])
    read: list[Path] = []
    original = persist.read_records

    def spy(path: Path) -> list[dict[str, object]]:
        read.append(Path(path))
        return original(path)

    monkeypatch.setattr(persist, "read_records", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _assert_same(expected, load_traces(tmp_path))
        _assert_same(expected, load_traces(str(tmp_path / "w*")))
    assert read == []  # no JSONL parsed: both came from Parquet
    # w1.jsonl grows after its compaction: its Parquet is stale, the JSONL is loaded
    _fill(b, range(9, 11))
    b.flush()
    with pytest.warns(StaleParquetWarning, match=r"w1\.parquet"):
        grown = load_traces(tmp_path)
    assert read == [tmp_path / "w1.jsonl"]
    assert list(grown.tasks.index) == list(range(11))


def test_convert_out_folder_pairs_by_recorded_path(tmp_path: Path) -> None:
    src = tmp_path / "runs"
    src.mkdir()
    _traced(src / "w0.jsonl", range(4), parquet=False).close()
    out = tmp_path / "pq"
    assert main(["convert", str(src), "--out", str(out)]) == 0
    assert (out / "w0.parquet").is_file() and not (src / "w0.parquet").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        both = load_traces([src / "w0.jsonl", out / "w0.parquet"])  # one of them only
    assert len(both.tasks) == 4


# -- rollout-kit convert ----------------------------------------------------------------------

def test_convert_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, ids in (("a", range(3)), ("b", range(3, 5))):
        _traced(tmp_path / f"{name}.jsonl", ids, parquet=False).close()
    assert main(["convert", str(tmp_path / "*.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{tmp_path / 'a.jsonl'} -> {tmp_path / 'a.parquet'}: 3 tasks, ")
    assert "MB -> " in lines[1]
    _assert_same(load_traces(tmp_path / "a.jsonl"), load_traces(tmp_path / "a.parquet"))


@pytest.mark.parametrize(("args", "needle"), [
    (["nope.jsonl"], "does not exist"),
    (["bad.jsonl"], "not a rollout_kit trace"),
    (["a.parquet"], "Parquet already"),
    (["a.jsonl", "--out", "a.jsonl"], "is not a folder"),
])
def test_convert_cli_bad_input_is_one_line_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: list[str], needle: str) -> None:
    monkeypatch.chdir(tmp_path)
    _traced(tmp_path / "a.jsonl", range(2)).close()
    (tmp_path / "bad.jsonl").write_bytes(b'{"a": 1}\n')
    assert main(["convert", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rollout-kit: error: ") and needle in err[0]


# -- bad Parquet files --------------------------------------------------------------------------

def _rewrite_meta(path: Path, **changes: object) -> None:
    table = pq.read_table(path)
    meta = orjson.loads(table.schema.metadata[META_KEY])
    meta.update(changes)
    pq.write_table(table.replace_schema_metadata({META_KEY: orjson.dumps(meta)}), path)


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    _traced(tmp_path / "t.jsonl", range(2)).close()
    _rewrite_meta(tmp_path / "t.parquet", schema=S.SCHEMA_VERSION + 1)
    with pytest.raises(TraceSchemaError) as err:
        load_traces(tmp_path / "t.parquet")
    msg = str(err.value)
    assert os.fspath(tmp_path / "t.parquet") in msg
    assert f"schema {S.SCHEMA_VERSION + 1}" in msg and f"schema {S.SCHEMA_VERSION})" in msg
    assert "newer" in msg


def test_not_a_trace_and_truncated_parquet(tmp_path: Path) -> None:
    other = tmp_path / "frame.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(other)
    with pytest.raises(TraceSchemaError, match=r"frame\.parquet: is not a rollout_kit trace"):
        load_traces(other)
    _traced(tmp_path / "t.jsonl", range(6)).close()
    data = (tmp_path / "t.parquet").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceSchemaError, match=r"cut\.parquet: is not a readable Parquet file"):
        load_traces(cut)
    with pytest.raises(TraceSchemaError, match="not a readable Parquet"):
        load_traces(str(tmp_path / "*.parquet"))  # frame, cut and t: the first bad one
    # rows that do not match the metadata
    _rewrite_meta(tmp_path / "t.parquet", tasks=1)
    with pytest.raises(TraceSchemaError, match="rows"):
        load_traces(tmp_path / "t.parquet")
    # a column missing
    table = pa.table({"kind": pa.array(["task"]).dictionary_encode(), "task_id": [1]})
    header = {"format": "rollout_kit.trace", "schema": S.SCHEMA_VERSION, "wall_epoch": 0.0,
              "tasks": 1, "marks": 0}
    pq.write_table(table.replace_schema_metadata({META_KEY: orjson.dumps(header)}),
                   tmp_path / "thin.parquet")
    with pytest.raises(TraceSchemaError, match=r"thin\.parquet: has no column"):
        load_traces(tmp_path / "thin.parquet")
