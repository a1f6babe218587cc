"""One side of the tracer side by side, run as a subprocess of ``bench_tracer``.

    python bench/tracer_child.py {areal,rollout_kit} --n N --reps R --dir DIR [--flush F]

Both sides run the same sequence per session, writing their JSONL trace files:
register task → register session → async ``generate`` phase → async ``reward`` phase →
finalize; each repetition ends with a flush of what is still pending, so the time includes
writing every session. ``areal`` uses ``areal.utils.perf_tracer`` (its ``SessionTracer``,
module-level API as AReaL's ``WorkflowExecutor`` calls it; run with AReaL's bench
environment and its source tree on ``PYTHONPATH``), ``rollout_kit`` a ``Tracer(path=...)``.
Prints one JSON line: ``{"us": [µs per session of each repetition], "bytes": file size}``.

Standard library plus the side's own package only: the AReaL interpreter has no rollout_kit.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

Run = Callable[[int, int], Awaitable[None]]


def areal_side(out: Path, flush: int) -> tuple[Run, Callable[[], int]]:
    """AReaL's session tracer at PR 759: configure, then the executor's calls."""
    from areal.api.cli_args import (  # type: ignore[import-not-found]
        PerfTracerConfig,
        SessionTracerConfig,
    )
    from areal.utils import perf_tracer as pt  # type: ignore[import-not-found]

    pt.configure(PerfTracerConfig(experiment_name="bench", trial_name="side-by-side",
                                  fileroot=os.fspath(out), enabled=True,
                                  session_tracer=SessionTracerConfig(enabled=True,
                                                                     flush_threshold=flush)),
                 rank=0)
    tracer = pt.get_session_tracer()
    assert tracer is not None

    async def run(start: int, n: int) -> None:
        register_task, register_session = pt.register_task, pt.register_session
        set_session_id, phase, event = pt.set_session_id, pt.atrace_session_phase, \
            pt.trace_session_event
        for i in range(start, start + n):
            register_task(i)
            set_session_id(register_session(i))
            async with phase("generate"):
                pass
            async with phase("reward"):
                pass
            event("mark_finalized", task_id=i, status="accepted")
        tracer.flush(force=True)

    def size() -> int:
        return sum(p.stat().st_size for p in out.rglob("sessions-r*.jsonl"))

    return run, size


def rollout_kit_side(out: Path, flush: int) -> tuple[Run, Callable[[], int]]:
    """rollout_kit's tracer writing a trace file (the JSONL log; no Parquet at close)."""
    from rollout_kit.tracing import Tracer

    path = out / "trace.jsonl"
    tr = Tracer(path=path, flush_threshold=flush, parquet=False)

    async def run(start: int, n: int) -> None:
        for i in range(start, start + n):
            tr.register_task(i)
            sid = tr.register_session(i)
            async with tr.phase("generate", sid):
                pass
            async with tr.phase("reward", sid):
                pass
            tr.finalize(i, "accepted")
        tr.flush()

    return run, lambda: path.stat().st_size


async def measure(run: Run, n: int, reps: int) -> list[float]:
    """µs per session of ``reps`` repetitions of ``n`` sessions, after a warm-up; task ids
    grow from 0 as a controller hands them out."""
    warm = min(n, 2000)
    await run(0, warm)
    gc.collect()
    gc.freeze()
    out = []
    for r in range(reps):
        t0 = time.perf_counter_ns()
        await run(warm + r * n, n)
        out.append((time.perf_counter_ns() - t0) / n / 1000)
    return out


def main() -> int:
    """Parse the side and sizes, measure, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("side", choices=("areal", "rollout_kit"))
    ap.add_argument("--n", type=int, default=20_000, help="sessions per repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--flush", type=int, default=1024, help="sessions per flush (both)")
    ap.add_argument("--dir", type=Path, required=True, help="where the trace files go")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    make = areal_side if args.side == "areal" else rollout_kit_side
    run, size = make(args.dir, args.flush)
    us = asyncio.run(measure(run, args.n, args.reps))
    print(json.dumps({"us": us, "bytes": size(), "python": sys.version.split()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
