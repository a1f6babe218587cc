"""Tracer limits at the edge and one past it: error text length, 64-bit attributes, the id
bitmap's bound, constructor settings, counters and messages."""

from __future__ import annotations

import pytest

from rollout_kit import ConfigError, DuplicateTaskIdError, TraceStateError, UnknownTaskIdError
from rollout_kit.tracing import Tracer
from rollout_kit.tracing import schema as S
from rollout_kit.tracing._store import IdSet, check_attrs, check_counts
from rollout_kit.tracing._tracer import MAX_ERROR_CHARS


def test_error_text_at_its_limit_and_one_past() -> None:
    assert MAX_ERROR_CHARS == 2000
    tr = Tracer()
    for tid, n in ((0, 2000), (1, 2001)):
        tr.register_task(tid)
        tr.finalize(tid, "failed", error="e" * n)
    tr.register_task(2)
    tr.finalize(2, "failed", error=KeyError("k"), reason=7)  # type: ignore[arg-type]
    t = tr.tasks_df()
    assert t.loc[0, S.ERROR] == "e" * 2000
    assert t.loc[1, S.ERROR] == "e" * 2000 + "… [1 more chars]"
    assert t.loc[2, S.ERROR] == "KeyError: 'k'" and t.loc[2, S.REASON] == "7"


def test_attribute_ints_at_64_bits_and_one_past() -> None:
    check_attrs({"a": 2**63 - 1, "b": -(2**63), "c": None, "d": True, "e": 1.5, "f": "x"},
                frozenset())
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ConfigError, match="does not fit in 64 bits"):
            check_attrs({"a": bad}, frozenset())
    with pytest.raises(ConfigError, match="'status' is reserved"):
        check_attrs({"status": "x"}, frozenset({"status"}))
    for name in ("reward_s", "toolcall_session_s"):
        with pytest.raises(ConfigError, match="reserved for a computed column"):
            check_attrs({name: 1.0}, frozenset())
    check_attrs({"unknown_phase_s": 1.0, "x_session_s": 2.0}, frozenset())  # not phases
    with pytest.raises(ConfigError, match="got list"):
        check_attrs({"a": [1]}, frozenset())
    with pytest.raises(ConfigError, match=r"increment\(n=...\) needs an int or float, got bool"):
        check_counts({"n": True}, frozenset())
    with pytest.raises(ConfigError, match="64 bits"):
        check_counts({"n": 2**64}, frozenset())
    check_counts({"n": 3, "m": 0.5}, frozenset())


def test_id_set_around_its_bitmap_bound() -> None:
    s = IdSet()
    edge = IdSet.LIMIT
    assert edge == 1 << 27
    for i in (0, 7, 8, 9, edge - 1, edge, edge + 1):
        assert i not in s
        s.add(i)
        assert i in s
    assert 1 not in s and 6 not in s and 10 not in s and edge + 2 not in s
    assert len(s._bits) == edge // 8  # the bitmap stops at the bound; beyond: the set
    assert s._big == {edge, edge + 1}
    small = IdSet()
    small.add(3)
    assert len(small._bits) == 1 and 3 in small and 4 not in small
    small.add(100)  # grows at least to the byte it needs
    assert len(small._bits) >= 13 and 100 in small and 99 not in small


def test_constructor_settings_at_their_edges() -> None:
    Tracer(flush_threshold=1)
    for bad in (0, True, 1.5):
        with pytest.raises(ConfigError, match="flush_threshold must be an int >= 1"):
            Tracer(flush_threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="worker must be a str or None"):
        Tracer(worker=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="is the JSONL log"):
        Tracer(path="t.parquet")


def test_marks_and_states_refused_with_their_reasons() -> None:
    tr = Tracer()
    tr.register_task(0)
    for bad in (True, 1.5):
        with pytest.raises(ConfigError, match="ts_ns must be an int"):
            tr.mark(0, "start", bad)  # type: ignore[arg-type]
    with pytest.raises(DuplicateTaskIdError, match="task_id 0 is live in this tracer"):
        tr.register_task(0)
    tr.finalize(0, "accepted")
    with pytest.raises(DuplicateTaskIdError, match="task_id 0 is already finalized"):
        tr.register_task(0)
    with pytest.raises(TraceStateError, match="annotate_task: task_id 0 is already finalized"):
        tr.annotate_task(0, x=1)
    with pytest.raises(UnknownTaskIdError, match="annotate_task: task_id 5 was never"):
        tr.annotate_task(5, x=1)
    with pytest.raises(UnknownTaskIdError, match=r"mark\('start'\): task_id 5 was never"):
        tr.mark(5, "start")
    with pytest.raises(TraceStateError, match="no task_id given and no current task"):
        tr.annotate_task(x=1)
    tr.annotate_task(0)  # nothing to set: no check at all
    tr.register_task(1)
    sid = tr.register_session(1)
    with pytest.raises(ConfigError, match="unknown session status 'ok'"):
        tr.end_session(sid, "ok")
    with pytest.raises(ConfigError, match="unknown session status 'pending'"):
        tr.end_session(sid, "pending")
    tr.annotate_task(1, split="train")
    tr.annotate_task(1, split="test", n=2)
    tr.finalize(1, "accepted")
    row = tr.tasks_df().loc[1]
    assert row["split"] == "test" and row["n"] == 2


def test_counters_len_and_repr() -> None:
    tr = Tracer(worker="w")
    tr.register_task(0)
    sid = tr.register_session(0)
    tr.begin_phase("generate", sid)
    assert tr.stats == {"live_tasks": 1, "live_sessions": 1, "tasks": 0, "sessions": 0,
                        "spans": 0, "unwritten": 0}
    assert len(tr) == 1
    tr.finalize(0, "accepted")
    tr.register_task(1)
    assert tr.stats == {"live_tasks": 1, "live_sessions": 0, "tasks": 1, "sessions": 1,
                        "spans": 1, "unwritten": 0}
    assert len(tr) == 2
    assert repr(tr) == "Tracer(worker='w', tasks=1, live=1, path=None)"
