"""Benchmark: timeline drawing (vectorised PolyCollections vs one ``barh`` per task, row 6)
and ``analysis.summary`` on large synthetic traces.

``plot_timeline`` is timed at 100k tasks (target ≤ 2 s, rendered to PNG); the one-``barh``-
per-segment baseline takes minutes there, so both are also timed side by side at a size the
baseline can do, and the baseline's 100k time is extrapolated linearly from it (its cost is
linear in artists)::

    .venv/bin/python bench/bench_plots.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import gc
import io
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from _common import Row, Size, check, run_alone, spread

from rollout_kit import analysis
from rollout_kit.plotting import plot_timeline
from rollout_kit.tracing import phase_color
from rollout_kit.tracing import schema as S

__all__ = ["rows"]

TARGET_S = 2.0


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


def rows(size: Size = "quick") -> list[Row]:
    """Row 6 (timeline at 100k tasks vs barh per task) and an analysis.summary row."""
    n_big = {"smoke": 5_000, "quick": 100_000, "full": 100_000}[size]
    n_naive = {"smoke": 500, "quick": 5_000, "full": 20_000}[size]
    reps = {"smoke": 1, "quick": 3, "full": 3}[size]
    n_sum = {"smoke": 10_000, "quick": 1_000_000, "full": 1_000_000}[size]
    out: list[Row] = []
    tasks, spans = build_frames(n_naive)
    draw_fast(tasks, spans)  # warm-up: fonts, caches
    fast_s = [timed(lambda: draw_fast(tasks, spans)) for _ in range(reps)]
    naive_s = [timed(lambda: draw_naive(tasks, spans)) for _ in range(max(1, reps - 2))]
    mf, mn = statistics.median(fast_s), statistics.median(naive_s)
    out.append(Row("plots", f"plot_timeline → PNG, {n_naive:,} tasks (s)", mf, mn,
                   "one barh per segment", mn / mf, "", None,
                   f"{spread(fast_s)}; barh {spread(naive_s)}", "measured side by side"))
    tasks, spans = build_frames(n_big)
    big_s = [timed(lambda: draw_fast(tasks, spans)) for _ in range(reps)]
    mb = statistics.median(big_s)
    naive_big = mn * n_big / n_naive
    ok = check(mb, "<=", TARGET_S) if n_big == 100_000 else None
    out.append(Row("plots", f"plot_timeline → PNG, {n_big:,} tasks (s)", mb, naive_big,
                   "barh, extrapolated", naive_big / mb, f"≤ {TARGET_S:g} s", ok, spread(big_s),
                   f"baseline = {n_naive:,}-task barh time × {n_big // n_naive} (linear); "
                   "3 segments per task, dpi 80"))
    tasks, _ = build_frames(n_sum)
    sm = [timed(lambda: analysis.summary(tasks)) for _ in range(reps)]
    out.append(Row("plots", f"analysis.summary, {n_sum:,} tasks (s)", statistics.median(sm),
                   None, "", None, "", None, spread(sm), ""))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
