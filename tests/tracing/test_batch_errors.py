"""Column batches of a trace file (schema 2) that are malformed, one fault at a time: each is
refused with a one-line error naming the record and what is wrong — columns of the wrong
length, counts that do not add up, codes outside their names table, sparse attribute columns
out of range — and a well-formed batch with missing times reads back as NA."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from rollout_kit import TraceSchemaError
from rollout_kit.tracing import Tracer
from rollout_kit.tracing import schema as S
from tests.tracing._batches import Record, set_at, traced_batch


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Record, Record]:
    """The header and the one column batch of a small trace: two tasks, one session and one
    span each, a session attribute."""
    header, columns = traced_batch(tmp_path / "t.jsonl")
    assert columns["kind"] == "columns"
    return header, columns


FAULTS: list[tuple[str, Callable[[Record], None], str]] = [
    ("n_sessions", set_at("tasks.n_sessions", [1, 5]),
     "the tasks' n_sessions / n_spans do not match the sessions and spans in the record"),
    ("negative n_spans", set_at("tasks.n_spans", [2, -1]),
     "the tasks' n_sessions / n_spans do not match the sessions and spans in the record"),
    ("names not a list", set_at("names.status", "x"), "a names table is not a list"),
    ("status code", set_at("tasks.status", [1, 9]), "a code is outside its names table (5 names)"),
    ("session status code", set_at("sessions.status", [1, 5]),
     "a code is outside its names table (5 names)"),
    ("session status length", set_at("sessions.status", [1]), ""),
    ("session start length", set_at("sessions.start", [1]), ""),
    ("span phase length", set_at("spans.phase", [0]), ""),
    ("span start length", set_at("spans.start", [1]), ""),
    ("span end missing", set_at("spans.end", [1, None]), ""),
    ("span flags length", set_at("spans.flags", [0]), ""),
    ("n_sessions length", set_at("tasks.n_sessions", [2]), ""),
    ("n_spans length", set_at("tasks.n_spans", [2]), ""),
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
