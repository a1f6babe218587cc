"""Latency histograms and scatter, throughput, concurrency, server load, dashboard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import analysis
from ..tracing import schema as S
from ._common import (
    F64,
    QUEUED_LINE_COLOR,
    RUNNING_COLOR,
    STATUS_COLORS,
    TOTAL_COLOR,
    axes_for,
    color_of_phase,
    floats,
    no_data,
)
from ._figure import new_figure
from ._timeline import plot_timeline


def _latency_columns(df: pd.DataFrame, phases: Sequence[str] | None,
                     include_total: bool) -> dict[str, tuple[str, F64]]:
    """metric label → (colour, values) from a spans or tasks frame."""
    out: dict[str, tuple[str, F64]] = {}
    names = list(phases) if phases is not None else analysis.phase_names(df)
    if analysis.is_spans(df):
        spans = analysis.require_columns(df, (S.PHASE,), "spans")
        dur = (floats(spans[S.DURATION]) if S.DURATION in spans.columns
               else floats(spans[S.END]) - floats(spans[S.START]))
        ph = spans[S.PHASE].astype("string").to_numpy()
        for name in names:
            out[name] = (color_of_phase(name), dur[ph == name])
        return out
    if S.QUEUE_S in df.columns and phases is None:
        out["queue"] = ("#94a3b8", floats(df[S.QUEUE_S]))
    for name in names:
        col = S.phase_column(name)
        if col in df.columns and np.any(floats(df[col]) > 0):  # skip phases never used
            out[name] = (color_of_phase(name), floats(df[col]))
    if include_total and S.TOTAL_S in df.columns:
        out["total"] = (TOTAL_COLOR, floats(df[S.TOTAL_S]))
    return out


_PCT_STYLES = (":", "--", "-.", (0, (1, 4)))


def plot_latency_hist(df: pd.DataFrame, *, phases: Sequence[str] | None = None,
                      include_total: bool = True, percentiles: Sequence[float] = (50, 90, 99),
                      bins: int = 50, log: bool = False, ax: Axes | None = None,
                      **style: Any) -> Axes:
    """Histograms of latency per phase (plus queue wait and total), with percentile lines.

    Args:
        df: a tasks frame (``queue_s``, ``<phase>_s``, ``total_s``) or a spans frame
            (``duration`` per ``phase``).
        phases: which phases (default: all found, registry order).
        include_total: also plot ``total_s`` (tasks frames).
        percentiles: vertical lines per metric (gid ``"p<q>:<metric>"``).
        bins: number of shared bins.
        log: log-scaled counts.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.hist``.

    Returns:
        The Axes.
    """
    ax = axes_for(ax)
    title = "Latency distribution"
    cols = {k: (c, v[np.isfinite(v)]) for k, (c, v) in
            _latency_columns(df, phases, include_total).items()}
    cols = {k: cv for k, cv in cols.items() if cv[1].size}
    if not cols:
        return no_data(ax, title, "no data (no latency columns with values)")
    edges = np.histogram_bin_edges(np.concatenate([v for _, v in cols.values()]), bins=bins)
    for name, (color, v) in cols.items():
        qs = np.percentile(v, percentiles)
        label = f"{name} (p50 {np.percentile(v, 50):.3g}s, n={v.size})"
        ax.hist(v, bins=edges.tolist(), histtype="step", color=color, label=label, linewidth=1.5,
                log=log, **style)
        for q, x, ls in zip(percentiles, qs, _PCT_STYLES, strict=False):
            ax.axvline(float(x), color=color, linestyle=ls, linewidth=1, gid=f"p{q:g}:{name}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("count")
    pcts = ", ".join(f"p{q:g} {ls if isinstance(ls, str) else '..'}"
                     for q, ls in zip(percentiles, _PCT_STYLES, strict=False))
    ax.set_title(f"{title} (lines: {pcts})")
    ax.legend(fontsize="small")
    return ax


def plot_latency_scatter(tasks: pd.DataFrame, *, percentiles: Sequence[float] = (50, 95),
                         ax: Axes | None = None, **style: Any) -> Axes:
    """Finish time vs total latency per task, coloured by status, outliers marked.

    Horizontal lines show the percentiles of ``total_s`` (gid ``"p<q>"``); tasks above the
    highest percentile are circled with a diamond (gid ``"outliers"``).

    Args:
        tasks: the tasks frame (``submit_ts``, ``end_ts``; ``total_s``, ``status``).
        percentiles: latency percentiles drawn as lines.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.scatter``.

    Returns:
        The Axes.
    """
    tasks = analysis.require_columns(tasks, (S.SUBMIT_TS, S.END_TS), "tasks")
    ax = axes_for(ax)
    title = "Latency vs finish time"
    submit, end = floats(tasks[S.SUBMIT_TS]), floats(tasks[S.END_TS])
    total = floats(tasks[S.TOTAL_S]) if S.TOTAL_S in tasks.columns else end - submit
    ok = np.isfinite(end) & np.isfinite(total)
    if not ok.any():
        return no_data(ax, title, "no finished tasks")
    x = end - float(np.nanmin(submit))
    status = (tasks[S.STATUS].astype("string").fillna("?").to_numpy()
              if S.STATUS in tasks.columns else np.full(len(tasks), "?"))
    kw = {"s": 12, "alpha": 0.8, **style}
    for st in [*STATUS_COLORS, *sorted(set(status[ok].tolist()) - set(STATUS_COLORS))]:
        m = ok & (status == st)
        if m.any():
            ax.scatter(x[m], total[m], color=STATUS_COLORS.get(st, "#444444"),
                       label=f"{st} ({int(m.sum())})", gid=f"status:{st}", **kw)
    qs = np.percentile(total[ok], percentiles)
    for q, y, ls in zip(percentiles, qs, _PCT_STYLES, strict=False):
        ax.axhline(float(y), color="#374151", linestyle=ls, linewidth=1, gid=f"p{q:g}",
                   label=f"p{q:g} = {y:.3g}s")
    out = ok & (total > qs[-1])
    if out.any():
        ax.scatter(x[out], total[out], marker="D", facecolors="none", edgecolors="#dc2626",
                   s=40, linewidths=1, gid="outliers", label=f"> p{percentiles[-1]:g}")
    ax.set_xlabel("finish time (seconds since first submit)")
    ax.set_ylabel("total latency (s)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


# -- over time -------------------------------------------------------------------------

_NICE_STEPS = (1.0, 2.0, 5.0)
FINISHED_COLOR = "#374151"


def throughput_window(tasks: pd.DataFrame, *, windows: int = 50,
                      min_window: float = 0.005) -> float:
    """A throughput window for this run: its length / ``windows``, rounded down to 1, 2 or
    5 × 10^k seconds, and at least ``min_window``.

    The run's length is first submit → last end (``min_window`` when nothing finished), so
    a 0.5 s run gets 10 ms windows and a one-hour run 50 s ones.

    Args:
        tasks: the tasks frame (``submit_ts``, ``end_ts``).
        windows: about how many windows the run should span.
        min_window: the smallest window, in seconds.

    Returns:
        The window width in seconds.
    """
    length = 0.0
    if S.SUBMIT_TS in tasks.columns and S.END_TS in tasks.columns:
        submit, end = floats(tasks[S.SUBMIT_TS]), floats(tasks[S.END_TS])
        if np.isfinite(submit).any() and np.isfinite(end).any():
            length = float(np.nanmax(end) - np.nanmin(submit))
    raw = length / max(windows, 1)
    if not raw > min_window:
        return min_window
    exp = 10.0 ** np.floor(np.log10(raw))
    nice = max(step * exp for step in _NICE_STEPS if step * exp <= raw * (1 + 1e-9))
    return float(max(nice, min_window))


def _seconds_label(window: float) -> str:
    return f"{window * 1000:g} ms" if window < 1 else f"{window:g} s"


def plot_throughput(tasks: pd.DataFrame, *, window: float | None = None, tokens: bool = False,
                    ax: Axes | None = None, **style: Any) -> Axes:
    """Finished (and accepted) tasks per second — or tokens per second — over time.

    Each window is drawn as a flat step over its whole width (the last one included), so
    a run shorter than one window still shows its bar.

    Args:
        tasks: the tasks frame.
        window: window width in seconds (see :func:`rollout_kit.analysis.throughput`);
            default: from the run's length (:func:`throughput_window`).
        tokens: plot completion tokens per second instead of tasks.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.step``.

    Returns:
        The Axes.
    """
    if window is None:
        window = throughput_window(tasks)
    thr = analysis.throughput(tasks, window)
    ax = axes_for(ax)
    title = "Throughput"
    if thr.empty or (tokens and thr["completion_tokens_per_s"].isna().all()):
        return no_data(ax, title, "no finished tasks" if thr.empty else "no token counts")
    start = thr.index.to_numpy(dtype=np.float64)
    x = np.append(start, start[-1] + window)  # right edge of the last window

    def steps(col: pd.Series[Any]) -> F64:
        v = col.to_numpy(dtype=np.float64, na_value=np.nan)
        return np.append(v, v[-1])

    if tokens:
        ax.step(x, steps(thr["completion_tokens_per_s"]), where="post",
                label="completion tokens/s", gid="tokens_per_s", **style)
        ax.set_ylabel("tokens / s")
    else:
        # finished: dark grey; accepted: dashed status blue on top (often the same values)
        ax.step(x, steps(thr["tasks_per_s"]), where="post", label="finished/s",
                gid="tasks_per_s", **{"color": FINISHED_COLOR, **style})
        ax.step(x, steps(thr["accepted"] / window), where="post", label="accepted/s",
                gid="accepted_per_s", color=STATUS_COLORS["accepted"], linestyle="--")
        ax.set_ylabel("tasks / s")
    ax.set_xlim(min(float(x[0]), 0.0), float(x[-1]))
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(f"seconds since first submit ({_seconds_label(window)} windows)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def plot_concurrency(spans_or_tasks: pd.DataFrame, *, by_phase: bool = False,
                     ax: Axes | None = None, **style: Any) -> Axes:
    """In-flight count over time: running and queued tasks, or spans (per phase).

    Args:
        spans_or_tasks: a tasks frame (lines ``running`` and ``queued``) or a spans frame
            (line ``in flight``; one line per phase with ``by_phase``).
        by_phase: for spans, one line per phase in its registry colour.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.step``.

    Returns:
        The Axes; each line's gid is ``"concurrency:<name>"``.
    """
    ax = axes_for(ax)
    title = "Concurrency"
    df = spans_or_tasks
    lines: list[tuple[str, str | None, pd.DataFrame]] = []
    if analysis.is_spans(df):
        t0 = float(np.nanmin(floats(df[S.START]))) if len(df) else 0.0
        if by_phase:
            lines = [(p, color_of_phase(p), analysis.concurrency(df, phase=p, t0=t0))
                     for p in analysis.phase_names(df)]
        else:
            lines = [("in flight", None, analysis.concurrency(df))]
    else:
        lines = [("running", RUNNING_COLOR, analysis.concurrency(df, kind="running"))]
        if S.DISPATCH_TS in df.columns:
            lines.append(("queued", QUEUED_LINE_COLOR, analysis.concurrency(df, kind="queued")))
    lines = [(n, c, d) for n, c, d in lines if not d.empty]
    if not lines:
        return no_data(ax, title)
    for name, color, data in lines:
        kw: dict[str, Any] = {"color": color} if color else {}
        if name == "queued":
            kw["linestyle"] = "--"
        ax.step(data["time"], data["in_flight"], where="post", label=name,
                gid=f"concurrency:{name}", **kw, **style)
    ax.set_xlabel("seconds since first submit" if not analysis.is_spans(df)
                  else "seconds since first span")
    ax.set_ylabel("in flight")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


# -- per server ------------------------------------------------------------------------

def plot_server_load(sessions_or_spans: pd.DataFrame, *, ax: Axes | None = None,
                     **style: Any) -> Axes:
    """Per-server load: busy seconds per phase (spans) or sessions and p50 latency (sessions).

    Args:
        sessions_or_spans: a spans frame (stacked bars of seconds per phase per server) or
            a sessions frame (bars of sessions per server, labelled with p50 ``total_s``).
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.barh``.

    Returns:
        The Axes; a "no data" plot when there is no ``server`` column or no rows.
    """
    ax = axes_for(ax)
    title = "Server load"
    df = sessions_or_spans
    if S.SERVER not in df.columns or df[S.SERVER].notna().sum() == 0:
        return no_data(ax, title, "no data (no server column)")
    if analysis.is_spans(df):
        dur = (floats(df[S.DURATION]) if S.DURATION in df.columns
               else floats(df[S.END]) - floats(df[S.START]))
        table = (pd.DataFrame({"server": df[S.SERVER].astype("string").to_numpy(),
                               "phase": df[S.PHASE].astype("string").to_numpy(), "d": dur})
                 .dropna(subset=["server"])
                 .pivot_table(index="server", columns="phase", values="d", aggfunc="sum",
                              fill_value=0.0))
        servers = [str(s) for s in table.index]
        left = np.zeros(len(servers))
        for phase in [p for p in analysis.phase_names(df) if p in table.columns]:
            w = table[phase].to_numpy(dtype=np.float64)
            ax.barh(servers, w, left=left, color=color_of_phase(phase), label=phase,
                    gid=f"server:{phase}", **style)
            left += w
        ax.set_xlabel("busy seconds (sum of span durations)")
        ax.legend(fontsize="small")
    else:
        table = analysis.by_server(df)
        servers = [str(s) for s in table.index]
        counts = table["sessions"].to_numpy()
        bars = ax.barh(servers, counts, color="#60a5fa", gid="server:sessions", **style)
        ax.bar_label(bars, labels=[f"p50 {v:.3g}s" for v in table["p50"]], fontsize="small",
                     padding=3)
        # room right of the longest bar for its label, which bar_label does not make
        ax.set_xlim(0.0, float(counts.max()) * 1.3 if len(counts) and counts.max() > 0
                    else 1.0)
        ax.set_xlabel("sessions")
    ax.invert_yaxis()
    ax.set_title(title)
    return ax


# -- files -----------------------------------------------------------------------------

def save_plot(plot: Callable[..., Axes | Figure], path: str | PathLike[str], *args: Any,
              figsize: tuple[float, float] = (10.0, 5.0), dpi: int = 100,
              **kwargs: Any) -> None:
    """Draw ``plot(*args, ax=<new Axes>, **kwargs)`` on a standalone Figure and save it.

    No pyplot state is touched, so this is safe in loops and scripts. ``plot`` may also be
    :func:`dashboard` (it is then called with ``pyplot=False`` and saved as is).

    Args:
        plot: a ``plot_*`` function of this module, or :func:`dashboard`.
        path: the image file (format from its suffix).
        *args: positional arguments of ``plot``.
        figsize: figure size in inches (ignored for the dashboard).
        dpi: resolution.
        **kwargs: keyword arguments of ``plot``.
    """
    if plot is dashboard:
        fig = dashboard(*args, pyplot=False, **kwargs)
    else:
        fig = Figure(figsize=figsize, layout="constrained")
        plot(*args, ax=fig.add_subplot(), **kwargs)
    fig.savefig(path, dpi=dpi)


# -- dashboard -------------------------------------------------------------------------

def dashboard(tasks: pd.DataFrame, spans: pd.DataFrame | None = None,
              sessions: pd.DataFrame | None = None, *, window: float | None = None,
              figsize: tuple[float, float] = (15.0, 9.0), pyplot: bool = True) -> Figure:
    """One figure with the timeline, latency histogram, latency scatter and a fourth view.

    The fourth view is the per-server load when ``sessions`` (or spans) carry servers, else
    throughput.

    Args:
        tasks: the tasks frame.
        spans: the spans frame (timeline segments per phase); tasks-only when omitted.
        sessions: the sessions frame (server load).
        window: throughput window in seconds (default: from the run's length).
        figsize: figure size in inches.
        pyplot: create the figure through pyplot (shown inline in notebooks); ``False``
            makes a standalone ``Figure`` (for scripts that only save it).

    Returns:
        The Figure (2 × 2 Axes).
    """
    fig = new_figure(figsize, pyplot)
    a = fig.subplots(2, 2).ravel()
    plot_timeline(spans if spans is not None else tasks, tasks=tasks if spans is not None
                  else None, ax=a[0])
    plot_latency_hist(tasks, ax=a[1])
    plot_latency_scatter(tasks, ax=a[2])
    load = sessions if sessions is not None else spans
    if load is not None and S.SERVER in load.columns and load[S.SERVER].notna().any():
        plot_server_load(load, ax=a[3])
    else:
        plot_throughput(tasks, window=window, ax=a[3])
    return fig
