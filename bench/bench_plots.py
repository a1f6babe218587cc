"""Benchmark: timeline drawing (vectorised PolyCollections vs one ``barh`` per task) and
``analysis.summary`` on large synthetic traces.

Prints one table; ratios are measured side by side in the same run::

    .venv/bin/python bench/bench_plots.py           # 10k + 100k tasks, summary on 1M
    .venv/bin/python bench/bench_plots.py --quick   # 2k + 10k tasks, summary on 100k
"""

from __future__ import annotations

import argparse
import gc
import io
import time
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rollout_kit import analysis
from rollout_kit.plotting import plot_timeline
from rollout_kit.tracing import schema as S
from rollout_kit.tracing.phases import phase_color

NAIVE_LIMIT = 20_000  # the naive baseline takes minutes above this


def build_frames(n: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Vectorised tasks + spans frames: queue wait, then generate and reward per task."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, n / 500, n))
    dispatch = submit + rng.exponential(0.3, n)
    g1 = dispatch + rng.uniform(0.5, 3.0, n)
    r0 = g1 + 0.01
    end = r0 + rng.uniform(0.05, 0.3, n)
    ids = np.arange(n, dtype=np.int64)
    status = pd.Categorical(np.where(rng.random(n) < 0.9, "accepted", "rejected"),
                            categories=list(S.STATUSES))
    tasks = pd.DataFrame({
        S.STATUS: status, S.SUBMIT_TS: submit, S.DISPATCH_TS: dispatch, S.START_TS: dispatch,
        S.END_TS: end, S.QUEUE_S: dispatch - submit, S.RUN_S: end - dispatch,
        S.TOTAL_S: end - submit, S.N_SESSIONS: 1,
        S.PROMPT_TOKENS: pd.array(np.full(n, 100), dtype="Int64"),
        S.COMPLETION_TOKENS: pd.array(rng.integers(10, 500, n), dtype="Int64"),
        "generate_s": g1 - dispatch, "reward_s": end - r0,
    }, index=pd.Index(ids, name=S.TASK_ID))
    spans = pd.DataFrame({
        S.TASK_ID: np.repeat(ids, 2), S.SESSION_ID: 0,
        S.PHASE: pd.Categorical(np.tile(["generate", "reward"], n)),
        S.START: np.column_stack([dispatch, r0]).ravel(),
        S.END: np.column_stack([g1, end]).ravel(),
    })
    spans[S.DURATION] = spans[S.END] - spans[S.START]
    return tasks, spans


def _png(fig: Any) -> None:
    fig.savefig(io.BytesIO(), format="png", dpi=80)
    plt.close(fig)


def draw_fast(tasks: pd.DataFrame, spans: pd.DataFrame) -> None:
    ax = plot_timeline(spans, tasks=tasks)
    _png(ax.figure)


def draw_naive(tasks: pd.DataFrame, spans: pd.DataFrame) -> None:
    """The baseline: one ``barh`` call (one Rectangle artist) per segment."""
    _, ax = plt.subplots(figsize=(10, 5))
    t0 = float(tasks[S.SUBMIT_TS].min())
    y = {tid: i for i, tid in enumerate(tasks.index)}
    for tid, s, d in zip(tasks.index, tasks[S.SUBMIT_TS], tasks[S.DISPATCH_TS], strict=True):
        ax.barh(y[tid], d - s, left=s - t0, color="#cbd5e1")
    for tid, ph, a, b in zip(spans[S.TASK_ID], spans[S.PHASE], spans[S.START], spans[S.END],
                             strict=True):
        ax.barh(y[tid], b - a, left=a - t0, color=phase_color(str(ph)))
    _png(ax.figure)


def timed(fn: Callable[[], object]) -> float:
    gc.collect()  # garbage of a previous (naive) run must not be collected on our clock
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    args = p.parse_args()
    sizes = (2_000, 10_000) if args.quick else (10_000, 100_000)
    big = 100_000 if args.quick else 1_000_000
    rows: list[tuple[str, str, str, str]] = []
    for n in sizes:
        t = time.perf_counter()
        tasks, spans = build_frames(n)
        build = time.perf_counter() - t
        rows.append((f"build frames, {n:,} tasks", f"{build:.3f}", "", ""))
        fast = timed(lambda: draw_fast(tasks, spans))  # noqa: B023
        if n <= NAIVE_LIMIT:
            naive = timed(lambda: draw_naive(tasks, spans))  # noqa: B023
            rows.append((f"timeline → PNG, {n:,} tasks", f"{fast:.3f}", f"{naive:.3f}",
                         f"{naive / fast:.1f}x"))
        else:
            rows.append((f"timeline → PNG, {n:,} tasks", f"{fast:.3f}",
                         f"skipped (> {NAIVE_LIMIT:,})", ""))
    tasks, _ = build_frames(big)
    s = timed(lambda: analysis.summary(tasks))
    rows.append((f"summary, {big:,} tasks", f"{s:.3f}", "", ""))
    head = ("what", "rollout_kit (s)", "naive barh (s)", "speed-up")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    for r in [head, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
