"""Benchmark the tracer: per-session cost, bytes per finished session, DataFrame build time.

Run: ``.venv/bin/python bench/bench_tracer.py`` (about a minute) or ``--quick`` (seconds).

The measured sequence per session is the one of issue 2: register_task + register_session +
two phases (generate, reward) + finalize. It is timed with tracing on, with a disabled tracer,
and for a naive baseline that appends one dict per event to a list (what a simple tracer
does). Medians of several repetitions after a warm-up; all measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from rollout_kit.tracing import Tracer, load_traces

US_TARGET = 10.0
BYTES_TARGET = 1024
BUILD_TARGET_S = 2.0


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


def per_session_us(run: Callable[[int, int], None], n: int, reps: int) -> float:
    run(10**9, min(n, 2000))  # warm-up on ids that do not collide
    times = []
    for r in range(reps):
        t0 = time.perf_counter_ns()
        run(r * n, n)
        times.append((time.perf_counter_ns() - t0) / n / 1000)
    return statistics.median(times)


def bytes_per_session(n: int, with_attrs: bool) -> float:
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
    assert tr.stats["sessions"] == n
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


def timed(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = ap.parse_args()
    n_call = 5_000 if args.quick else 50_000
    n_mem = 10_000 if args.quick else 100_000
    n_build = 20_000 if args.quick else 1_000_000
    reps = 3 if args.quick else 5

    rows: list[tuple[str, str, str, str]] = []
    on = per_session_us(lambda s, n: seq_tracer(Tracer(), s, n), n_call, reps)
    off = per_session_us(lambda s, n: seq_tracer(Tracer(enabled=False), s, n), n_call, reps)
    naive = per_session_us(lambda s, n: seq_naive([], s, n), n_call, reps)
    rows.append(("per session, tracing on (µs)", f"{on:.2f}", f"≤ {US_TARGET}",
                 str(on <= US_TARGET)))
    rows.append(("per session, tracing disabled (µs)", f"{off:.2f}", "", ""))
    rows.append(("per session, naive dict-per-event (µs)", f"{naive:.2f}", "", ""))
    rows.append(("  on / naive", f"{on / naive:.2f}x", "", ""))

    for attrs in (False, True):
        b = bytes_per_session(n_mem, attrs)
        label = f"bytes / finished session{' (+4 attrs)' if attrs else ''} [{n_mem:,}]"
        rows.append((label, f"{b:.0f}", f"≤ {BYTES_TARGET}", str(b <= BYTES_TARGET)))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        tr = Tracer(path=path, flush_threshold=4096)
        t0 = time.perf_counter()
        fill_realistic(tr, n_build)
        tr.close()
        fill_s = time.perf_counter() - t0
        build = timed(tr.frames, 3)
        rows.append((f"fill {n_build:,} sessions via API incl. JSONL (s)", f"{fill_s:.2f}",
                     "", ""))
        rows.append((f"frames() build, {n_build:,} sessions (s)", f"{build:.3f}",
                     f"≤ {BUILD_TARGET_S}", str(build <= BUILD_TARGET_S)))
        load = timed(lambda: load_traces(path), 1)
        rows.append((f"load_traces() same JSONL ({path.stat().st_size / 1e6:.0f} MB) (s)",
                     f"{load:.2f}", "", ""))
        rj = timed(lambda: pd.read_json(path, lines=True), 1)
        rows.append(("pandas.read_json(lines=True) same JSONL (s)", f"{rj:.2f}", "", ""))

    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'value':>10}  {'target':>8}  met?")
    for name, value, target, met in rows:
        print(f"{name:<{w}}  {value:>10}  {target:>8}  {met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
