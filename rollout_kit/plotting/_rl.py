"""The RL loop on one timeline, and throughput against the staleness bound.

:func:`rl_timeline_layout` computes what :func:`plot_rl_timeline` draws (no matplotlib
needed to check it): one row per task, its generation cut into pieces at each weight update
— each piece coloured by the weight version its tokens carry, the wait through an update
grey —, the update windows, and a trainer lane on top (waiting for the batch, training,
weight sync).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .. import analysis
from ..tracing import schema as S
from ._common import F64, IDLE_COLOR, axes_for, floats, no_data
from ._timeline import _rects_path

#: colours of the trainer lane's parts
TRAINER_COLORS = {"wait": "#e5e7eb", "train": "#ea580c", "sync": "#475569"}
PAUSED_COLOR = "#9ca3af"
_WINDOW_COLOR = "#cbd5e1"
_VERSION_CMAP = "viridis"


@dataclass
class RLTimelineLayout:
    """What the RL timeline draws, in seconds since ``t0``.

    Attributes:
        rows: task id of each row (row ``i`` at ``y = i``).
        pieces: generation pieces: ``start``, ``end``, ``y`` and ``version`` (``-1``: the
            wait through a weight update, generation paused) — one row each.
        windows: the weight-update windows, ``(start, end)`` per step.
        trainer: the trainer lane's bars by part (``"wait"``, ``"train"``, ``"sync"``):
            ``(start, end)`` arrays.
        versions: the weight versions seen, sorted.
        t0: the trace time x counts from.
    """

    rows: np.ndarray[Any, np.dtype[np.int64]]
    pieces: pd.DataFrame
    windows: tuple[F64, F64]
    trainer: dict[str, tuple[F64, F64]] = field(default_factory=dict)
    versions: list[int] = field(default_factory=list)
    t0: float = 0.0


def rl_timeline_layout(steps: pd.DataFrame, spans: pd.DataFrame, *,
                       events: pd.DataFrame | None = None,
                       t0: float | None = None) -> RLTimelineLayout:
    """The rows, pieces, windows and trainer bars of an RL run (see the module docstring).

    A generate span is cut at each ``continue`` event of its session (``events``, the
    engine resending a generation a weight update aborted): the piece before it ends when
    that update started and carries the version before it; the wait until the continue is a
    paused piece; the last piece carries the version current when the span ended.

    Args:
        steps: ``Traces.steps``.
        spans: ``Traces.spans`` (its ``generate`` spans are drawn).
        events: ``Traces.events`` (continues); without them no span is cut.
        t0: the time x counts from (default: the first step's start).
    """
    analysis.require_columns(steps, (S.VERSION, *S.STEP_TIMES), "steps")
    analysis.require_columns(spans, (S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END),
                             "spans")
    us = floats(steps[S.UPDATE_START_TS])
    ue = floats(steps[S.UPDATE_END_TS])
    order = np.argsort(us)
    us, ue = us[order], ue[order]
    done = np.isfinite(us)
    starts = us[done]
    v0 = int(steps[S.VERSION].min()) if len(steps) else 0
    if t0 is None:
        t0 = float(np.nanmin(floats(steps[S.START_TS]))) if len(steps) else 0.0

    def version_at(t: float) -> int:
        """The version of tokens that arrived at ``t`` (not inside an update)."""
        return v0 + int(np.searchsorted(starts, t, side="left"))

    gen = spans[spans[S.PHASE].astype(str) == "generate"]
    rows = np.asarray(sorted(pd.unique(gen[S.TASK_ID].astype("int64"))), dtype=np.int64)
    y_of = {int(t): i for i, t in enumerate(rows)}
    cont: dict[tuple[int, int], list[float]] = {}
    if events is not None and len(events):
        ev = events[events[S.EVENT].astype(str) == S.CONTINUE]
        keys = zip(ev[S.TASK_ID].astype("int64"),
                   pd.to_numeric(ev[S.SESSION_ID], errors="coerce").fillna(-1).astype("int64"),
                   floats(ev[S.TS]), strict=True)
        for tid, sid, ts in keys:
            cont.setdefault((int(tid), int(sid)), []).append(float(ts))
        for times in cont.values():
            times.sort()
    out: list[tuple[float, float, float, int]] = []
    sids = pd.to_numeric(gen[S.SESSION_ID], errors="coerce").fillna(-1).astype("int64")
    for tid, sid, a, b in zip(gen[S.TASK_ID].astype("int64"), sids, floats(gen[S.START]),
                              floats(gen[S.END]), strict=True):
        y = float(y_of[int(tid)])
        lo = a
        for c in cont.get((int(tid), int(sid)), []):
            if not a <= c <= b:
                continue
            k = int(np.searchsorted(starts, c, side="left")) - 1  # the update that cut it
            cut = float(starts[k]) if k >= 0 and starts[k] >= lo else c
            out.append((lo, cut, y, v0 + max(k, 0)))
            out.append((cut, c, y, -1))
            lo = c
        if np.isfinite(b):
            out.append((lo, b, y, version_at(b)))
    pieces = pd.DataFrame(out, columns=["start", "end", "y", "version"])
    pieces["start"] -= t0
    pieces["end"] -= t0
    trainer = {
        "wait": (floats(steps[S.START_TS]) - t0, floats(steps[S.BATCH_READY_TS]) - t0),
        "train": (floats(steps[S.TRAIN_START_TS]) - t0, floats(steps[S.TRAIN_END_TS]) - t0),
        "sync": (floats(steps[S.UPDATE_START_TS]) - t0, floats(steps[S.UPDATE_END_TS]) - t0),
    }
    versions = sorted(int(v) for v in pd.unique(pieces["version"]) if v >= 0)
    return RLTimelineLayout(rows=rows, pieces=pieces, windows=(us - t0, ue - t0),
                            trainer=trainer, versions=versions, t0=t0)


def plot_rl_timeline(steps: pd.DataFrame, spans: pd.DataFrame, *,
                     events: pd.DataFrame | None = None, ax: Axes | None = None,
                     title: str | None = None, max_rows: int | None = 400) -> Axes:
    """The RL loop on one timeline: a trainer lane on top (waiting for the batch,
    training, weight sync), one row per task below with its generation coloured by weight
    version (a partial rollout shows two colours and a grey wait between), the weight-update
    windows shaded across.

    Args:
        steps, spans, events: ``Traces.steps``, ``Traces.spans``, ``Traces.events``.
        ax: where to draw (a new figure when omitted).
        title: the axes title.
        max_rows: draw the first this many task rows (``None``: all).
    """
    ax = axes_for(ax, (10.0, 5.5))
    title = title or "RL loop: trainer and rollouts"
    if steps.empty or spans.empty:
        return no_data(ax, title, "no RL steps recorded")
    lay = rl_timeline_layout(steps, spans, events=events)
    pieces = lay.pieces
    if max_rows is not None:
        pieces = pieces[pieces["y"] < max_rows]
    n_rows = int(pieces["y"].max()) + 1 if len(pieces) else 0
    top = -2.0  # the trainer lane, above row 0 (the y axis is inverted)
    us, ue = lay.windows
    for a, b in zip(us, ue, strict=True):
        if np.isfinite(a) and np.isfinite(b):
            ax.axvspan(a, b, color=_WINDOW_COLOR, alpha=0.45, lw=0, zorder=0)
    cmap = plt.get_cmap(_VERSION_CMAP)
    vs = lay.versions or [0]
    lo_v, hi_v = min(vs), max(vs)
    handles: list[Patch] = []

    def add(kind: str, color: Any, s: F64, e: F64, y: F64, height: float) -> None:
        path = _rects_path(s, e, y, height)
        if path is not None:
            coll = PathCollection([path], facecolors=color, edgecolors="none", zorder=2)
            coll.set_gid(f"rl_timeline:{kind}")
            ax.add_collection(coll)

    for v in lay.versions:
        part = pieces[pieces["version"] == v]
        color = cmap(0.15 + 0.7 * ((v - lo_v) / (hi_v - lo_v) if hi_v > lo_v else 0.0))
        add(f"v{v}", color, floats(part["start"]), floats(part["end"]), floats(part["y"]),
            0.8)
        handles.append(Patch(color=color, label=f"weights v{v}"))
    paused = pieces[pieces["version"] < 0]
    if len(paused):
        add("paused", PAUSED_COLOR, floats(paused["start"]), floats(paused["end"]),
            floats(paused["y"]), 0.3)
        handles.append(Patch(color=PAUSED_COLOR, label="paused (update)"))
    labels = {"wait": "trainer waits", "train": "train", "sync": "weight sync"}
    for kind, (s, e) in lay.trainer.items():
        add(f"trainer:{kind}", TRAINER_COLORS[kind], s, e, np.full(len(s), top), 1.4)
        handles.append(Patch(color=TRAINER_COLORS[kind], label=labels[kind]))
    if len(lay.versions) > 8:  # a legend entry per version would drown the rest
        handles = [h for h in handles if not str(h.get_label()).startswith("weights v")]
        handles.insert(0, Patch(color=cmap(0.5), label=f"weights v{lo_v}…v{hi_v}"))
    xmax = float(np.nanmax([np.nanmax(pieces["end"]) if len(pieces) else 0.0,
                            np.nanmax(lay.trainer["sync"][1])]))
    ax.set_xlim(0.0, xmax * 1.01 if xmax > 0 else 1.0)
    ax.set_ylim(n_rows + 0.5, top - 1.2)
    ax.set_yticks([top])
    ax.set_yticklabels(["trainer"])
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel(f"tasks ({n_rows} rows)")
    ax.set_title(title)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    return ax


def plot_staleness_sweep(runs: pd.DataFrame, *, metric: str = "steps_per_s",
                         ax: Axes | None = None, title: str | None = None) -> Axes:
    """Throughput against the staleness bound: the mean of ``metric`` per
    ``max_staleness`` with the range of the repeats as error bars, each point labelled with
    its speedup over ``max_staleness == 0`` (synchronous RL).

    Args:
        runs: one row per run, with columns ``max_staleness`` and ``metric`` (e.g. the
            :func:`rollout_kit.analysis.rl_summary` of each run, with ``max_staleness``
            added); several rows per setting are repeats.
        metric: the column to plot (``steps_per_s``, ``tokens_per_s``, …).
    """
    ax = axes_for(ax, (6.0, 4.0))
    title = title or "Throughput vs the staleness bound"
    analysis.require_columns(runs, ("max_staleness", metric), "runs")
    if runs.empty:
        return no_data(ax, title)
    g = runs.groupby("max_staleness")[metric]
    mean, lo, hi = g.mean(), g.min(), g.max()
    x = mean.index.to_numpy(dtype=float)
    ax.errorbar(x, mean.to_numpy(), yerr=[mean - lo, hi - mean], fmt="o-", capsize=4,
                color="#1f77b4", label=f"{metric} (mean, range of repeats)")
    base = mean.get(0)
    if base is not None and base > 0:
        for xi, m in zip(x, mean.to_numpy(), strict=True):
            ax.annotate(f"{m / base:.2f}×", (xi, m), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize=8)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xticks(x)
    ax.set_xticklabels([str(int(v)) for v in x])
    ax.set_xlabel("max_staleness (AReaL's max_head_offpolicyness; 0 = synchronous)")
    ax.set_ylabel(metric.replace("_per_s", "/s").replace("_", " "))
    ax.set_ylim(0, float(hi.max()) * 1.18 if float(hi.max()) > 0 else 1.0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return ax


def rl_figure(steps: pd.DataFrame, spans: pd.DataFrame, step_samples: pd.DataFrame, *,
              events: pd.DataFrame | None = None, tasks: pd.DataFrame | None = None,
              title: str | None = None) -> Figure:
    """The timeline above the per-step split of wall time (waiting, training, weight
    sync) with the staleness of each step's samples."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8), height_ratios=(2.2, 1),
                                      layout="constrained")
    plot_rl_timeline(steps, spans, events=events, ax=top, title=title)
    plot_step_split(steps, step_samples, tasks=tasks, spans=spans, ax=bottom)
    return fig


def plot_step_split(steps: pd.DataFrame, step_samples: pd.DataFrame, *,
                    tasks: pd.DataFrame | None = None, spans: pd.DataFrame | None = None,
                    ax: Axes | None = None) -> Axes:
    """Per step, stacked bars of seconds waiting for the batch, training and in weight
    sync; the mean and max staleness of its samples on a second axis."""
    ax = axes_for(ax, (8.0, 3.5))
    if steps.empty:
        return no_data(ax, "RL steps", "no RL steps recorded")
    per = analysis.rl_steps(steps, step_samples, tasks=tasks, spans=spans)
    x = per.index.to_numpy()
    bottom = np.zeros(len(per))
    for col, kind, label in (("wait_s", "wait", "waiting for the batch"),
                             ("train_s", "train", "training"),
                             ("sync_s", "sync", "weight sync")):
        vals = np.nan_to_num(floats(per[col]))
        ax.bar(x, vals, bottom=bottom, color=TRAINER_COLORS[kind] if kind != "wait"
               else IDLE_COLOR, edgecolor="#6b7280" if kind == "wait" else "none",
               lw=0.5, label=label)
        bottom += vals
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax2 = ax.twinx()
    ax2.plot(x, floats(per["staleness_avg"].astype(float)), "o-", color="#7c3aed", ms=3,
             label="staleness (mean)")
    ax2.plot(x, floats(per["staleness_max"].astype(float)), "--", color="#7c3aed", lw=1,
             label="staleness (max)")
    ax2.set_ylabel("staleness (versions)")
    top_staleness = per["staleness_max"].astype(float).max()
    ax2.set_ylim(0, max(1.0, top_staleness if np.isfinite(top_staleness) else 0.0) * 1.15)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", bbox_to_anchor=(1.08, 1.0), fontsize=8,
              frameon=False)
    ax.set_title("Where each step's time went")
    return ax

