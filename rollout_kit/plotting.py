"""Matplotlib views of the trace DataFrames (the only rollout_kit module importing matplotlib).

Every ``plot_*`` function takes a DataFrame plus ``ax=None`` (a new figure when omitted),
draws, and returns the ``Axes``; nothing calls ``plt.show()``. Numbers come from
:mod:`rollout_kit.analysis`; colours and legend labels of phases come from the phase
registry, so a phase registered with ``register_phase(name, color)`` shows up with no code
change. Empty traces, traces with only failures and frames lacking optional columns give a
labelled "no data" plot instead of a traceback.

The timeline draws ONE collection per segment kind (idle, queued, each phase): a
``PathCollection`` holding a single compound path of all that kind's rectangles, vertices
built in numpy (5 per bar), so the artist count does not grow with the number of tasks and
100 000 tasks draw to PNG in well under a second. Each collection's ``gid`` is
``"timeline:<kind>"`` for programmatic access.

Usage::

    from rollout_kit import plotting
    ax = plotting.plot_timeline(traces.spans, tasks=traces.tasks)
    fig = plotting.dashboard(traces.tasks, traces.spans, traces.sessions)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any, Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.path import Path

from . import analysis
from .errors import ConfigError
from .tracing import schema as S
from .tracing.phases import PALETTE, phase_color, registered_phases

__all__ = [
    "IDLE_COLOR",
    "QUEUED_COLOR",
    "STATUS_COLORS",
    "color_of_phase",
    "dashboard",
    "plot_concurrency",
    "plot_latency_hist",
    "plot_latency_scatter",
    "plot_server_load",
    "plot_throughput",
    "plot_timeline",
    "save_plot",
]

QUEUED_COLOR = "#cbd5e1"
IDLE_COLOR = "#e5e7eb"
RUNNING_COLOR = "#64748b"
TOTAL_COLOR = "#6b21a8"
STATUS_COLORS = {"accepted": "#1f77b4", "rejected": "#d62728", "failed": "#9467bd",
                 "cancelled": "#ff7f0e", "pending": "#7f7f7f"}
_LABEL_ROWS = 50  # label rows one by one up to this many
_HATCH_ROWS = 200  # hatch the queued segments up to this many rows
_F64 = np.ndarray[Any, np.dtype[np.float64]]


def color_of_phase(phase: str) -> str:
    """The registry colour of ``phase``; an unregistered one gets a stable palette colour."""
    if phase in registered_phases():
        return phase_color(phase)
    return PALETTE[sum(map(ord, phase)) % len(PALETTE)]


def _axes(ax: Axes | None, figsize: tuple[float, float] = (8.0, 4.5)) -> Axes:
    if ax is not None:
        return ax
    _, new = plt.subplots(figsize=figsize)
    return new


def _no_data(ax: Axes, title: str, why: str = "no data") -> Axes:
    ax.set_title(title)
    ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center",
            color="#6b7280", fontsize=12, gid="no-data")
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def _floats(s: pd.Series[Any]) -> _F64:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _tasks_frame(tasks: pd.DataFrame) -> pd.DataFrame:
    tasks = analysis.require_columns(tasks, (S.SUBMIT_TS,), "tasks")
    if S.TASK_ID not in tasks.columns:
        tasks = tasks.rename_axis(S.TASK_ID).reset_index()
    return tasks


# -- timeline --------------------------------------------------------------------------

@dataclass
class _Rows:
    """Row layout of a timeline: key of each row and its y position."""

    task: np.ndarray[Any, np.dtype[np.int64]]  # task id per row
    key: pd.Index[Any]  # task id (by task) or (task, session) (by session)
    y: _F64  # y position per row


def _row_keys(spans: pd.DataFrame | None, tasks: pd.DataFrame | None, by: str) -> pd.Index[Any]:
    if by == "session":
        assert spans is not None
        return pd.MultiIndex.from_frame(_session_keys(spans).drop_duplicates())
    ids = tasks[S.TASK_ID] if tasks is not None else spans[S.TASK_ID]  # type: ignore[index]
    return pd.Index(pd.unique(ids.astype("int64")), dtype="int64")


def _session_keys(spans: pd.DataFrame) -> pd.DataFrame:
    """(task_id, session_id) as int64 columns; spans outside a session get session -1."""
    return pd.DataFrame({
        S.TASK_ID: spans[S.TASK_ID].to_numpy(dtype=np.int64),
        S.SESSION_ID: pd.to_numeric(spans[S.SESSION_ID], errors="coerce").fillna(-1)
        .to_numpy(dtype=np.int64)})


def _per_row(values: pd.Series[Any], rows_task: np.ndarray[Any, Any]) -> _F64:
    """Map a per-task Series (indexed by task id) to rows."""
    values = values[~values.index.duplicated()]
    return values.reindex(rows_task).to_numpy(dtype=np.float64, na_value=np.nan)


def _layout(spans: pd.DataFrame | None, tasks: pd.DataFrame | None, by: str,
            sort: str) -> _Rows:
    key = _row_keys(spans, tasks, by)
    task = (key.get_level_values(0) if isinstance(key, pd.MultiIndex) else key).to_numpy(
        dtype=np.int64)
    extent = None
    if spans is not None:
        rk = ([S.TASK_ID, S.SESSION_ID] if by == "session" else [S.TASK_ID])
        g = spans.groupby(rk, sort=False)
        lo, hi = g[S.START].min(), g[S.END].max()
        extent = (lo.reindex(key).to_numpy(dtype=np.float64, na_value=np.nan),
                  hi.reindex(key).to_numpy(dtype=np.float64, na_value=np.nan))
    tix = tasks.set_index(S.TASK_ID) if tasks is not None else None
    if sort == "duration":
        if tix is not None and S.TOTAL_S in tix.columns and by == "task":
            k = -_per_row(pd.Series(_floats(tix[S.TOTAL_S]), index=tix.index), task)
        else:
            assert extent is not None
            k = -(extent[1] - extent[0])
    else:
        col = S.SUBMIT_TS if sort == "submit" else S.DISPATCH_TS
        if tix is not None and col in tix.columns:
            k = _per_row(pd.Series(_floats(tix[col]), index=tix.index), task)
        else:
            k = extent[0] if extent is not None else np.zeros(len(task))
    second = (key.get_level_values(1).to_numpy(dtype=np.float64)
              if isinstance(key, pd.MultiIndex) else np.zeros(len(task)))
    order = np.lexsort((second, task, np.nan_to_num(k, nan=np.inf)))
    y = np.empty(len(task), dtype=np.float64)
    y[order] = np.arange(len(task), dtype=np.float64)
    return _Rows(task=task, key=key, y=y)


_RECT_CODES = np.array([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY],
                       dtype=Path.code_type)


def _rects_path(start: _F64, end: _F64, y: _F64, height: float) -> Path | None:
    """All rectangles ``[start, end] × [y - h/2, y + h/2]`` as ONE compound path.

    Each rectangle is 5 vertices (MOVETO, 3 × LINETO, CLOSEPOLY), built with numpy: no
    Python object per bar, which is what makes 100 000 tasks draw in well under a second.
    """
    ok = ~(np.isnan(start) | np.isnan(end) | np.isnan(y))
    if not ok.any():
        return None
    s, e, yy = start[ok], np.maximum(end[ok], start[ok]), y[ok]
    lo, hi = yy - height / 2, yy + height / 2
    verts = np.stack([np.column_stack(c) for c in ((s, lo), (s, hi), (e, hi), (e, lo), (s, lo))],
                     axis=1).reshape(-1, 2)
    return Path(verts, np.tile(_RECT_CODES, int(ok.sum())))


def _segments(spans: pd.DataFrame | None, tasks: pd.DataFrame | None, rows: _Rows,
              by: str, color_by: str
              ) -> list[tuple[str, str, _F64, _F64, _F64, dict[str, Any]]]:
    """(kind, colour, start, end, y, extra kwargs) of every segment kind, bottom first."""
    segs: list[tuple[str, str, _F64, _F64, _F64, dict[str, Any]]] = []
    n = len(rows.task)
    tix = tasks.drop_duplicates(S.TASK_ID).set_index(S.TASK_ID) if tasks is not None else None

    def task_col(col: str) -> _F64:
        assert tix is not None
        return _per_row(pd.Series(_floats(tix[col]), index=tix.index), rows.task)

    # idle: the row's whole active extent, underneath its phases
    if spans is not None:
        rk = [S.TASK_ID, S.SESSION_ID] if by == "session" else [S.TASK_ID]
        g = spans.groupby(rk, sort=False)
        lo = g[S.START].min().reindex(rows.key).to_numpy(dtype=np.float64, na_value=np.nan)
        hi = g[S.END].max().reindex(rows.key).to_numpy(dtype=np.float64, na_value=np.nan)
        if tix is not None and by == "task":
            for col, pick in ((S.DISPATCH_TS, np.fmin), (S.START_TS, np.fmin)):
                if col in tix.columns:
                    lo = pick(lo, task_col(col))
            if S.END_TS in tix.columns:
                hi = np.fmax(hi, task_col(S.END_TS))
        segs.append(("idle", IDLE_COLOR, lo, hi, rows.y, {}))
    if tix is not None and S.DISPATCH_TS in tix.columns:
        hatch = {"hatch": "////"} if n <= _HATCH_ROWS else {}
        segs.append(("queued", QUEUED_COLOR, task_col(S.SUBMIT_TS), task_col(S.DISPATCH_TS),
                     rows.y, hatch))
    if spans is None:  # tasks only: one "running" bar per task
        assert tix is not None
        begin = task_col(S.START_TS) if S.START_TS in tix.columns else task_col(S.DISPATCH_TS)
        end = task_col(S.END_TS)
        if color_by == "status" and S.STATUS in tix.columns:
            ser = tix[S.STATUS].astype("string")
            st = ser[~ser.index.duplicated()].reindex(rows.task).to_numpy()
            for status, color in STATUS_COLORS.items():
                m = st == status
                if m.any():
                    segs.append((status, color, begin[m], end[m], rows.y[m], {}))
        else:
            segs.append(("running", RUNNING_COLOR, begin, end, rows.y, {}))
        return segs
    rk = [S.TASK_ID, S.SESSION_ID] if by == "session" else [S.TASK_ID]
    target: pd.Index[Any] = (pd.MultiIndex.from_frame(_session_keys(spans))
                             if by == "session" else pd.Index(spans[S.TASK_ID].astype("int64")))
    pos = rows.key.get_indexer(target)
    y = np.where(pos >= 0, rows.y[pos], np.nan)  # spans of tasks not in ``tasks``: not drawn
    start, end = _floats(spans[S.START]), _floats(spans[S.END])
    if color_by == "phase":
        groups = spans[S.PHASE].astype("string").fillna("?").to_numpy()
        kinds = analysis.phase_names(spans)
        colors = {k: color_of_phase(k) for k in kinds}
    else:
        col = S.STATUS if color_by == "status" else S.SERVER
        analysis.require_columns(spans, (col,), "spans")
        groups = spans[col].astype("string").fillna("?").to_numpy()
        kinds = [k for k in STATUS_COLORS if k in set(groups)] if color_by == "status" else \
            sorted(set(groups.tolist()))
        kinds += sorted(set(groups.tolist()) - set(kinds))
        cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        colors = {k: STATUS_COLORS.get(k, cycle[i % len(cycle)]) if color_by == "status"
                  else cycle[i % len(cycle)] for i, k in enumerate(kinds)}
    for kind in kinds:
        m = groups == kind
        segs.append((kind, colors[kind], start[m], end[m], y[m], {}))
    return segs


def plot_timeline(spans_or_tasks: pd.DataFrame, *, tasks: pd.DataFrame | None = None,
                  by: Literal["task", "session"] = "task",
                  color_by: Literal["phase", "status", "server"] = "phase",
                  sort: Literal["submit", "dispatch", "duration"] = "submit",
                  ax: Axes | None = None, labels: bool | None = None, height: float = 0.8,
                  legend: bool = True, **style: Any) -> Axes:
    """The latency timeline: one row per task (or session), time on x.

    x is seconds since the first submit. Each row shows the queue wait (submit → dispatch,
    light grey, hatched when few rows), the idle background of the row's active time, and
    its phase spans in their registry colours (or coloured by status / server).

    Args:
        spans_or_tasks: a spans frame (one segment per phase span) or a tasks frame (queue
            wait and one running bar per task).
        tasks: the tasks frame, when ``spans_or_tasks`` is spans: adds queue waits, sorts by
            submit/dispatch and anchors x at the first submit.
        by: one row per ``"task"`` or per ``"session"`` (needs spans).
        color_by: colour spans by ``"phase"``, ``"status"`` or ``"server"``.
        sort: row order: by ``"submit"`` or ``"dispatch"`` time, or ``"duration"``
            (longest first).
        ax: the Axes to draw on (a new figure when omitted).
        labels: label each row (default: when there are at most 50 rows).
        height: bar height in row units.
        legend: draw the legend.
        **style: passed to the phase collections (``alpha``, ``edgecolor``…).

    Returns:
        The Axes.

    Raises:
        ConfigError: an unknown ``by`` / ``color_by`` / ``sort``.
        TraceSchemaError: a frame lacks required columns.
    """
    _check_choice("by", by, ("task", "session"))
    _check_choice("color_by", color_by, ("phase", "status", "server"))
    _check_choice("sort", sort, ("submit", "dispatch", "duration"))
    spans: pd.DataFrame | None = None
    if analysis.is_spans(spans_or_tasks):
        need = (S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END) if by == "session" else \
            (S.TASK_ID, S.PHASE, S.START, S.END)
        spans = analysis.require_columns(spans_or_tasks, need, "spans")
        spans = spans[spans[S.START].notna()]
        if by == "session":
            spans = spans.assign(**{S.SESSION_ID: _session_keys(spans)[S.SESSION_ID].to_numpy()})
    else:
        if by == "session":
            raise ConfigError("by='session' needs the spans frame")
        tasks = spans_or_tasks
    tasks = _tasks_frame(tasks) if tasks is not None else None
    ax = _axes(ax, (10.0, 5.0))
    title = "Latency timeline"
    if (spans is None or spans.empty) and (tasks is None or tasks.empty):
        return _no_data(ax, title)
    if spans is not None and spans.empty:
        spans = None
    rows = _layout(spans, tasks, by, sort)
    t0 = (float(np.nanmin(_floats(tasks[S.SUBMIT_TS]))) if tasks is not None and
          tasks[S.SUBMIT_TS].notna().any() else float(np.nanmin(_floats(spans[S.START]))))  # type: ignore[index]
    handles: list[Patch] = []
    xmax = 0.0
    for kind, color, start, end, y, extra in _segments(spans, tasks, rows, by, color_by):
        path = _rects_path(start - t0, end - t0, y, height)
        if path is None:
            continue
        base = kind in ("idle", "queued")
        kw: dict[str, Any] = {"linewidths": 0, "antialiased": len(y) < 20_000, **extra}
        if base:
            kw["edgecolors"] = "#94a3b8" if "hatch" in extra else "none"
        else:
            kw.update({"edgecolors": "none", **style})
        pc = PathCollection([path], facecolors=color, label=kind, zorder=1 if base else 2,
                            gid=f"timeline:{kind}", **kw)
        ax.add_collection(pc, autolim=False)
        xmax = max(xmax, float(np.nanmax(np.fmax(start, end))) - t0)
        handles.append(Patch(facecolor=color, label=kind, hatch=extra.get("hatch")))
    if not handles:
        return _no_data(ax, title, "no data (no task was dispatched or started)")
    n = len(rows.task)
    ax.set_xlim(0.0, xmax * 1.01 if xmax > 0 else 1.0)
    ax.set_ylim(n - 0.5, -0.5)
    show = labels if labels is not None else n <= _LABEL_ROWS
    unit = "sessions" if by == "session" else "tasks"
    if show:
        order = np.argsort(rows.y)
        ax.set_yticks(rows.y[order])
        ax.set_yticklabels([_row_label(k) for k in rows.key[order]], fontsize="small")
    else:
        ax.set_yticks([])
    ax.set_ylabel(f"{n} {unit} (sorted by {sort})")
    ax.set_xlabel("seconds since first submit")
    ax.set_title(f"{title} ({n} {unit})")
    if legend and handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  fontsize="small", frameon=False)
    return ax


def _row_label(key: object) -> str:
    if isinstance(key, tuple):
        return f"task {key[0]}/s{key[1]}"
    return f"task {key}"


def _check_choice(name: str, value: object, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}")


# -- distributions ---------------------------------------------------------------------

def _latency_columns(df: pd.DataFrame, phases: Sequence[str] | None,
                     include_total: bool) -> dict[str, tuple[str, _F64]]:
    """metric label → (colour, values) from a spans or tasks frame."""
    out: dict[str, tuple[str, _F64]] = {}
    names = list(phases) if phases is not None else analysis.phase_names(df)
    if analysis.is_spans(df):
        spans = analysis.require_columns(df, (S.PHASE,), "spans")
        dur = (_floats(spans[S.DURATION]) if S.DURATION in spans.columns
               else _floats(spans[S.END]) - _floats(spans[S.START]))
        ph = spans[S.PHASE].astype("string").to_numpy()
        for name in names:
            out[name] = (color_of_phase(name), dur[ph == name])
        return out
    if S.QUEUE_S in df.columns and phases is None:
        out["queue"] = ("#94a3b8", _floats(df[S.QUEUE_S]))
    for name in names:
        col = S.phase_column(name)
        if col in df.columns and np.any(_floats(df[col]) > 0):  # skip phases never used
            out[name] = (color_of_phase(name), _floats(df[col]))
    if include_total and S.TOTAL_S in df.columns:
        out["total"] = (TOTAL_COLOR, _floats(df[S.TOTAL_S]))
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
    ax = _axes(ax)
    title = "Latency distribution"
    cols = {k: (c, v[np.isfinite(v)]) for k, (c, v) in
            _latency_columns(df, phases, include_total).items()}
    cols = {k: cv for k, cv in cols.items() if cv[1].size}
    if not cols:
        return _no_data(ax, title, "no data (no latency columns with values)")
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
    ax = _axes(ax)
    title = "Latency vs finish time"
    submit, end = _floats(tasks[S.SUBMIT_TS]), _floats(tasks[S.END_TS])
    total = _floats(tasks[S.TOTAL_S]) if S.TOTAL_S in tasks.columns else end - submit
    ok = np.isfinite(end) & np.isfinite(total)
    if not ok.any():
        return _no_data(ax, title, "no finished tasks")
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

def plot_throughput(tasks: pd.DataFrame, *, window: float = 1.0, tokens: bool = False,
                    ax: Axes | None = None, **style: Any) -> Axes:
    """Finished (and accepted) tasks per second — or tokens per second — over time.

    Args:
        tasks: the tasks frame.
        window: window width in seconds (see :func:`rollout_kit.analysis.throughput`).
        tokens: plot completion tokens per second instead of tasks.
        ax: the Axes (a new figure when omitted).
        **style: passed to ``Axes.step``.

    Returns:
        The Axes.
    """
    thr = analysis.throughput(tasks, window)
    ax = _axes(ax)
    title = "Throughput"
    if thr.empty or (tokens and thr["completion_tokens_per_s"].isna().all()):
        return _no_data(ax, title, "no finished tasks" if thr.empty else "no token counts")
    x = thr.index.to_numpy(dtype=np.float64)
    if tokens:
        ax.step(x, thr["completion_tokens_per_s"], where="post", label="completion tokens/s",
                gid="tokens_per_s", **style)
        ax.set_ylabel("tokens / s")
    else:
        ax.step(x, thr["tasks_per_s"], where="post", label="finished/s", gid="tasks_per_s",
                **style)
        ax.step(x, thr["accepted"] / window, where="post", label="accepted/s",
                gid="accepted_per_s", color=STATUS_COLORS["accepted"], alpha=0.6)
        ax.set_ylabel("tasks / s")
    ax.set_xlabel(f"seconds since first submit ({window:g}s windows)")
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
    ax = _axes(ax)
    title = "Concurrency"
    df = spans_or_tasks
    lines: list[tuple[str, str | None, pd.DataFrame]] = []
    if analysis.is_spans(df):
        t0 = float(np.nanmin(_floats(df[S.START]))) if len(df) else 0.0
        if by_phase:
            lines = [(p, color_of_phase(p), analysis.concurrency(df, phase=p, t0=t0))
                     for p in analysis.phase_names(df)]
        else:
            lines = [("in flight", None, analysis.concurrency(df))]
    else:
        lines = [("running", RUNNING_COLOR, analysis.concurrency(df, kind="running"))]
        if S.DISPATCH_TS in df.columns:
            lines.append(("queued", "#94a3b8", analysis.concurrency(df, kind="queued")))
    lines = [(n, c, d) for n, c, d in lines if not d.empty]
    if not lines:
        return _no_data(ax, title)
    for name, color, data in lines:
        kw: dict[str, Any] = {"color": color} if color else {}
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
    ax = _axes(ax)
    title = "Server load"
    df = sessions_or_spans
    if S.SERVER not in df.columns or df[S.SERVER].notna().sum() == 0:
        return _no_data(ax, title, "no data (no server column)")
    if analysis.is_spans(df):
        dur = (_floats(df[S.DURATION]) if S.DURATION in df.columns
               else _floats(df[S.END]) - _floats(df[S.START]))
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
        bars = ax.barh(servers, table["sessions"].to_numpy(), color="#60a5fa",
                       gid="server:sessions", **style)
        ax.bar_label(bars, labels=[f"p50 {v:.3g}s" for v in table["p50"]], fontsize="small",
                     padding=3)
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
              sessions: pd.DataFrame | None = None, *, window: float = 1.0,
              figsize: tuple[float, float] = (15.0, 9.0), pyplot: bool = True) -> Figure:
    """One figure with the timeline, latency histogram, latency scatter and a fourth view.

    The fourth view is the per-server load when ``sessions`` (or spans) carry servers, else
    throughput.

    Args:
        tasks: the tasks frame.
        spans: the spans frame (timeline segments per phase); tasks-only when omitted.
        sessions: the sessions frame (server load).
        window: throughput window in seconds.
        figsize: figure size in inches.
        pyplot: create the figure through pyplot (shown inline in notebooks); ``False``
            makes a standalone ``Figure`` (for scripts that only save it).

    Returns:
        The Figure (2 × 2 Axes).
    """
    fig = (plt.figure(figsize=figsize, layout="constrained") if pyplot
           else Figure(figsize=figsize, layout="constrained"))
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
