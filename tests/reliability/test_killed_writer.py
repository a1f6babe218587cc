"""Scenario 7: a process running the controller is SIGKILLed while it writes traces.

The child runs batches against an in-process simulator, its tracer flushing every 16 records
and writing a trajectory dump beside the trace, and prints the ids of each batch once
``flush()`` returned. The parent kills it mid-batch:
every id printed before the kill loads back from the file, with its terminal status. A line
torn by a kill mid-``write`` is skipped with a ``TornTraceWarning`` (checked on the killed
file with its last line cut in half, which is what such a kill leaves behind): the trace
file holds one line of columns per flush, so a torn line loses exactly the batch it held,
never a task of an earlier line. Every printed id's calls load back from the dump too, each
with its seed and output tokens.

The second scenario kills a process that does nothing but trace, flushing batches of
columns as fast as it can (thousands of tasks a second), the moment it has reported a few
flushes: every task it reported loads back, nothing twice, and the Parquet compacted from
the killed file loads to the same frames as the file itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections import Counter
from pathlib import Path

import orjson
import pandas as pd
import pytest

from rollout_kit import RolloutResult
from rollout_kit.tracing import TornTraceWarning, compact_trace, load_dump, load_traces

from .conftest import Ledger, check_ledger, record

pytestmark = pytest.mark.timeout(60)

CHILD = textwrap.dedent("""
    import asyncio, sys
    from rollout_kit import RolloutController
    from rollout_kit._config import GenerationConfig
    from rollout_kit.sim import ByteTokenizer, serve
    from rollout_kit.tracing import Tracer, TrajectoryDump
    from rollout_kit._workflows import SingleTurnWorkflow

    async def main(path, dump):
        wf = SingleTurnWorkflow(lambda *a: 1.0, GenerationConfig(max_new_tokens=8),
                                tokenizer=ByteTokenizer())
        async with serve("sglang", 1, time_scale=0.05) as cluster:
            tracer = Tracer(path=path, flush_threshold=16,
                            dump=TrajectoryDump(dump, flush_threshold=16))
            async with RolloutController(sglang=cluster.addresses, tracer=tracer) as ctl:
                while True:
                    res = await ctl.rollout_batch_async(
                        [{"prompt": f"q{i}"} for i in range(40)], wf)
                    tracer.flush()
                    print(" ".join(f"{r.task_id}:{r.status}" for r in res), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


def test_sigkill_while_writing_traces(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    t0 = time.perf_counter()
    dump_dir = tmp_path / "dump"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(dump_dir)],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=os.getcwd())
    flushed: dict[int, str] = {}
    try:
        assert proc.stdout is not None
        for _ in range(4):
            line = proc.stdout.readline()
            assert line, f"child died: {proc.stderr.read() if proc.stderr else ''}"
            flushed.update((int(t), s) for t, s in (x.split(":") for x in line.split()))
        time.sleep(0.07)  # mid-batch: some tasks running, auto-flushes under way
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tasks = load_traces(path).tasks
    torn_now = sum(issubclass(w.category, TornTraceWarning) for w in caught)
    wall = time.perf_counter() - t0
    # everything flushed before the kill loads back, with the status the child saw
    missing = sorted(set(flushed) - set(tasks.index))
    assert not missing, f"flushed tasks missing from the trace: {missing[:10]}"
    assert all(tasks.loc[t, "status"] == s for t, s in flushed.items())
    results = [RolloutResult(task_id=t, status=s) for t, s in flushed.items()]  # type: ignore[arg-type]
    ledger = check_ledger(sorted(flushed), results, tasks.loc[sorted(flushed)])
    # tasks finished after the last print may be there too; never a task twice
    assert tasks.index.is_unique
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTraceWarning)  # a kill mid-write may tear it
        calls = load_dump(dump_dir)
    dumped = set(calls.index.get_level_values("task_id"))
    assert not set(flushed) - dumped, sorted(set(flushed) - dumped)[:10]
    assert calls["seed"].notna().all() and (calls["completion_tokens"] > 0).all()

    # a kill in the middle of a write leaves a torn last line: it is skipped, with a warning
    raw = path.read_bytes()
    body = raw.rstrip(b"\n")
    last_nl = body.rfind(b"\n")
    last = orjson.loads(body[last_nl + 1:])
    assert last["kind"] == "columns"  # one line per flush: a batch of columns
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(body[:last_nl + 1 + (len(body) - last_nl - 1) // 2])
    with pytest.warns(TornTraceWarning):
        torn_tasks = load_traces(torn).tasks
    assert set(torn_tasks.index) <= set(tasks.index)
    # the torn line's batch is lost, nothing else
    assert set(tasks.index) - set(torn_tasks.index) == set(last["tasks"]["task_id"])
    record("7. controller process SIGKILLed while writing traces",
           load="batches of 40 tasks, tracer flushing every 16 records",
           faults="SIGKILL of the writer mid-batch (+ torn last line)", ledger=ledger,
           wall_s=wall, tasks_in_file=len(tasks), torn_line_at_kill=torn_now)


TRACER_CHILD = textwrap.dedent("""
    import sys
    from rollout_kit.tracing import Tracer

    tr = Tracer(path=sys.argv[1], flush_threshold=10**9, parquet=False)  # flushed below
    i = 0
    while True:
        for _ in range(int(sys.argv[2])):
            tr.register_task(i, split="train" if i % 2 else "test")
            sid = tr.register_session(i)
            with tr.phase("generate", sid):
                tr.annotate(sid, server="127.0.0.1:30000")
            with tr.phase("reward", sid):
                pass
            tr.finalize(i, "accepted" if i % 3 else "rejected")
            if i % 4 == 0:
                tr.mark(i, "consume")  # a late mark: the marks block of the batch
            i += 1
        tr.flush()
        print(i - 1, flush=True)  # every task up to this id is written
""")


def test_sigkill_of_a_tracer_writing_column_batches(tmp_path: Path) -> None:
    path = tmp_path / "fast.jsonl"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", TRACER_CHILD, str(path), "2000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.getcwd())
    reported = -1
    try:
        assert proc.stdout is not None
        for _ in range(5):  # kill the moment the fifth batch is reported: the next is
            line = proc.stdout.readline()  # being recorded or written
            assert line, f"child died: {proc.stderr.read() if proc.stderr else ''}"
            reported = int(line)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = load_traces(path)
        parquet, _ = compact_trace(path)
    tasks = traces.tasks
    assert tasks.index.is_unique
    assert set(range(reported + 1)) <= set(tasks.index)  # every reported task is back
    assert set(tasks.index) == set(range(len(tasks)))  # whole batches, in order, no gaps
    ok = tasks.loc[list(range(reported + 1))]
    assert (ok["status"] == ["rejected" if i % 3 == 0 else "accepted"
                             for i in range(reported + 1)]).all()
    assert ok["consume_ts"].notna().tolist() == [i % 4 == 0 for i in range(reported + 1)]
    assert traces.sessions["server"].notna().all() and len(traces.spans) == 2 * len(tasks)
    # the crash-safe log compacts to Parquet, which loads to the same frames
    from_parquet = load_traces(parquet)
    for name in ("tasks", "sessions", "spans"):
        pd.testing.assert_frame_equal(getattr(traces, name), getattr(from_parquet, name),
                                      check_exact=True)
    torn_now = sum(issubclass(w.category, TornTraceWarning) for w in caught)
    lost = len(set(range(reported + 1)) - set(tasks.index))
    record("7b. tracer process SIGKILLed while it writes batches of columns",
           load="batches of 2,000 tasks flushed back to back",
           faults="SIGKILL right after the 5th reported flush",
           ledger=Ledger(Counter(ok["status"]), Counter(), lost=lost),
           wall_s=time.perf_counter() - t0,
           tasks_reported=reported + 1, tasks_in_file=len(tasks), torn_line_at_kill=torn_now)
