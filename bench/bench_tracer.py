"""Benchmark the tracer: per-session cost with and without a trace file, side by side with
AReaL's ``SessionTracer``, bytes per finished session, DataFrame build time,
loading a trace back (JSONL, its Parquet form, ``pandas.read_json``).

Run: ``.venv/bin/python bench/bench_tracer.py [--smoke|--quick|--full]``.

The measured sequence per session: register_task + register_session +
two phases (generate, reward) + finalize. In this process it is timed with tracing on
(records kept in memory), with a trace file (``Tracer(path=...)``, the final flush inside the
timed window), with a disabled tracer, and for a naive baseline that appends one dict per
event to a list; interleaved, medians of several repetitions after a warm-up,
``gc.freeze()`` after setup.

AReaL side by side: ``tracer_child.py`` runs the same sequence with async phases, both sides
writing their JSONL files, once with AReaL's ``areal.utils.perf_tracer`` at commit
``42b9244ed`` (in the bench environment of ``areal_env.py``) and once with rollout_kit's
``Tracer(path=...)``, each in a subprocess of its own, in interleaved rounds (ABBA). Without
that environment the row says why and has no baseline: nothing remembered is printed.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import areal_env
import pandas as pd
from _common import Row, Size, check, median_ratio, run_alone, spread

from rollout_kit.tracing import Tracer, load_traces
from rollout_kit.tracing._jsonl import append_records

__all__ = ["rows"]

AREAL_RATIO_TARGET = 5.0  # rollout_kit with a trace file ≥ 5× AReaL's SessionTracer's speed
PERSIST_TARGET = 1.3  # recording + writing a session ≤ 1.3× recording alone
BYTES_TARGET = 1024
BUILD_TARGET_S = 2.0
LOAD_PARQUET_TARGET_S = 2.0
CHILD = Path(__file__).resolve().parent / "tracer_child.py"


def seq_tracer(tr: Tracer, start: int, n: int) -> None:
    """The issue's sequence, once per session; then what is pending is written (a no-op
    without a path), so a file's cost is inside the timed window."""
    for i in range(start, start + n):
        tr.register_task(i)
        sid = tr.register_session(i)
        with tr.phase("generate", sid):
            pass
        with tr.phase("reward", sid):
            pass
        tr.finalize(i, "accepted")
    tr.flush()


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


def _on(tr: Tracer) -> Callable[[int, int], None]:
    """The sequence on one tracer (its warm-up and the timed run share it)."""
    return lambda start, n: seq_tracer(tr, start, n)


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


def _child(side: str, n: int, reps: int, out: Path) -> dict[str, Any]:
    """Run one side of the AReaL side by side in a subprocess; its JSON result."""
    args = [os.fspath(CHILD), side, "--n", str(n), "--reps", str(reps), "--dir", os.fspath(out)]
    if side == "areal":
        cmd, env = [os.fspath(areal_env.python()), *args], areal_env.probe_env()
    else:
        cmd, env = [sys.executable, *args], None
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900,
                          stdin=subprocess.DEVNULL, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the {side} side exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout)[-600:].strip()}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def areal_rows(size: Size) -> list[Row]:
    """rollout_kit's ``Tracer(path=...)`` vs AReaL's ``SessionTracer``, both writing JSONL,
    each side in its own subprocess, interleaved rounds."""
    n = {"smoke": 2_000, "quick": 20_000, "full": 50_000}[size]
    reps = {"smoke": 1, "quick": 3, "full": 3}[size]
    rounds = {"smoke": 1, "quick": 6, "full": 8}[size]
    reason = ("not run at smoke size (seconds, not minutes)" if size == "smoke"
              else areal_env.unavailable())
    per_side: dict[str, list[float]] = {"areal": [], "rollout_kit": []}
    paired: tuple[list[float], list[float]] = ([], [])
    size_b: dict[str, float] = {}
    sessions = n * reps + min(n, 2000)  # the warm-up's sessions are in the file too
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ("areal", "rollout_kit") if r % 2 == 0 else ("rollout_kit", "areal")
            got: dict[str, float] = {}
            for side in order:
                if side == "areal" and reason:
                    continue
                try:
                    res = _child(side, n, reps, Path(tmp) / f"{side}-{r}")
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    if side != "areal":
                        raise
                    reason = f"the AReaL side failed: {exc}"
                    continue
                got[side] = statistics.median(res["us"])
                per_side[side].append(got[side])
                size_b[side] = res["bytes"] / sessions
            if len(got) == 2:
                paired[0].append(got["areal"])
                paired[1].append(got["rollout_kit"])
    ours = per_side["rollout_kit"]
    metric = ("µs per session with a trace file (async phases; task+session+2 phases+"
              "finalize), vs AReaL")
    how = (f"{n:,} sessions × {reps} per subprocess, {rounds} interleaved round(s) (ABBA), "
           "each side in its own process; both write JSONL, flushing every 1,024 sessions "
           "(AReaL fsyncs each flush: its code)")
    if reason or not paired[0]:
        return [Row("tracer", metric, statistics.median(ours), None, "", None,
                    f"ratio ≥ {AREAL_RATIO_TARGET:g}", None, spread(ours),
                    f"{how}; AReaL SessionTracer skipped: {reason or 'not measured'}",
                    extra={"baseline_skipped": reason or "not measured"})]
    ratio_m, ratios = median_ratio(*paired)
    theirs = per_side["areal"]
    return [Row("tracer", metric, statistics.median(ours), statistics.median(theirs),
                f"AReaL SessionTracer @{areal_env.AREAL_COMMIT}", ratio_m,
                f"ratio ≥ {AREAL_RATIO_TARGET:g}", check(ratio_m, ">=", AREAL_RATIO_TARGET),
                f"ours {spread(ours)}; AReaL {spread(theirs)}; ratio {spread(ratios)}",
                f"{how}; file bytes per session {size_b.get('rollout_kit', 0):.0f} vs AReaL "
                f"{size_b.get('areal', 0):.0f}")]


def rows(size: Size = "quick") -> list[Row]:
    """Rows 3 (µs per session), 4 (bytes per session), 5 (DataFrame build) and loading
    (JSONL, Parquet and ``pandas.read_json`` side by side)."""
    n_call = {"smoke": 2_000, "quick": 50_000, "full": 200_000}[size]
    n_mem = {"smoke": 2_000, "quick": 100_000, "full": 100_000}[size]
    n_build = {"smoke": 4_000, "quick": 1_000_000, "full": 1_000_000}[size]
    reps = {"smoke": 2, "quick": 5, "full": 7}[size]
    out: list[Row] = []

    out += areal_rows(size)

    # Interleave on / file / off / naive so that load drift hits all of them alike.
    on: list[float] = []
    on_file: list[float] = []
    off: list[float] = []
    naive: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(reps):
            path = Path(tmp) / f"trace-{r}.jsonl"
            on += per_session_us(lambda s, n: seq_tracer(Tracer(), s, n), n_call, 1)
            on_file += per_session_us(_on(Tracer(path=path, parquet=False)), n_call, 1)
            off += per_session_us(lambda s, n: seq_tracer(Tracer(enabled=False), s, n),
                                  n_call, 1)
            naive += per_session_us(lambda s, n: seq_naive([], s, n), n_call, 1)
            path.unlink()
    m_on, m_file, m_off, m_naive = (statistics.median(x) for x in (on, on_file, off, naive))
    persist, persist_rs = median_ratio(on_file, on)
    out.append(Row("tracer", "µs per session, tracing on, in memory (task+session+2 phases+"
                   "finalize)", m_on, m_naive, "dict-per-event list", m_naive / m_on, "", None,
                   f"on {spread(on)}; naive {spread(naive)}",
                   f"{n_call:,} sessions × {reps}, this process"))
    out.append(Row("tracer", "µs per session with a trace file (Tracer(path=...), final flush "
                   "timed)", m_file, m_on, "same, in memory", 1 / persist,
                   f"file ≤ {PERSIST_TARGET:g}× memory", check(persist, "<=", PERSIST_TARGET),
                   f"{spread(on_file)}; file ÷ memory {spread(persist_rs)}",
                   f"recording + writing ÷ recording alone: {persist:.2f}× (paired rounds); "
                   "one columns line per 1,024 records"))
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
        finally:
            gc.unfreeze()
        # the same records one per line (schema 1: the older trace file layout,
        # and the input a generic JSONL reader such as pandas.read_json can make rows of)
        per_task = Path(tmp) / "per_task.jsonl"
        t0 = time.perf_counter()
        append_records(per_task, tr.drain_records(), truncate=True)
        per_task_s = time.perf_counter() - t0
        del tr
        gc.collect()
        gc.freeze()
        try:
            # interleaved: Parquet, JSONL, Parquet, read_json, Parquet, schema-1 JSONL
            reps_l = 1 if size != "smoke" else 2
            load_pq = timed(lambda: load_traces(parquet), 1)
            load = timed(lambda: load_traces(path), reps_l)
            load_pq += timed(lambda: load_traces(parquet), 1)
            rj = timed(lambda: pd.read_json(per_task, lines=True), reps_l)
            load_pq += timed(lambda: load_traces(parquet), 1)
            load_old = timed(lambda: load_traces(per_task), reps_l)
        finally:
            gc.unfreeze()
        mb = path.stat().st_size / 1e6
        old_mb = per_task.stat().st_size / 1e6
        pq_mb = parquet.stat().st_size / 1e6
    m_build, m_load, m_rj, m_pq, m_old = (statistics.median(x) for x in (
        build, load, rj, load_pq, load_old))
    full = n_build == 1_000_000
    target_note = "" if full else f" (target is for 1M; {n_build:,} here)"
    out.append(Row("tracer", f"DataFrames from the in-memory tracer, {n_build:,} sessions (s)",
                   m_build, m_rj, "pandas.read_json(lines=True)", m_rj / m_build,
                   f"≤ {BUILD_TARGET_S:g} s", check(m_build, "<=", BUILD_TARGET_S)
                   if full else None, spread(build),
                   f"tasks+sessions+spans frames; read_json of the same records one per line "
                   f"({old_mb:.0f} MB){target_note}; filling the tracer through the API "
                   f"took {fill_s:.1f} s"))
    out.append(Row("tracer", f"load_traces(JSONL) → DataFrames, {n_build:,} sessions (s)",
                   m_load, m_old, "load_traces, one record per line (schema 1)",
                   m_old / m_load, "", None, spread(load),
                   f"the trace file Tracer(path=...) wrote ({mb:.0f} MB, a line of columns "
                   f"per 4,096 records) vs the same records one per task ({old_mb:.0f} MB, "
                   f"{per_task_s:.1f} s to write); pandas.read_json of the latter {m_rj:.1f} "
                   "s (one flat frame, not typed tables)"))
    out.append(Row("tracer", f"{n_build:,} sessions into the three frames from Parquet (s)",
                   m_pq, m_load, "load_traces(JSONL), same run", m_load / m_pq,
                   f"≤ {LOAD_PARQUET_TARGET_S:g} s",
                   check(m_pq, "<=", LOAD_PARQUET_TARGET_S) if full else None, spread(load_pq),
                   f"load_traces of the Parquet Tracer.close() wrote ({pq_mb:.0f} MB, "
                   f"{compact_s:.1f} s to write) next to the {mb:.0f} MB JSONL; "
                   f"pandas.read_json of the per-task JSONL {m_rj:.1f} s "
                   f"({m_rj / m_pq:.1f}× ours){target_note}"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
