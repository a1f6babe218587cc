"""Column batches of a trace file (schema 2) that are malformed, one fault at a time: each is
refused with a one-line error naming the record and what is wrong — columns of the wrong
length, counts that do not add up, codes outside their names table, sparse attribute columns
out of range — and a well-formed batch with missing times reads back as NA."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rollout_kit.errors import TraceSchemaError
from rollout_kit.tracing import Tracer, annotate
from rollout_kit.tracing import schema as S

Record = dict[str, Any]


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Record, Record]:
    """The header and the one column batch of a small trace: two tasks, one session and one
    span each, a session attribute."""
    path = tmp_path / "t.jsonl"
    tr = Tracer(path=path, parquet=False)
    for tid in range(2):
        tr.register_task(tid)
        with tr.task_scope(tid), tr.session():
            annotate(server=f"h:{tid}")
            with tr.phase("generate"):
                pass
        tr.finalize(tid, "accepted")
    tr.close()
    header, columns = (json.loads(line) for line in path.read_text().splitlines())
    assert columns["kind"] == "columns"
    return header, columns


def _set(path: str, value: Any) -> Callable[[Record], None]:
    keys = path.split(".")

    def change(rec: Record) -> None:
        node = rec
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return change


FAULTS: list[tuple[str, Callable[[Record], None], str]] = [
    ("n_sessions", _set("tasks.n_sessions", [1, 5]),
     "the tasks' n_sessions / n_spans do not match the sessions and spans in the record"),
    ("negative n_spans", _set("tasks.n_spans", [2, -1]),
     "the tasks' n_sessions / n_spans do not match the sessions and spans in the record"),
    ("names not a list", _set("names.status", "x"), "a names table is not a list"),
    ("status code", _set("tasks.status", [1, 9]), "a code is outside its names table (5 names)"),
    ("session status code", _set("sessions.status", [1, 5]),
     "a code is outside its names table (5 names)"),
    ("session status length", _set("sessions.status", [1]), ""),
    ("session start length", _set("sessions.start", [1]), ""),
    ("span phase length", _set("spans.phase", [0]), ""),
    ("span start length", _set("spans.start", [1]), ""),
    ("span end missing", _set("spans.end", [1, None]), ""),
    ("span flags length", _set("spans.flags", [0]), ""),
    ("n_sessions length", _set("tasks.n_sessions", [2]), ""),
    ("n_spans length", _set("tasks.n_spans", [2]), ""),
]


@pytest.mark.parametrize("what,change,message", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_malformed_batch_is_a_one_line_error(batch: tuple[Record, Record], what: str,
                                               change: Callable[[Record], None],
                                               message: str) -> None:
    header, columns = batch
    bad = copy.deepcopy(columns)
    change(bad)
    with pytest.raises(TraceSchemaError, match=r"^records: malformed record 1: ") as info:
        Tracer().ingest([header, bad])
    assert "\n" not in str(info.value)
    if message:
        assert message in str(info.value)
    Tracer().ingest([header, columns])  # the batch itself is fine


def test_a_batch_reads_back_with_its_sessions_spans_and_attributes(
        batch: tuple[Record, Record]) -> None:
    header, columns = batch
    tr = Tracer()
    assert tr.ingest([header, columns]) == 2
    f = tr.frames()
    assert f.tasks[S.STATUS].tolist() == ["accepted", "accepted"]
    assert f.sessions[S.SERVER].tolist() == ["h:0", "h:1"]
    assert f.sessions[S.STATUS].tolist() == ["accepted", "accepted"]
    assert f.spans[S.PHASE].tolist() == ["generate", "generate"]
    assert (f.spans[S.END] >= f.spans[S.START]).all()
    no_end = copy.deepcopy(columns)
    no_end["sessions"]["end"] = [None, columns["sessions"]["end"][1]]  # an open session
    tr2 = Tracer()
    tr2.ingest([header, no_end])
    assert tr2.frames().sessions[S.END_TS].isna().tolist() == [True, False]
