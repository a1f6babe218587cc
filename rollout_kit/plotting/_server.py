"""The servers' state beside the timeline (lanes), and the "why was this task slow" figure.

Both read DataFrames only: the server metrics frame (``Traces.server_metrics``,
``RolloutController.server_metrics()``) through :func:`rollout_kit.analysis.server_series`,
and :func:`rollout_kit.analysis.why_slow`'s table. The lines to draw are computed apart
from the drawing (:func:`lane_layout`, :func:`_why_layout`), so tests check the numbers
without reading artists back.

Usage::

    from rollout_kit.plotting import plot_timeline, plot_server_lanes, plot_why_slow
    ax = plot_timeline(traces.spans, tasks=traces.tasks, server_metrics=traces.server_metrics)
    plot_why_slow(analysis.why_slow(traces))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import analysis
from .._errors import ConfigError
from ..tracing import schema as S
from ..tracing.server_metrics import SERIES_NAMES
from ._common import F64, QUEUED_COLOR, axes_for, color_of_phase, floats, no_data

#: the lanes ``plot_timeline(..., server_metrics=...)`` draws unless told
DEFAULT_LANES = ("waiting", "running", "kv_cache_usage", "generation_tokens_per_s")
#: y label and scale of each series' lane
_LANE_STYLE: dict[str, tuple[str, float]] = {
    "running": ("running", 1.0),
    "waiting": ("waiting", 1.0),
    "kv_cache_usage": ("KV cache %", 100.0),
    "preemptions_per_s": ("preempt/s", 1.0),
    "prefix_cache_hit_rate": ("prefix hit %", 100.0),
    "prompt_tokens_per_s": ("prompt tok/s", 1.0),
    "generation_tokens_per_s": ("gen tok/s", 1.0),
    "ttft_s": ("server TTFT s", 1.0),
    "scrape_failed": ("failed scrapes", 1.0),
}
#: gauges hold from their scrape on; rates and per-interval means describe the interval
#: before their (later) scrape
_GAUGES = frozenset({"running", "waiting", "kv_cache_usage"})
#: added across servers when more servers than ``max_servers`` are drawn as one line
_SUMMED = frozenset({"running", "waiting", "preemptions_per_s", "prompt_tokens_per_s",
                     "generation_tokens_per_s", "scrape_failed"})


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane: a series, its y label, and its lines ``(label, x, y)`` (x in seconds since
    ``t0``; y scaled, e.g. KV usage in %); ``step`` is ``"post"`` for gauges, ``"pre"`` for
    rates and per-interval values."""

    series: str
    label: str
    step: Literal["pre", "post"]
    lines: tuple[tuple[str, F64, F64], ...]


def _check_lanes(lanes: Sequence[str]) -> tuple[str, ...]:
    if isinstance(lanes, str):
        lanes = (lanes,)
    bad = [x for x in lanes if x not in SERIES_NAMES]
    if bad:
        raise ConfigError(f"unknown lane(s) {bad}; the series are {list(SERIES_NAMES)}")
    return tuple(lanes)


def lane_layout(metrics: pd.DataFrame, lanes: Sequence[str] = DEFAULT_LANES, *,
                t0: float = 0.0, max_servers: int = 8) -> list[Lane]:
    """The lines of each lane, from a server metrics frame (no drawing).

    Args:
        metrics: a server metrics frame.
        lanes: series names (the columns of :func:`rollout_kit.analysis.server_series`).
        t0: the time (trace clock) x counts from: the timeline's first submit.
        max_servers: up to this many servers get one line each; more are drawn as one line
            (queue depths and rates added, fractions averaged) on a grid of the median
            scrape interval.

    Returns:
        One :class:`Lane` per name in ``lanes`` (a lane with no lines when no server
        exposes that series).

    Raises:
        ConfigError: an unknown lane name.
    """
    names = _check_lanes(lanes)
    series = analysis.server_series(metrics)
    out: list[Lane] = []
    servers = sorted(set(series[S.SERVER].astype(str)))
    merge = len(servers) > max_servers
    for name in names:
        label, scale = _LANE_STYLE[name]
        step: Literal["pre", "post"] = "post" if name in _GAUGES else "pre"
        part = series[series["series"].astype(str) == name]
        lines: list[tuple[str, F64, F64]] = []
        if len(part) and merge:
            lines.append(_merged(part, name, t0, scale, len(servers)))
        elif len(part):
            for server, g in part.groupby(part[S.SERVER].astype(str), sort=True):
                lines.append((str(server), floats(g[S.TS]) - t0,
                              floats(g[S.VALUE]) * scale))
        out.append(Lane(name, label, step, tuple(lines)))
    return out


def _merged(part: pd.DataFrame, name: str, t0: float, scale: float,
            n: int) -> tuple[str, F64, F64]:
    """All servers' values of one series as one line, on a grid of the scrape interval."""
    ts = floats(part[S.TS])
    server = part[S.SERVER].astype(str).to_numpy()
    gaps = pd.Series(ts).groupby(server).diff().to_numpy(dtype=np.float64)
    gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
    width = float(np.median(gaps)) if len(gaps) else 1.0  # the scrape interval
    df = pd.DataFrame({"bin": np.floor((ts - t0) / width), "server": server,
                       "v": floats(part[S.VALUE])})
    table = df.pivot_table(index="bin", columns="server", values="v", aggfunc="last").ffill()
    agg = table.sum(axis=1, min_count=1) if name in _SUMMED else table.mean(axis=1)
    # a gauge holds from its bin on; a rate describes the bin before its scrape
    x = (agg.index.to_numpy(dtype=np.float64) + (0.0 if name in _GAUGES else 1.0)) * width
    return f"all {n} servers", x, agg.to_numpy(dtype=np.float64) * scale


def _draw_lanes(axes: Sequence[Axes], lanes: Sequence[Lane], *, legend: bool = True) -> None:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors: dict[str, str] = {}
    for ax, lane in zip(axes, lanes, strict=True):
        ax.set_gid(f"lane:{lane.series}")
        ax.set_ylabel(lane.label, fontsize="small", rotation=0, ha="right", va="center")
        ax.tick_params(axis="y", labelsize="x-small")
        ax.grid(axis="y", color="#e5e7eb", linewidth=0.6)
        if not lane.lines:
            ax.text(0.5, 0.5, f"{lane.series}: not exposed by the servers",
                    transform=ax.transAxes, ha="center", va="center", color="#6b7280",
                    fontsize="small", gid="no-data")
            ax.set_yticks([])
            continue
        top = 0.0
        for label, x, y in lane.lines:
            color = colors.setdefault(label, cycle[len(colors) % len(cycle)])
            ax.step(x, y, where=lane.step, color=color, linewidth=1.1, label=label,
                    gid=f"lane:{lane.series}:{label}")
            if np.isfinite(y).any():
                top = max(top, float(np.nanmax(y)))
        ax.set_ylim(0.0, top * 1.1 if top > 0 else 1.0)
    if legend and len(colors) > 1 and len(axes):
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=c, label=s) for s, c in colors.items()]
        axes[0].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                       fontsize="x-small", frameon=False, title="server",
                       title_fontsize="x-small")


def attach_lanes(ax: Axes, metrics: pd.DataFrame, lanes: Sequence[str] = DEFAULT_LANES, *,
                 t0: float = 0.0, xlabel: str | None = None,
                 main_ratio: float | None = None) -> list[Axes]:
    """Split ``ax``'s place in its figure: ``ax`` on top, one small lane per series below,
    all sharing its x axis (``sharex``), x in seconds since ``t0``.

    ``ax`` keeps its x limits; its x tick labels and x label move to the lowest lane. Each
    lane Axes has the gid ``"lane:<series>"``, each line ``"lane:<series>:<server>"``.

    Raises:
        ConfigError: ``ax`` was not made by ``add_subplot`` / ``subplots`` (it has no grid
            place to split), or an unknown lane name.
    """
    names = _check_lanes(lanes)
    spec = ax.get_subplotspec()
    if spec is None:
        raise ConfigError("server lanes need an Axes made by add_subplot() or subplots()")
    layout = lane_layout(metrics, names, t0=t0)
    if not layout:
        return []
    n = len(layout)
    ratio = main_ratio if main_ratio is not None else max(3.0, 1.5 * n)
    gs = spec.subgridspec(n + 1, 1, height_ratios=[ratio] + [1.0] * n, hspace=0.08)
    ax.set_subplotspec(gs[0])
    fig = ax.get_figure()
    assert fig is not None
    xlim = ax.get_xlim()
    label = xlabel if xlabel is not None else ax.get_xlabel()
    axes = [fig.add_subplot(gs[i + 1], sharex=ax) for i in range(n)]
    _draw_lanes(axes, layout)
    ax.set_xlim(*xlim)  # the lanes follow the timeline, not the other way round
    ax.tick_params(axis="x", labelbottom=False)
    ax.set_xlabel("")
    for lane_ax in axes[:-1]:
        lane_ax.tick_params(axis="x", labelbottom=False)
    axes[-1].set_xlabel(label)
    return axes


def plot_server_lanes(metrics: pd.DataFrame, lanes: Sequence[str] = DEFAULT_LANES, *,
                      t0: float | None = None, axes: Sequence[Axes] | None = None,
                      figsize: tuple[float, float] = (10.0, 5.0)) -> list[Axes]:
    """The servers' state alone: one lane per series, stacked, sharing x.

    Args:
        metrics: a server metrics frame.
        lanes: series names.
        t0: where x counts from (trace clock; default: the first scrape).
        axes: one Axes per lane (new stacked ones, ``sharex``, when omitted).
        figsize: size of the new figure.

    Returns:
        The lane Axes (gids ``"lane:<series>"``).
    """
    names = _check_lanes(lanes)
    if t0 is None:
        ts = floats(metrics[S.TS]) if S.TS in metrics.columns else np.empty(0)
        t0 = float(np.nanmin(ts)) if np.isfinite(ts).any() else 0.0
    layout = lane_layout(metrics, names, t0=t0)
    if axes is None:
        _, new = plt.subplots(len(names), 1, sharex=True, figsize=figsize, squeeze=False,
                              layout="constrained")
        axes = list(new[:, 0])
    if len(axes) != len(layout):
        raise ConfigError(f"{len(layout)} lanes need {len(layout)} Axes, got {len(axes)}")
    _draw_lanes(axes, layout)
    axes[-1].set_xlabel("seconds")
    return list(axes)


# -- why was this task slow ---------------------------------------------------------------

#: the parts of a bar of :func:`plot_why_slow`: (key, legend label, colour)
WHY_PARTS = (
    ("controller_queue", "controller queue", QUEUED_COLOR),
    ("server_queue", "server queue", "#94a3b8"),
    ("server_prefill", "server prefill", "#f97316"),
    ("server_decode", "server decode", "#4f46e5"),
    ("server_frontend", "server front end + network", "#eab308"),
    ("client", "client", "#14b8a6"),
    ("first_token", "time to first token", "#fb923c"),
    ("decode", "decode", "#6366f1"),
    ("generate", "generate", color_of_phase("generate")),
    ("tool", "tools", color_of_phase("toolcall")),
    ("reward", "reward", color_of_phase("reward")),
    ("other", "workflow / other", "#d1d5db"),
)


def _col(table: pd.DataFrame, name: str) -> F64:
    return floats(table[name]) if name in table.columns else np.full(len(table), np.nan)


def _why_layout(table: pd.DataFrame) -> list[tuple[str, str, str, F64, F64]]:
    """(key, label, colour, left, width) of each part, over the rows of a why_slow table.

    A row's bar is its controller queue, its generation (split into the server's parts
    where joined, else into the time to first token and the decode where streamed, the
    rest of the generate wall time as ``generate``), tools, reward and the rest; NaN parts
    draw nothing.
    """
    z = np.zeros(len(table))

    def nz(a: F64) -> F64:
        return np.nan_to_num(a, nan=0.0)

    gen = nz(_col(table, "generate_s"))
    joined = ~np.isnan(_col(table, "server_queue_s")) | ~np.isnan(_col(table, "server_decode_s"))
    ttft = _col(table, S.TTFT_S)
    streamed = ~joined & ~np.isnan(ttft)
    server = {k: np.where(joined, nz(_col(table, c)), 0.0) for k, c in (
        ("server_queue", "server_queue_s"), ("server_prefill", "server_prefill_s"),
        ("server_decode", "server_decode_s"), ("server_frontend", "server_frontend_s"),
        ("client", "client_own_s"))}
    first = np.where(streamed, nz(ttft), 0.0)
    decode = np.where(streamed, np.maximum(nz(_col(table, "session_s")) - nz(ttft), 0.0), 0.0)
    split = sum(server.values(), z) + first + decode
    widths = {"controller_queue": nz(_col(table, S.QUEUE_S)), **server, "first_token": first,
              "decode": decode, "generate": np.maximum(gen - split, 0.0),
              "tool": nz(_col(table, "tool_s")), "reward": nz(_col(table, "reward_s")),
              "other": nz(_col(table, "other_s"))}
    left = z.copy()
    out: list[tuple[str, str, str, F64, F64]] = []
    for key, label, color in WHY_PARTS:
        w = widths[key]
        out.append((key, label, color, left.copy(), w))
        left = left + w
    return out


def plot_why_slow(table: pd.DataFrame, *, ax: Axes | None = None, verdicts: bool = True,
                  legend: bool = True) -> Axes:
    """One bar per row of :func:`rollout_kit.analysis.why_slow`'s table: where its time
    went, part by part (gids ``"why:<part>"``, parts as in :data:`WHY_PARTS`), the verdict
    written beside it.

    Args:
        table: ``why_slow(...)``'s table (by task or by session).
        ax: the Axes (a new figure when omitted).
        verdicts: write each row's verdict at the end of its bar.
        legend: draw the legend of the parts drawn.

    Returns:
        The Axes.
    """
    ax = axes_for(ax, (10.0, 1.2 + 0.5 * max(len(table), 1)))
    title = "Why was it slow"
    if table.empty:
        return no_data(ax, title)
    y = np.arange(len(table), dtype=np.float64)
    drawn: list[Any] = []
    end = np.zeros(len(table))
    for key, label, color, left, width in _why_layout(table):
        if not (width > 0).any():
            continue
        bars = ax.barh(y, width, left=left, height=0.6, color=color, label=label,
                       gid=f"why:{key}", hatch="////" if key == "controller_queue" else None,
                       edgecolor="#94a3b8" if key == "controller_queue" else "none",
                       linewidth=0)
        drawn.append(bars)
        end = np.maximum(end, left + width)
    xmax = float(end.max()) if len(end) else 1.0
    if verdicts and "verdict" in table.columns:
        for yi, x, text in zip(y, end, table["verdict"].astype(str), strict=True):
            ax.text(x + xmax * 0.01, yi, text, va="center", fontsize="x-small",
                    color="#111827", gid="why:verdict")
    ax.set_xlim(0.0, xmax * (1.6 if verdicts else 1.05) if xmax > 0 else 1.0)
    ax.set_yticks(y)
    ax.set_yticklabels([_row_label(k) for k in table.index], fontsize="small")
    ax.set_ylim(len(table) - 0.5, -0.5)
    ax.set_xlabel("seconds")
    ax.set_title(title)
    if legend and drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="x-small",
                  frameon=False)
    return ax


def _row_label(key: object) -> str:
    if isinstance(key, tuple):
        return f"task {key[0]}/s{key[1]}"
    return f"task {key}"


def why_slow_figure(table: pd.DataFrame, *, width: float = 11.0) -> Figure:
    """A standalone ``Figure`` with :func:`plot_why_slow` (nothing to close)."""
    fig = Figure(figsize=(width, 1.4 + 0.45 * max(len(table), 1)), layout="constrained")
    plot_why_slow(table, ax=fig.add_subplot())
    return fig
