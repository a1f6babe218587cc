"""``Tracer.task_starts()`` (the executor's dispatch / start marks and task contexts) and
``Tracer.mark_all`` (the controller's ``consume`` marks of one ``wait``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rollout_kit import ConfigError, TraceStateError, UnknownTaskIdError
from rollout_kit.tracing import Tracer, current_task_id, current_tracer, load_traces


async def test_task_starts_mark_dispatch_and_start_and_make_each_tasks_context() -> None:
    tr = Tracer()
    for tid in (3, 4):
        tr.register_task(tid)
    starts = tr.task_starts()
    c3, c4 = starts.dispatch(3), starts.dispatch(4)
    assert current_task_id() is None and current_tracer() is None  # not the caller's
    assert (c3.run(current_task_id), c4.run(current_task_id)) == (3, 4)  # one per task

    async def first_step() -> int | None:
        starts.start(current_task_id() or 0)
        return current_task_id()

    loop = asyncio.get_running_loop()
    assert await loop.create_task(first_step(), context=c3) == 3
    assert c3.run(current_tracer) is tr
    tr.finalize(3, "accepted")
    row = tr.tasks_df().loc[3]
    assert row["submit_ts"] <= row["dispatch_ts"] <= row["start_ts"] <= row["end_ts"]
    with pytest.raises(TraceStateError, match=r"^dispatch: task_id 3 is already finalized$"):
        starts.dispatch(3)
    with pytest.raises(UnknownTaskIdError, match=r"^start: task_id 9 was never registered"):
        starts.start(9)
    off = Tracer(enabled=False).task_starts()  # a disabled tracer marks and checks nothing
    assert off.dispatch(9).run(current_task_id) == 9
    off.start(9)


def test_mark_all_marks_live_and_finished_tasks_at_one_instant(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl", flush_threshold=3, parquet=False)
    for tid in range(4):
        tr.register_task(tid)
    tr.finalize(0, "accepted")
    tr.finalize(1, "rejected")
    tr.mark_all([0, 1, 2], "consume")  # two finished (late marks), one live
    assert tr.stats["unwritten"] == 0  # 2 tasks + 2 late marks >= 3: flushed
    tasks = tr.tasks_df()
    assert tasks.loc[[0, 1, 2], "consume_ts"].nunique() == 1  # one instant
    assert tasks["consume_ts"].isna().tolist() == [False, False, False, True]  # 3: unmarked
    tr.finalize(2, "accepted")
    tr.finalize(3, "accepted")
    tr.flush()
    back = load_traces(tmp_path / "t.jsonl").tasks
    assert back.loc[[0, 1, 2], "consume_ts"].notna().all()


def test_mark_all_refuses_an_unknown_id_or_event_before_marking_any() -> None:
    tr = Tracer()
    tr.register_task(0)
    tr.register_task(1)
    tr.finalize(1, "accepted")
    with pytest.raises(UnknownTaskIdError, match=r"mark_all\('consume'\): task_id 7 was "
                                                 r"never registered"):
        tr.mark_all([0, 1, 7], "consume")
    with pytest.raises(ConfigError, match=r"unknown lifecycle event 'eaten'"):
        tr.mark_all([0], "eaten")
    with pytest.raises(ConfigError, match=r"ts_ns must be an int"):
        tr.mark_all([0], "consume", ts_ns=1.5)  # type: ignore[arg-type]
    tr.finalize(0, "accepted")
    assert tr.tasks_df()["consume_ts"].isna().all()  # nothing was marked
    assert tr.stats["unwritten"] == 0
    Tracer(enabled=False).mark_all([5], "consume")  # disabled: a no-op, no check
