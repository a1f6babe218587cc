"""Plots of conversation load runs (``ConversationRun.turns``), from DataFrames only.

Input: the **turns frame** — one row per turn with ``ttft_s``, ``cached_tokens``,
``prompt_tokens`` (or ``cache_hit_ratio``), ``status``, ``warmup`` and the turn index (an
index level or a column named ``turn``). :func:`plot_ttft_by_turn` asks whether later turns
answer faster (the prefix cache keeps the history); :func:`plot_ttft_vs_cache_hit` whether
TTFT falls as the cached share of the prompt grows. Lines and points carry ``gid`` s
(``"ttft:median"``, ``"ttft:p99"``, ``"ttft:turns"``, ``"ttft_vs_cache"``) to read the data
back; a frame lacking the columns or rows gives a labelled "no data" plot.

Usage::

    from rollout_kit.plotting import plot_ttft_by_turn, plot_ttft_vs_cache_hit
    plot_ttft_by_turn(run.turns)
    plot_ttft_vs_cache_hit(run.turns)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ._common import F64, axes_for, floats, no_data
from ._figure import new_figure

_COMPLETED = ("accepted", "rejected")


def _turn_rows(turns: pd.DataFrame, include_warmup: bool) -> tuple[pd.DataFrame, F64] | None:
    """The completed (measured) turns and their turn index, or ``None`` without them."""
    if "ttft_s" not in turns.columns or turns.empty:
        return None
    if "turn" in turns.columns:
        idx = floats(turns["turn"])
    elif "turn" in (turns.index.names or ()):
        idx = turns.index.get_level_values("turn").to_numpy(dtype=np.float64)
    else:
        return None
    keep = np.ones(len(turns), dtype=bool)
    if "status" in turns.columns:
        keep &= turns["status"].astype(str).isin(_COMPLETED).to_numpy()
    if not include_warmup and "warmup" in turns.columns:
        keep &= ~turns["warmup"].fillna(False).astype(bool).to_numpy()
    return turns[keep], idx[keep]


def plot_ttft_by_turn(turns: pd.DataFrame, *, percentiles: tuple[float, ...] = (50, 99),
                      points: bool = True, include_warmup: bool = False,
                      ax: Axes | None = None) -> Axes:
    """TTFT (ms) against the turn index: a line per percentile, each turn a faint point.

    Args:
        turns: the turns frame.
        percentiles: the lines drawn (gids ``"ttft:median"`` for 50, ``"ttft:p<P>"``).
        points: also draw every turn (gid ``"ttft:turns"``, jittered along x).
        include_warmup: keep the warm-up conversations' turns.
        ax: the Axes (a new figure when omitted).

    Returns:
        The Axes.
    """
    ax = axes_for(ax)
    title = "TTFT by turn"
    got = _turn_rows(turns, include_warmup)
    if got is None:
        return no_data(ax, title, "no data (no turns frame)")
    rows, idx = got
    ttft = floats(rows["ttft_s"]) * 1000.0
    ok = np.isfinite(ttft)
    if not ok.any():
        return no_data(ax, title, "no data (no TTFT: stream=True measures it)")
    ttft, idx = ttft[ok], idx[ok]
    ks = np.unique(idx)
    if points:
        rng = np.random.default_rng(0)
        ax.scatter(idx + rng.uniform(-0.15, 0.15, size=len(idx)), ttft, s=6, alpha=0.25,
                   color="#60a5fa", gid="ttft:turns", label="turns")
    for p, style in zip(percentiles, ("-", "--", ":", "-."), strict=False):
        ys = np.array([np.percentile(ttft[idx == k], p) for k in ks])
        name = "median" if float(p) == 50 else f"p{p:g}"
        ax.plot(ks, ys, style, marker="o", color="#1d4ed8", gid=f"ttft:{name}", label=name)
    ax.set_xticks(ks)
    ax.set_xlabel("turn (0 = the conversation's first)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0.0)
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def plot_ttft_vs_cache_hit(turns: pd.DataFrame, *, include_warmup: bool = False,
                           ax: Axes | None = None, **style: Any) -> Axes:
    """TTFT (ms) against the cache hit ratio (cached / prompt tokens), a point per turn,
    coloured by turn index (gid ``"ttft_vs_cache"``).

    Args:
        turns: the turns frame (``cache_hit_ratio``, or ``cached_tokens`` and
            ``prompt_tokens``).
        include_warmup: keep the warm-up conversations' turns.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.scatter``.

    Returns:
        The Axes.
    """
    ax = axes_for(ax)
    title = "TTFT vs prefix-cache hits"
    got = _turn_rows(turns, include_warmup)
    if got is None:
        return no_data(ax, title, "no data (no turns frame)")
    rows, idx = got
    if "cache_hit_ratio" in rows.columns:
        ratio = floats(rows["cache_hit_ratio"])
    elif {"cached_tokens", "prompt_tokens"} <= set(rows.columns):
        prompt = floats(rows["prompt_tokens"])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(prompt > 0, floats(rows["cached_tokens"]) / prompt, np.nan)
    else:
        return no_data(ax, title, "no data (no cached_tokens column)")
    ttft = floats(rows["ttft_s"]) * 1000.0
    ok = np.isfinite(ttft) & np.isfinite(ratio)
    if not ok.any():
        return no_data(ax, title, "no data (no TTFT or cache counts)")
    pts = ax.scatter(ratio[ok], ttft[ok], c=idx[ok],
                     **{"s": 10, "cmap": "viridis", "gid": "ttft_vs_cache", **style})
    ax.figure.colorbar(pts, ax=ax, label="turn")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("cache hit ratio (cached / prompt tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(title)
    return ax


def conversation_figure(turns: pd.DataFrame, *, figsize: tuple[float, float] = (13.0, 4.5),
                        pyplot: bool = True) -> Figure:
    """TTFT by turn and TTFT vs cache hits, side by side.

    Args:
        turns: the turns frame.
        figsize: figure size in inches.
        pyplot: create the figure through pyplot (inline in notebooks); ``False`` makes a
            standalone ``Figure``.
    """
    fig = new_figure(figsize, pyplot)
    left, right = fig.subplots(1, 2)
    plot_ttft_by_turn(turns, ax=left)
    plot_ttft_vs_cache_hit(turns, ax=right)
    return fig
