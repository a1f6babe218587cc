"""Benchmark the tracer: per-session cost, bytes per finished session, DataFrame build time,
loading a trace back (JSONL, its Parquet form, ``pandas.read_json``).

Run: ``.venv/bin/python bench/bench_tracer.py [--smoke|--quick|--full]``.

The measured sequence per session is the one of issue 2: register_task + register_session +
two phases (generate, reward) + finalize. It is timed with tracing on, with a disabled tracer,
and for a naive baseline that appends one dict per event to a list (what a simple tracer
does). Medians of several repetitions after a warm-up, ``gc.freeze()`` after setup; all
measured in the same run.
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from _common import Row, Size, check, run_alone, spread

from rollout_kit.tracing import Tracer, load_traces

__all__ = ["rows"]

US_TARGET = 10.0
BYTES_TARGET = 1024
BUILD_TARGET_S = 2.0
LOAD_PARQUET_TARGET_S = 2.0
AREAL_US = 43.6  # AReaL SessionTracer, same sequence, same kind of machine (issue 9)


def seq_tracer(tr: Tracer, start: int, n: int) -> None:
    """The issue's sequence, once per session."""
    for i in range(start, start + n):
        tr.register_task(i)
        sid = tr.register_session(i)
        with tr.phase("generate", sid):
            pass
        with tr.phase("reward", sid):
            pass
        tr.finalize(i, "accepted")


def seq_naive(events: list[dict[str, Any]], start: int, n: int) -> None:
    """Baseline: one dict per event appended to a list."""
    now = time.perf_counter_ns
    for i in range(start, start + n):
        events.append({"event": "register_task", "task_id": i, "ts": now()})
        events.append({"event": "register_session", "task_id": i, "session_id": i, "ts": now()})
        for phase in ("generate", "reward"):
            events.append({"event": "phase_start", "session_id": i, "phase": phase, "ts": now()})
            events.append({"event": "phase_end", "session_id": i, "phase": phase, "ts": now()})
        events.append({"event": "finalize", "task_id": i, "status": "accepted", "ts": now()})


def per_session_us(run: Callable[[int, int], None], n: int, reps: int) -> list[float]:
    """µs per session for ``reps`` repetitions of ``n`` sessions (after a warm-up)."""
    run(10**9, min(n, 2000))  # warm-up on ids that do not collide
    gc.collect()
    gc.freeze()
    times = []
    try:
        for r in range(reps):
            t0 = time.perf_counter_ns()
            run(r * n, n)
            times.append((time.perf_counter_ns() - t0) / n / 1000)
    finally:
        gc.unfreeze()
    return times


def bytes_per_session(n: int, with_attrs: bool) -> float:
    """Bytes still allocated per finished session (tracemalloc) after ``n`` sessions."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tr = Tracer()
    for i in range(n):
        tr.register_task(i)
        sid = tr.register_session(i)
        with tr.phase("generate", sid):
            pass
        with tr.phase("reward", sid):
            pass
        if with_attrs:
            tr.annotate(sid, server="127.0.0.1:30000", stop_reason="stop")
            tr.increment(sid, prompt_tokens=300 + i % 50, completion_tokens=1000 + i % 500)
        tr.finalize(i, "accepted")
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    if tr.stats["sessions"] != n:
        raise RuntimeError(f"tracer holds {tr.stats['sessions']} sessions, expected {n}")
    return used / n


def bytes_naive(n: int) -> float:
    """Bytes per session of the naive event list, same sequence."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    events: list[dict[str, Any]] = []
    seq_naive(events, 0, n)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del events
    return used / n


def fill_realistic(tr: Tracer, n_sessions: int, per_task: int = 4) -> None:
    """Tasks of ``per_task`` sessions, two phases each, four attributes per session."""
    for t in range(n_sessions // per_task):
        tr.register_task(t)
        tr.mark(t, "dispatch")
        tr.mark(t, "start")
        for k in range(per_task):
            sid = tr.register_session(t)
            with tr.phase("generate", sid):
                pass
            with tr.phase("reward", sid):
                pass
            tr.annotate(sid, server=f"127.0.0.1:{30000 + k}", stop_reason="stop")
            tr.increment(sid, prompt_tokens=300 + t % 50, completion_tokens=1000 + t % 500)
            tr.end_session(sid)
        tr.finalize(t, "accepted" if t % 5 else "rejected")
        tr.mark(t, "consume")


def timed(fn: Callable[[], object], reps: int) -> list[float]:
    """Wall seconds of ``reps`` calls of ``fn`` (garbage collected before each)."""
    times = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def rows(size: Size = "quick") -> list[Row]:
    """Rows 3 (µs per session), 4 (bytes per session), 5 (DataFrame build) and loading
    (JSONL, Parquet — issue 18 — and ``pandas.read_json`` side by side)."""
    n_call = {"smoke": 2_000, "quick": 50_000, "full": 200_000}[size]
    n_mem = {"smoke": 2_000, "quick": 100_000, "full": 100_000}[size]
    n_build = {"smoke": 4_000, "quick": 1_000_000, "full": 1_000_000}[size]
    reps = {"smoke": 2, "quick": 5, "full": 7}[size]
    out: list[Row] = []

    # Interleave on / off / naive so that load drift hits all three alike.
    on: list[float] = []
    off: list[float] = []
    naive: list[float] = []
    for _ in range(reps):
        on += per_session_us(lambda s, n: seq_tracer(Tracer(), s, n), n_call, 1)
        off += per_session_us(lambda s, n: seq_tracer(Tracer(enabled=False), s, n), n_call, 1)
        naive += per_session_us(lambda s, n: seq_naive([], s, n), n_call, 1)
    m_on, m_off, m_naive = (statistics.median(x) for x in (on, off, naive))
    out.append(Row("tracer", "µs per session, tracing on (task+session+2 phases+finalize)",
                   m_on, m_naive, "dict-per-event list", m_naive / m_on, f"≤ {US_TARGET:g} µs",
                   check(m_on, "<=", US_TARGET),
                   f"on {spread(on)}; naive {spread(naive)}",
                   f"{n_call:,} sessions × {reps}; AReaL SessionTracer: {AREAL_US} µs "
                   f"({AREAL_US / m_on:.1f}× ours)"))
    out.append(Row("tracer", "µs per session, tracing disabled (Tracer(enabled=False))",
                   m_off, m_on, "tracing on", m_on / m_off, "", None, spread(off),
                   "cost of the calls when tracing is off"))

    b_plain = bytes_per_session(n_mem, False)
    b_attrs = bytes_per_session(n_mem, True)
    b_naive = bytes_naive(n_mem)
    out.append(Row("tracer", "bytes per finished session (tracemalloc)", b_plain, b_naive,
                   "dict-per-event list", b_naive / b_plain, f"≤ {BYTES_TARGET} B",
                   check(b_plain, "<=", BYTES_TARGET), "",
                   f"{n_mem:,} sessions; with 4 attributes/session: {b_attrs:.0f} B"))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        tr = Tracer(path=path, flush_threshold=4096)
        t0 = time.perf_counter()
        fill_realistic(tr, n_build)
        tr.flush()
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        tr.close()  # compacts the JSONL to Parquet next to it (from the columns in memory)
        compact_s = time.perf_counter() - t0
        parquet = path.with_suffix(".parquet")
        gc.collect()
        gc.freeze()
        try:
            build = timed(tr.frames, 3)
            # interleaved: Parquet, JSONL, Parquet, read_json, Parquet (load drift hits all)
            load_pq = timed(lambda: load_traces(parquet), 1)
            load = timed(lambda: load_traces(path), 1 if size != "smoke" else 2)
            load_pq += timed(lambda: load_traces(parquet), 1)
            rj = timed(lambda: pd.read_json(path, lines=True), 1 if size != "smoke" else 2)
            load_pq += timed(lambda: load_traces(parquet), 1)
        finally:
            gc.unfreeze()
        mb = path.stat().st_size / 1e6
        pq_mb = parquet.stat().st_size / 1e6
    m_build, m_load, m_rj, m_pq = (statistics.median(x) for x in (build, load, rj, load_pq))
    full = n_build == 1_000_000
    target_note = "" if full else f" (target is for 1M; {n_build:,} here)"
    out.append(Row("tracer", f"DataFrames from the in-memory tracer, {n_build:,} sessions (s)",
                   m_build, m_rj, "pandas.read_json(lines=True)", m_rj / m_build,
                   f"≤ {BUILD_TARGET_S:g} s", check(m_build, "<=", BUILD_TARGET_S)
                   if full else None, spread(build),
                   f"tasks+sessions+spans frames; JSONL {mb:.0f} MB{target_note}; "
                   f"filling it through the API took {fill_s:.1f} s"))
    out.append(Row("tracer", f"load_traces(JSONL) → DataFrames, {n_build:,} sessions (s)",
                   m_load, m_rj, "pandas.read_json(lines=True)", m_rj / m_load, "", None,
                   spread(load), "same file; read_json gives one flat frame, not typed tables"))
    out.append(Row("tracer", f"{n_build:,} sessions into the three frames from Parquet (s)",
                   m_pq, m_load, "load_traces(JSONL), same run", m_load / m_pq,
                   f"≤ {LOAD_PARQUET_TARGET_S:g} s",
                   check(m_pq, "<=", LOAD_PARQUET_TARGET_S) if full else None, spread(load_pq),
                   f"load_traces of the Parquet Tracer.close() wrote ({pq_mb:.0f} MB, "
                   f"{compact_s:.1f} s to write) next to the {mb:.0f} MB JSONL; "
                   f"pandas.read_json of the JSONL {m_rj:.1f} s ({m_rj / m_pq:.1f}× ours)"
                   f"{target_note}"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
