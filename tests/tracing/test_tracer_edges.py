"""The tracer's API at its edges: when a trace file is written (the flush threshold after
finalize, ingest, drain and compact: at the edge and one before it), the current task of
``annotate_task`` / ``register_session`` (this tracer's, never another's), the exact errors,
and the repr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rollout_kit import ConfigError, TraceStateError, UnknownTaskIdError
from rollout_kit.tracing import Tracer
from rollout_kit.tracing._tracer import MAX_ERROR_CHARS


def _lines(path: Path) -> int:
    """Lines of the trace file: the header, then one line per flush."""
    return path.read_text().count("\n")


def _finish(tr: Tracer, tid: int) -> None:
    tr.register_task(tid)
    tr.finalize(tid, "accepted")


def test_finalize_writes_at_the_flush_threshold(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, flush_threshold=2, parquet=False)
    start = _lines(path)
    _finish(tr, 0)
    assert _lines(path) == start  # one record: below the threshold
    _finish(tr, 1)
    assert _lines(path) == start + 1  # at it: written
    _finish(tr, 2)
    assert _lines(path) == start + 1  # the count started again after the write
    tr.drain_records()
    drained = _lines(path)
    _finish(tr, 3)
    assert _lines(path) == drained  # drained: the count started again
    _finish(tr, 4)
    assert _lines(path) == drained + 1
    tr.close()


def test_ingest_writes_at_the_flush_threshold(tmp_path: Path) -> None:
    def records(tid: int) -> list[dict[str, object]]:
        src = Tracer()
        _finish(src, tid)
        return src.drain_records()

    path = tmp_path / "merged.jsonl"
    tr = Tracer(path=path, flush_threshold=2, parquet=False)
    start = _lines(path)
    assert tr.ingest(records(0)) == 1
    assert _lines(path) == start  # one pending record
    assert tr.ingest(records(1)) == 1
    assert _lines(path) == start + 1  # two: written
    assert tr.ingest(records(2)) == 1
    assert _lines(path) == start + 1
    tr.close()
    memory = Tracer(flush_threshold=1)  # no file: nothing to write, nothing fails
    assert memory.ingest(records(3)) == 1 and len(memory.frames().tasks) == 1


def test_compact_restarts_the_count(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    tr = Tracer(path=path, flush_threshold=2)
    _finish(tr, 0)
    assert tr.compact() is not None
    lines = _lines(path)
    _finish(tr, 1)
    assert _lines(path) == lines  # one since the compaction's write
    _finish(tr, 2)
    assert _lines(path) == lines + 1
    tr.close()


def test_the_current_task_is_this_tracers_own() -> None:
    mine, other = Tracer(), Tracer()
    for tr in (mine, other):
        tr.register_task(0)
    mine.register_task(1)
    with mine.task_scope(1):
        mine.annotate_task(note="mine")
        sid = mine.register_session()
        mine.end_session(sid)
    with other.task_scope(0):  # another tracer's task is not this tracer's current one
        with pytest.raises(TraceStateError, match=r"^annotate_task\(\): no task_id given and "
                                                  r"no current task$"):
            mine.annotate_task(note="x")
        with pytest.raises(TraceStateError, match=r"^register_session\(\): no task_id and no "
                                                  r"current task$"):
            mine.register_session()
    for tid in (0, 1):
        mine.finalize(tid, "accepted")
    other.finalize(0, "accepted")
    f = mine.frames()
    assert f.tasks.loc[1, "note"] == "mine" and f.tasks["note"].isna().tolist() == [True, False]
    assert f.sessions.reset_index()["task_id"].tolist() == [1]


def test_errors_of_the_explicit_api_word_for_word() -> None:
    tr = Tracer()
    with pytest.raises(TraceStateError, match=r"^end_phase\(\) needs a handle from "
                                              r"begin_phase\(\), got 5$"):
        tr.end_phase(5)  # type: ignore[arg-type]
    with pytest.raises(TraceStateError, match=r"^end_session\(\): session 99 is unknown or "
                                              r"its task is finalized$"):
        tr.end_session(99)


def test_a_trace_file_in_a_folder_not_made_yet(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "wr" / "deeper" / "traces.jsonl")
    _finish(tr, 0)
    tr.close()
    assert _lines(tmp_path / "wr" / "deeper" / "traces.jsonl") == 2
    assert (tmp_path / "wr" / "deeper" / "traces.parquet").is_file()


def test_repr_with_and_without_a_file(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    tr = Tracer(path=path, worker="w1", parquet=False)
    _finish(tr, 0)
    tr.register_task(1)
    assert repr(tr) == f"Tracer(worker='w1', tasks=1, live=1, path={str(path)!r})"
    assert repr(Tracer()) == "Tracer(worker=None, tasks=0, live=0, path=None)"
    tr.finalize(1, "accepted")
    tr.close()


def test_defaults_the_dump_it_makes_and_the_file_header(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "h.jsonl", worker="w3", dump=tmp_path / "dumps",
                parquet=False)
    assert tr.flush_threshold == 1024 and len(tr.trace_prefix) == 16
    assert tr.dump is not None and tr.dump.directory == tmp_path / "dumps"
    assert tr.dump.path.name.startswith("trajectories-w3-")  # named for the worker
    header = json.loads((tmp_path / "h.jsonl").read_text().splitlines()[0])
    assert header["epoch_ns"] == tr.epoch_ns and header["pid"] == os.getpid()
    assert header["worker"] == "w3" and header["wall_epoch"] == tr.wall_epoch
    tr.close()


def test_session_calls_name_themselves_and_find_only_their_own_session() -> None:
    mine, other = Tracer(), Tracer()
    other.register_task(0)
    for call in (mine.annotate, mine.increment):
        with pytest.raises(TraceStateError, match=f"^{call.__name__}\\(\\): session 99 is "
                                                  "unknown or its task is finalized$"):
            call(99, x=1)
    with other.task_scope(0), other.session():
        with pytest.raises(TraceStateError, match=r"^annotate\(\): no session_id given and no "
                                                  r"current session$"):
            mine.annotate(x=1)  # another tracer's session is not this tracer's
    mine.increment()  # nothing to add: nothing looked up, nothing raised
    other.finalize(0, "accepted")


def test_a_failure_is_cut_at_max_error_chars_and_reasons_are_text() -> None:
    tr = Tracer()
    tr.register_task(0)
    tr.finalize(0, "failed", error=ValueError("y" * 3000))
    text = "ValueError: " + "y" * 3000
    assert tr.frames().tasks.loc[0, "error"] == (
        f"{text[:MAX_ERROR_CHARS]}… [{len(text) - MAX_ERROR_CHARS} more chars]")
    tr.register_task(1)
    tr.finalize(1, "rejected", reason=5)  # type: ignore[arg-type]
    tr.register_task(2)
    tr.finalize(2, "rejected", reason="returned_none")
    assert tr.frames().tasks["reason"].tolist()[1:] == ["5", "returned_none"]  # as text
    with pytest.raises(ConfigError, match="unknown final status 'pending'"):
        tr.register_task(3)
        tr.finalize(3, "pending")


def test_a_mark_of_an_unknown_task_says_so() -> None:
    tr = Tracer()
    with pytest.raises(UnknownTaskIdError, match=r"mark\('consume'\): task_id 5 was never "
                                                 r"registered in this tracer"):
        tr.mark(5, "consume")
