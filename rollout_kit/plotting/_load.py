"""Plots of open-loop load runs and sweeps (:mod:`rollout_kit.load`), from DataFrames only.

Two inputs:

* the **sweep frame** (``sweep_async`` / ``sweep``): one row per level with ``level``,
  ``offered_rate``, ``achieved_rate``, ``request_throughput``, ``request_goodput``,
  ``median_/p99_{ttft,tpot,itl,e2el}_ms``, ``saturated`` …;
* a run's **per-request frame** (``LoadRun.frame``): ``scheduled_s``, ``sent_s``,
  ``send_lag_s``, ``status``, ``warmup`` …;
* optionally the controller's **server metrics frame** (``ctl.server_metrics()``, a
  controller with ``scrape_interval=``): the servers' running / waiting requests and KV
  cache usage during each level (the sweep frame's ``start_ts`` / ``end_ts``), one small
  panel per level (:func:`plot_level_server_state`).

Every ``plot_*`` takes the frame plus ``ax=None`` and returns the ``Axes``; each drawn line
has a ``gid`` (``"knee:p99_ttft_ms"``, ``"goodput"``, ``"achieved"``, ``"ideal"``,
``"send_lag"`` …) so tests and scripts can read the data back. Saturated levels are
marked with a red ring (gid ``"saturated"``). A frame lacking the columns, or with no rows,
gives a labelled "no data" plot.

Usage::

    from rollout_kit.plotting import load_sweep_figure, plot_latency_vs_throughput
    ax = plot_latency_vs_throughput(sweep_df, metric="ttft")
    fig = load_sweep_figure(sweep_df, run.frame)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..tracing import schema as S
from ._common import F64, STATUS_COLORS, axes_for, check_choice, floats, no_data
from ._figure import new_figure
from ._server import lane_layout

SATURATED_COLOR = "#dc2626"
IDEAL_COLOR = "#9ca3af"
_METRICS = ("ttft", "tpot", "itl", "e2el")
_STAT_STYLES = {"median": "-", "mean": "-.", "p90": ":", "p99": "--"}
_METRIC_COLORS = {"ttft": "#1f77b4", "tpot": "#2ca02c", "itl": "#8c564b", "e2el": "#9467bd"}


def _sorted(df: pd.DataFrame, by: str) -> pd.DataFrame:
    return df.sort_values(by, kind="stable") if by in df.columns else df


def _level_x(df: pd.DataFrame) -> tuple[F64, str]:
    """x values for per-level plots: the offered rate, or the level for concurrency sweeps."""
    if "offered_rate" in df.columns:
        x = floats(df["offered_rate"])
        if np.isfinite(x).all():
            return x, "offered rate (req/s)"
    if "level" in df.columns:
        return floats(df["level"]), "level (max concurrency)"
    return np.arange(len(df), dtype=np.float64), "level"


def _saturated(df: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.bool_]]:
    if "saturated" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return df["saturated"].fillna(False).astype(bool).to_numpy()


def _mark_saturated(ax: Axes, x: F64, y: F64, sat: np.ndarray[Any, np.dtype[np.bool_]]) -> None:
    m = sat & np.isfinite(x) & np.isfinite(y)
    if m.any():
        ax.scatter(x[m], y[m], s=110, facecolors="none", edgecolors=SATURATED_COLOR,
                   linewidths=1.5, zorder=5, gid="saturated", label="saturated")


def plot_latency_vs_throughput(df: pd.DataFrame, *, metric: str = "ttft",
                               stats: Sequence[str] = ("median", "p99"),
                               x: str = "request_throughput", log: bool = False,
                               ax: Axes | None = None, **style: Any) -> Axes:
    """Latency against achieved throughput, one point per sweep level: the knee.

    Args:
        df: the sweep frame (``request_throughput`` and ``<stat>_<metric>_ms`` columns).
        metric: ``"ttft"``, ``"tpot"``, ``"itl"`` or ``"e2el"``.
        stats: which statistics to draw (``"median"``, ``"mean"``, ``"p90"``, ``"p99"``);
            each line's gid is ``"knee:<stat>_<metric>_ms"``.
        x: the throughput column (``request_throughput``, ``output_throughput``,
            ``total_token_throughput``, ``request_goodput``).
        log: log-scaled latency axis.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.plot``.

    Returns:
        The Axes.
    """
    check_choice("metric", metric, _METRICS)
    for stat in stats:
        check_choice("stat", stat, tuple(_STAT_STYLES))
    ax = axes_for(ax)
    title = f"{metric.upper()} vs throughput"
    cols = [f"{stat}_{metric}_ms" for stat in stats]
    cols = [c for c in cols if c in df.columns]
    if x not in df.columns or not cols or df.empty:
        return no_data(ax, title, "no data (no sweep levels with latency)")
    d = _sorted(df, x)
    xs = floats(d[x])
    sat = _saturated(d)
    drawn = False
    for col in cols:
        stat = col.split("_", 1)[0]
        ys = floats(d[col])
        ok = np.isfinite(xs) & np.isfinite(ys)
        if not ok.any():
            continue
        drawn = True
        kw = {"color": _METRIC_COLORS[metric], "linestyle": _STAT_STYLES[stat], "marker": "o",
              **style}
        ax.plot(xs[ok], ys[ok], label=f"{stat} {metric}", gid=f"knee:{col}", **kw)
        _mark_saturated(ax, xs, ys, sat if col == cols[-1] else np.zeros_like(sat))
    if not drawn:
        return no_data(ax, title, "no data (latency columns are empty)")
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0.0)
    unit = "req/s" if x.startswith("request") else "tok/s"
    ax.set_xlabel(f"{x.replace('_', ' ')} ({unit})")
    ax.set_ylabel(f"{metric.upper()} (ms)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def plot_goodput(df: pd.DataFrame, *, throughput: bool = True, ax: Axes | None = None,
                 **style: Any) -> Axes:
    """Goodput (requests meeting every SLO, per second) against offered rate.

    Args:
        df: the sweep frame (``offered_rate`` or ``level``; ``request_goodput``;
            ``request_throughput``).
        throughput: also draw the request throughput (gid ``"throughput"``) for comparison.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.plot`` for the goodput line (gid ``"goodput"``).

    Returns:
        The Axes.
    """
    ax = axes_for(ax)
    title = "Goodput vs offered rate"
    if df.empty or not ({"request_goodput", "request_throughput"} & set(df.columns)):
        return no_data(ax, title, "no data (no goodput column)")
    d = _sorted(df, "level")
    xs, xlabel = _level_x(d)
    order = np.argsort(xs, kind="stable")
    d, xs = d.iloc[order], xs[order]
    sat = _saturated(d)
    if "request_goodput" in d.columns and np.isfinite(floats(d["request_goodput"])).any():
        gy = floats(d["request_goodput"])
        ax.plot(xs, gy, marker="o", label="goodput (met all SLOs)", gid="goodput",
                **{"color": STATUS_COLORS["accepted"], **style})
        _mark_saturated(ax, xs, gy, sat)
    else:
        ax.text(0.02, 0.95, "no SLOs given (goodput not computed)", transform=ax.transAxes,
                va="top", color="#6b7280", gid="no-goodput")
    if throughput and "request_throughput" in d.columns:
        ax.plot(xs, floats(d["request_throughput"]), marker=".", color="#374151",
                linestyle="--", label="request throughput", gid="throughput")
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("requests / s")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def plot_achieved_rate(df: pd.DataFrame, *, tolerance: float = 0.95, ax: Axes | None = None,
                       **style: Any) -> Axes:
    """Achieved send rate against offered rate, with the ``y = x`` line.

    Points under the dotted ``tolerance × offered`` line did not get their load out (the
    client, or back-pressure through ``max_concurrency``, fell behind).

    Args:
        df: the sweep frame (``offered_rate``, ``achieved_rate``).
        tolerance: draw ``y = tolerance · x`` too (gid ``"tolerance"``); 0 to leave it out.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.plot`` for the achieved line (gid ``"achieved"``).

    Returns:
        The Axes; the ideal line's gid is ``"ideal"``.
    """
    ax = axes_for(ax)
    title = "Achieved vs offered rate"
    if df.empty or not {"offered_rate", "achieved_rate"} <= set(df.columns):
        return no_data(ax, title, "no data (no offered/achieved rate)")
    d = _sorted(df, "offered_rate")
    xs, ys = floats(d["offered_rate"]), floats(d["achieved_rate"])
    ok = np.isfinite(xs) & np.isfinite(ys)
    if not ok.any():
        return no_data(ax, title, "no data (offered rate is unbounded)")
    xs, ys, sat = xs[ok], ys[ok], _saturated(d)[ok]
    hi = float(max(xs.max(), ys.max())) * 1.05
    ax.plot([0.0, hi], [0.0, hi], color=IDEAL_COLOR, linewidth=1, label="achieved = offered",
            gid="ideal")
    if tolerance > 0:
        ax.plot([0.0, hi], [0.0, hi * tolerance], color=IDEAL_COLOR, linestyle=":",
                linewidth=1, label=f"{tolerance:g} × offered", gid="tolerance")
    ax.plot(xs, ys, marker="o", label="achieved", gid="achieved",
            **{"color": STATUS_COLORS["accepted"], **style})
    _mark_saturated(ax, xs, ys, sat)
    ax.set_xlim(0.0, hi)
    ax.set_ylim(0.0, hi)
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("achieved rate (req/s)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def plot_send_lag(frame: pd.DataFrame, *, kind: Literal["hist", "time"] = "hist",
                  bins: int = 50, include_warmup: bool = False, ax: Axes | None = None,
                  **style: Any) -> Axes:
    """Send lag (actual − scheduled send time) of a run's requests, in milliseconds.

    Args:
        frame: a run's per-request frame (``send_lag_s``; ``scheduled_s`` for ``"time"``;
            ``warmup``).
        kind: ``"hist"`` — a histogram with p50/p99 lines (gids ``"p50"``, ``"p99"``); or
            ``"time"`` — lag against scheduled send time, one point per request.
        bins: histogram bins.
        include_warmup: keep the warm-up requests (left out by default, as in the metrics).
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.hist`` / ``Axes.scatter`` (gid ``"send_lag"``).

    Returns:
        The Axes.
    """
    check_choice("kind", kind, ("hist", "time"))
    ax = axes_for(ax)
    title = "Send lag" if kind == "hist" else "Send lag over time"
    if "send_lag_s" not in frame.columns or frame.empty:
        return no_data(ax, title, "no data (no send_lag_s column)")
    f = frame
    if not include_warmup and "warmup" in f.columns:
        f = f[~f["warmup"].fillna(False).astype(bool)]
    lag = floats(f["send_lag_s"]) * 1000.0
    ok = np.isfinite(lag)
    if not ok.any():
        return no_data(ax, title, "no data (no request was sent)")
    if kind == "hist":
        v = lag[ok]
        ax.hist(v, bins=bins, color="#60a5fa", gid="send_lag", **style)
        for q, ls in ((50, ":"), (99, "--")):
            val = float(np.percentile(v, q))
            ax.axvline(val, color="#374151", linestyle=ls, linewidth=1, gid=f"p{q}",
                       label=f"p{q} = {val:.3g} ms")
        ax.set_xlabel("send lag (ms)")
        ax.set_ylabel("requests")
        ax.legend(fontsize="small")
    else:
        if "scheduled_s" not in f.columns:
            return no_data(ax, title, "no data (no scheduled_s column)")
        t = floats(f["scheduled_s"])
        m = ok & np.isfinite(t)
        ax.scatter(t[m], lag[m], **{"s": 6, "color": "#2563eb", "gid": "send_lag", **style})
        ax.set_xlabel("scheduled send time (s since start)")
        ax.set_ylabel("send lag (ms)")
        ax.set_ylim(bottom=min(0.0, float(np.nanmin(lag[m]))) if m.any() else 0.0)
    ax.set_title(title)
    return ax


_LEVEL_COLORS = {"running": "#2563eb", "waiting": "#ea580c", "kv_cache_usage": "#6b7280"}


def _level_windows(sweep: pd.DataFrame) -> list[tuple[Any, float, float, bool]]:
    """(level, start_ts, end_ts, saturated) of the sweep's rows with a known window."""
    if not {"start_ts", "end_ts"} <= set(sweep.columns) or sweep.empty:
        return []
    lo, hi = floats(sweep["start_ts"]), floats(sweep["end_ts"])
    sat = (sweep["saturated"].fillna(False).astype(bool).to_numpy()
           if "saturated" in sweep.columns else np.zeros(len(sweep), dtype=bool))
    levels = sweep["level"].to_numpy() if "level" in sweep.columns else np.arange(len(sweep))
    return [(levels[i], float(lo[i]), float(hi[i]), bool(sat[i])) for i in range(len(sweep))
            if np.isfinite(lo[i]) and np.isfinite(hi[i])]


def plot_level_server_state(sweep: pd.DataFrame, server_metrics: pd.DataFrame, *,
                            axes: Sequence[Axes] | None = None) -> list[Axes]:
    """The servers' state during each level of a sweep: one panel per level, running and
    waiting requests (all servers added; left axis) and KV cache usage (servers averaged,
    %, dashed, right axis), x in seconds since the level began.

    Args:
        sweep: the sweep frame (its ``start_ts`` / ``end_ts``: the levels' windows on the
            trace clock).
        server_metrics: the controller's server metrics frame.
        axes: one Axes per level with a window (new ones in a row when omitted).

    Returns:
        The Axes; lines have gids ``"level:<i>:running"``, ``"level:<i>:waiting"``,
        ``"level:<i>:kv_cache_usage"``.
    """
    windows = _level_windows(sweep)
    if axes is None:
        _, new = plt.subplots(1, max(len(windows), 1), squeeze=False,
                              figsize=(3.0 * max(len(windows), 1), 2.6), layout="constrained")
        axes = list(new[0])
    if not windows:
        return [no_data(axes[0], "Server state", "no data (no level windows)")]
    ts = floats(server_metrics[S.TS]) if S.TS in server_metrics.columns else np.empty(0)
    for i, (ax, (level, lo, hi, sat)) in enumerate(zip(axes, windows, strict=True)):
        # a scrape before the window: the rates and the first step start at the window
        part = server_metrics[(ts >= lo - 1.0) & (ts <= hi)]
        lanes = lane_layout(part, ("running", "waiting", "kv_cache_usage"), t0=lo,
                            max_servers=0) if len(part) else []
        kv_ax = None
        for lane in lanes:
            for _, x, y in lane.lines:
                keep = x >= -1e-9
                if lane.series == "kv_cache_usage":
                    kv_ax = kv_ax or ax.twinx()
                    kv_ax.step(x[keep], y[keep], where="post", linestyle="--", linewidth=1,
                               color=_LEVEL_COLORS[lane.series], label="KV %",
                               gid=f"level:{i}:kv_cache_usage")
                else:
                    ax.step(x[keep], y[keep], where="post", linewidth=1.2,
                            color=_LEVEL_COLORS[lane.series], label=lane.series,
                            gid=f"level:{i}:{lane.series}")
        if kv_ax is not None:
            kv_ax.set_ylim(0, 100)
            kv_ax.tick_params(axis="y", labelsize="x-small")
            if i == len(windows) - 1:
                kv_ax.set_ylabel("KV cache %", fontsize="small")
        ax.set_xlim(0, max(hi - lo, 1e-3))
        ax.set_ylim(bottom=0)
        name = f"level {level:g}" if isinstance(level, int | float) else f"level {level}"
        title = ax.set_title(name + (" (saturated)" if sat else ""), fontsize="small")
        if sat:
            title.set_color(SATURATED_COLOR)
        ax.set_xlabel("s into level", fontsize="small")
        ax.tick_params(labelsize="x-small")
        if i == 0:
            ax.set_ylabel("requests", fontsize="small")
            if lanes:
                ax.legend(fontsize="x-small", frameon=False, loc="upper left")
    return list(axes)


def load_sweep_figure(sweep: pd.DataFrame, frame: pd.DataFrame | None = None, *,
                      metric: str = "ttft", figsize: tuple[float, float] = (13.0, 8.0),
                      pyplot: bool = True,
                      server_metrics: pd.DataFrame | None = None) -> Figure:
    """One 2 × 2 figure: the knee, goodput, achieved vs offered, and send lag; with
    ``server_metrics``, a row of the servers' state per level under them.

    Args:
        sweep: the sweep frame.
        frame: one run's per-request frame for the send-lag panel (a "no data" panel
            when omitted).
        metric: the latency of the knee panel.
        figsize: figure size in inches (of the 2 × 2 part).
        pyplot: create the figure through pyplot (inline in notebooks); ``False`` makes a
            standalone ``Figure`` (for scripts that only save it).
        server_metrics: the controller's server metrics frame: adds
            :func:`plot_level_server_state` (when the sweep frame has ``start_ts`` /
            ``end_ts`` and the frame has rows).

    Returns:
        The Figure.
    """
    windows = (_level_windows(sweep) if server_metrics is not None and len(server_metrics)
               else [])
    size = (figsize[0], figsize[1] + 2.8) if windows else figsize
    fig = new_figure(size, pyplot)
    if windows:
        assert server_metrics is not None
        subs = np.asarray(fig.subfigures(2, 1, height_ratios=[figsize[1], 2.8]),
                          dtype=object).ravel()
        top, bottom = subs[0], subs[1]
        axes = top.subplots(2, 2)
        row = bottom.subplots(1, len(windows), squeeze=False)[0]
        plot_level_server_state(sweep, server_metrics, axes=list(row))
        bottom.suptitle("servers during each level", fontsize="small")
    else:
        axes = fig.subplots(2, 2)
    plot_latency_vs_throughput(sweep, metric=metric, ax=axes[0, 0])
    plot_goodput(sweep, ax=axes[0, 1])
    plot_achieved_rate(sweep, ax=axes[1, 0])
    plot_send_lag(frame if frame is not None else pd.DataFrame(), ax=axes[1, 1])
    return fig
