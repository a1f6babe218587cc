"""Many asyncio tasks and several threads recording into one tracer at once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from rollout_kit import TaskIdGenerator
from rollout_kit.tracing import (
    Tracer,
    annotate,
    atrace_phase,
    increment,
    load_traces,
    trace_session,
)


async def _workflow(tr: Tracer, tid: int) -> None:
    with tr.task_scope(tid):
        tr.mark(tid, "start")

        async def sample(k: int) -> None:
            async with trace_session():
                async with atrace_phase("generate"):
                    await asyncio.sleep(0)
                annotate(server=f"s{k}")
                increment(completion_tokens=tid % 7 + 1)
                async with atrace_phase("reward"):
                    await asyncio.sleep(0)

        await asyncio.gather(*(sample(k) for k in range(2)))
    tr.finalize(tid, "accepted" if tid % 2 else "rejected")


def _run_loop(tr: Tracer, ids: TaskIdGenerator, n: int, out: list[int]) -> None:
    async def main() -> None:
        mine = ids.reserve(n)
        out.extend(mine)
        for tid in mine:
            tr.register_task(tid)
        await asyncio.gather(*(_workflow(tr, tid) for tid in mine))

    asyncio.run(main())


def test_threads_and_tasks_produce_a_consistent_trace(tmp_path: Path) -> None:
    tr = Tracer(path=tmp_path / "t.jsonl", flush_threshold=64)
    ids = TaskIdGenerator()
    n_threads, per_thread = 4, 500
    got: list[list[int]] = [[] for _ in range(n_threads)]
    threads = [threading.Thread(target=_run_loop, args=(tr, ids, per_thread, got[i]))
               for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = sorted(i for g in got for i in g)
    assert all_ids == list(range(n_threads * per_thread))
    f = tr.frames()
    assert sorted(f.tasks.index) == all_ids and f.tasks.index.is_unique
    assert (f.tasks["n_sessions"] == 2).all()
    assert f.sessions.index.is_unique
    assert sorted(f.sessions.index.get_level_values("session_id")) == list(range(2 * len(all_ids)))
    assert len(f.spans) == 4 * len(all_ids)
    assert not f.spans["closed_at_finalize"].any()
    # each session's spans belong to it: counts per session and token sums per task agree
    assert (f.spans.groupby(["task_id", "session_id"]).size() == 2).all()
    expected = (f.tasks.index.to_series() % 7 + 1) * 2
    assert (f.tasks["completion_tokens"].astype("int64") == expected).all()
    assert tr.stats["live_tasks"] == tr.stats["live_sessions"] == 0
    tr.close()
    loaded = load_traces(tmp_path / "t.jsonl")
    assert sorted(loaded.tasks.index) == all_ids
    assert len(loaded.spans) == len(f.spans)
