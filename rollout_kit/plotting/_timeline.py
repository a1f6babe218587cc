"""``plot_timeline``: the latency timeline, one collection per segment kind."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.path import Path

from .. import analysis
from .._errors import ConfigError
from ..tracing import schema as S
from ._common import (
    _HATCH_ROWS,
    _LABEL_ROWS,
    F64,
    IDLE_COLOR,
    MARKED_STATUSES,
    QUEUED_COLOR,
    RUNNING_COLOR,
    STATUS_COLORS,
    axes_for,
    check_choice,
    color_of_phase,
    floats,
    no_data,
    tasks_frame,
)
from ._server import DEFAULT_LANES, attach_lanes


@dataclass
class _Rows:
    """Row layout of a timeline: key, y position, task status and extent of each row.

    ``status`` and the extent ``lo``/``hi`` (first submit or span start → last end, in
    trace seconds) are what the status marks are drawn from: rows whose task ended
    ``failed`` / ``rejected`` / ``cancelled`` (see :attr:`marked`) get an outline (or, with
    many rows, a fill) in the status colour over ``[lo, hi]``.
    """

    task: np.ndarray[Any, np.dtype[np.int64]]  # task id per row
    key: pd.Index[Any]  # task id (by task) or (task, session) (by session)
    y: F64  # y position per row
    status: np.ndarray[Any, np.dtype[np.object_]]  # task status per row ("" when unknown)
    lo: F64  # row extent start (NaN when unknown)
    hi: F64  # row extent end (NaN when the task never ended)

    @property
    def marked(self) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Rows to mark: a non-accepted final status and a known extent."""
        return (np.isin(self.status, MARKED_STATUSES) & np.isfinite(self.lo)
                & np.isfinite(self.hi))


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


def _per_row(values: pd.Series[Any], rows_task: np.ndarray[Any, Any]) -> F64:
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
        extent = (g[S.START].min().reindex(key).to_numpy(dtype=np.float64, na_value=np.nan),
                  g[S.END].max().reindex(key).to_numpy(dtype=np.float64, na_value=np.nan))
    tix = tasks.set_index(S.TASK_ID) if tasks is not None else None
    if sort == "duration":
        if tix is not None and S.TOTAL_S in tix.columns and by == "task":
            k = -_per_row(pd.Series(floats(tix[S.TOTAL_S]), index=tix.index), task)
        else:
            assert extent is not None
            k = -(extent[1] - extent[0])
    else:
        col = S.SUBMIT_TS if sort == "submit" else S.DISPATCH_TS
        if tix is not None and col in tix.columns:
            k = _per_row(pd.Series(floats(tix[col]), index=tix.index), task)
        else:
            k = extent[0] if extent is not None else np.zeros(len(task))
    second = (key.get_level_values(1).to_numpy(dtype=np.float64)
              if isinstance(key, pd.MultiIndex) else np.zeros(len(task)))
    order = np.lexsort((second, task, np.nan_to_num(k, nan=np.inf)))
    y = np.empty(len(task), dtype=np.float64)
    y[order] = np.arange(len(task), dtype=np.float64)
    status = np.full(len(task), "", dtype=object)
    nan = np.full(len(task), np.nan)
    lo, hi = extent if extent is not None else (nan, nan)
    if tix is not None:
        def task_col(name: str) -> F64:
            if name not in tix.columns:
                return nan
            return _per_row(pd.Series(floats(tix[name]), index=tix.index), task)

        if S.STATUS in tix.columns:
            st = tix[S.STATUS].astype("string")
            status = (st[~st.index.duplicated()].reindex(task).fillna("")
                      .to_numpy(dtype=object))
        for name in (S.SUBMIT_TS, S.DISPATCH_TS, S.START_TS):  # queue wait included
            lo = np.fmin(lo, task_col(name))
        if by == "task":  # a session row ends with its own spans
            hi = np.fmax(hi, task_col(S.END_TS))
    return _Rows(task=task, key=key, y=y, status=status, lo=lo, hi=hi)


_RECT_CODES = np.array([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY],
                       dtype=Path.code_type)


def _rects_path(start: F64, end: F64, y: F64, height: float) -> Path | None:
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
              ) -> list[tuple[str, str, F64, F64, F64, dict[str, Any]]]:
    """(kind, colour, start, end, y, extra kwargs) of every segment kind, bottom first."""
    segs: list[tuple[str, str, F64, F64, F64, dict[str, Any]]] = []
    n = len(rows.task)
    tix = tasks.drop_duplicates(S.TASK_ID).set_index(S.TASK_ID) if tasks is not None else None

    def task_col(col: str) -> F64:
        assert tix is not None
        return _per_row(pd.Series(floats(tix[col]), index=tix.index), rows.task)

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
    start, end = floats(spans[S.START]), floats(spans[S.END])
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


#: the server's own segments of a request (``server_spans=``), drawn inside the rows
SERVER_SEGMENTS = (("server queue", "queue_s", "#94a3b8"),
                   ("server prefill", "prefill_s", "#f97316"),
                   ("server decode", "decode_s", "#4f46e5"))


def _server_segments(server_spans: pd.DataFrame, rows: _Rows, by: str
                     ) -> list[tuple[str, str, F64, F64, F64]]:
    """(kind, colour, start, end, y) of the server's queue / prefill / decode per request.

    Each joined server span (``rollout_kit.otel.join_server_spans(...).spans``) starts at its
    ``start_ts`` (the request's arrival at the server, trace clock) and runs its
    ``queue_s``, ``prefill_s`` and ``decode_s`` back to back, on its session's (or task's)
    row; missing values draw nothing.
    """
    need = (S.TASK_ID, S.SESSION_ID, "start_ts", *(col for _, col, _ in SERVER_SEGMENTS))
    df = analysis.require_columns(server_spans, need, "server spans")
    target: pd.Index[Any] = (pd.MultiIndex.from_frame(_session_keys(df)) if by == "session"
                             else pd.Index(df[S.TASK_ID].astype("int64")))
    pos = rows.key.get_indexer(target)
    y = np.where(pos >= 0, rows.y[pos], np.nan)
    t = floats(df["start_ts"])
    out: list[tuple[str, str, F64, F64, F64]] = []
    for kind, col, color in SERVER_SEGMENTS:
        end = t + floats(df[col])
        out.append((kind, color, t, end, y))
        t = np.where(np.isfinite(end), end, t)
    return out


def _conversation_lanes(df: pd.DataFrame, sessions: pd.DataFrame | None) -> pd.DataFrame:
    """``df`` (spans or server spans) with ``session_id`` replaced by the conversation its
    session belongs to (the sessions' ``conversation`` column, -1 for a session of none), so
    that the session layout draws one lane per agent conversation: generate → tool → …"""
    if sessions is None:
        raise ConfigError("by='conversation' needs sessions= (the sessions frame, with the "
                          "'conversation' column of an agent rollout)")
    sess = analysis.require_columns(sessions, (S.TASK_ID, S.SESSION_ID, "conversation"),
                                    "sessions")
    conv = pd.Series(pd.to_numeric(sess["conversation"], errors="coerce").to_numpy(),
                     index=pd.MultiIndex.from_frame(_session_keys(sess)))
    conv = conv[~conv.index.duplicated()]
    df = analysis.require_columns(df, (S.TASK_ID, S.SESSION_ID), "spans")
    lane = conv.reindex(pd.MultiIndex.from_frame(_session_keys(df))).fillna(-1)
    return df.assign(**{S.SESSION_ID: lane.to_numpy(dtype=np.int64)})


def plot_timeline(spans_or_tasks: pd.DataFrame, *, tasks: pd.DataFrame | None = None,
                  by: Literal["task", "session", "conversation"] = "task",
                  color_by: Literal["phase", "status", "server"] = "phase",
                  sort: Literal["submit", "dispatch", "duration"] = "submit",
                  ax: Axes | None = None, labels: bool | None = None, height: float = 0.8,
                  legend: bool = True, mark_status: bool = True,
                  server_spans: pd.DataFrame | None = None,
                  sessions: pd.DataFrame | None = None,
                  server_metrics: pd.DataFrame | None = None,
                  lanes: Sequence[str] = DEFAULT_LANES, **style: Any) -> Axes:
    """The latency timeline: one row per task (or session, or agent conversation), time on x.

    x is seconds since the first submit. Each row shows the queue wait (submit → dispatch,
    light grey, hatched when few rows), the idle background of the row's active time, and
    its phase spans in their registry colours (or coloured by status / server). Rows of
    tasks that ended ``failed``, ``rejected`` or ``cancelled`` (the ``status`` of ``tasks``)
    are outlined in their status colour from submit to end (filled instead when there are
    more than 200 rows, too thin for an outline), and the legend counts them.

    Args:
        spans_or_tasks: a spans frame (one segment per phase span) or a tasks frame (queue
            wait and one running bar per task).
        tasks: the tasks frame, when ``spans_or_tasks`` is spans: adds queue waits, sorts by
            submit/dispatch and anchors x at the first submit.
        by: one row per ``"task"``, per ``"session"`` (needs spans) or per agent
            ``"conversation"`` (needs spans and ``sessions``): a conversation's turns, the
            tools between them (``tool.<name>`` phases) and its reward on one lane.
        color_by: colour spans by ``"phase"``, ``"status"`` or ``"server"``.
        sort: row order: by ``"submit"`` or ``"dispatch"`` time, or ``"duration"``
            (longest first).
        ax: the Axes to draw on (a new figure when omitted).
        labels: label each row (default: when there are at most 50 rows).
        height: bar height in row units.
        legend: draw the legend.
        mark_status: mark the rows of non-accepted tasks (needs ``status`` in the tasks
            frame); each status is one collection with gid ``"timeline:mark:<status>"``.
        server_spans: the server's own spans joined to the sessions
            (``rollout_kit.otel.join_server_spans(...).spans``, or
            ``rollout_kit.analysis.server_segments(sessions)`` of an SGLang run): its queue,
            prefill and decode of each request drawn as thin bars inside the row (gids
            ``"timeline:server queue"`` …).
        sessions: the sessions frame, for ``by="conversation"`` (its ``conversation``
            column places each session's spans on its conversation's lane).
        server_metrics: the server metrics frame (``Traces.server_metrics``,
            ``RolloutController.server_metrics()``): small lanes of the servers' state
            drawn under the timeline on the same x axis (``sharex``), one line per server
            (:func:`~rollout_kit.plotting._server.attach_lanes`; ``ax`` must come from
            ``add_subplot`` / ``subplots``). An empty frame draws no lanes.
        lanes: the series of those lanes (``rollout_kit.analysis.server_series`` names),
            top to bottom.
        **style: passed to the phase collections (``alpha``, ``edgecolor``…).

    Returns:
        The Axes.

    Raises:
        ConfigError: an unknown ``by`` / ``color_by`` / ``sort`` / lane;
            ``by="conversation"`` without ``sessions``.
        TraceSchemaError: a frame lacks required columns.
    """
    check_choice("by", by, ("task", "session", "conversation"))
    lane = "conversation" if by == "conversation" else "session"
    if by == "conversation" and analysis.is_spans(spans_or_tasks):
        spans_or_tasks = _conversation_lanes(spans_or_tasks, sessions)
        if server_spans is not None:
            server_spans = _conversation_lanes(server_spans, sessions)
        by = "session"
    check_choice("color_by", color_by, ("phase", "status", "server"))
    check_choice("sort", sort, ("submit", "dispatch", "duration"))
    spans: pd.DataFrame | None = None
    if analysis.is_spans(spans_or_tasks):
        need = (S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END) if by == "session" else \
            (S.TASK_ID, S.PHASE, S.START, S.END)
        spans = analysis.require_columns(spans_or_tasks, need, "spans")
        spans = spans[spans[S.START].notna()]
        if by == "session":
            spans = spans.assign(**{S.SESSION_ID: _session_keys(spans)[S.SESSION_ID].to_numpy()})
    else:
        if by != "task":
            raise ConfigError(f"by={by!r} needs the spans frame")
        tasks = spans_or_tasks
    tasks = tasks_frame(tasks) if tasks is not None else None
    ax = axes_for(ax, (10.0, 5.0))
    title = "Latency timeline"
    if (spans is None or spans.empty) and (tasks is None or tasks.empty):
        return no_data(ax, title)
    if spans is not None and spans.empty:
        spans = None
    rows = _layout(spans, tasks, by, sort)
    t0 = (float(np.nanmin(floats(tasks[S.SUBMIT_TS]))) if tasks is not None and
          tasks[S.SUBMIT_TS].notna().any() else float(np.nanmin(floats(spans[S.START]))))  # type: ignore[index]
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
    if server_spans is not None and not server_spans.empty:
        for kind, color, start, end, y in _server_segments(server_spans, rows, by):
            path = _rects_path(start - t0, end - t0, y, height * 0.35)
            if path is None:
                continue
            ax.add_collection(PathCollection([path], facecolors=color, edgecolors="none",
                                             linewidths=0, zorder=3, gid=f"timeline:{kind}"),
                              autolim=False)
            xmax = max(xmax, float(np.nanmax(end)) - t0)
            handles.append(Patch(facecolor=color, label=kind))
    n = len(rows.task)
    unit = f"{lane}s" if by == "session" else "tasks"
    xmin, pad = 0.0, xmax * 0.004
    if mark_status and rows.marked.any():
        xmax = max(xmax, _draw_marks(ax, rows, t0, height, pad, unit, handles))
        xmin = -2 * pad if n <= _HATCH_ROWS else 0.0  # room for an outline starting at 0
    if not handles:
        return no_data(ax, title, "no data (no task was dispatched or started)")
    ax.set_xlim(xmin, xmax * 1.01 if xmax > 0 else 1.0)
    ax.set_ylim(n - 0.5, -0.5)
    show = labels if labels is not None else n <= _LABEL_ROWS
    if show:
        order = np.argsort(rows.y)
        ax.set_yticks(rows.y[order])
        ax.set_yticklabels([_row_label(k, lane) for k in rows.key[order]], fontsize="small")
    else:
        ax.set_yticks([])
    ax.set_ylabel(f"{n} {unit} (sorted by {sort})")
    ax.set_xlabel("seconds since first submit")
    ax.set_title(f"{title} ({n} {unit})")
    if legend and handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  fontsize="small", frameon=False)
    if server_metrics is not None and len(server_metrics) and lanes:
        attach_lanes(ax, server_metrics, lanes, t0=t0)
    return ax


def _draw_marks(ax: Axes, rows: _Rows, t0: float, height: float, pad: float, unit: str,
                handles: list[Patch]) -> float:
    """Outline (or, past 200 rows, fill) the marked rows, one collection per status.

    An outline runs ``pad`` (x) and a little (y) outside the row's bars, so that it stays
    visible next to a bar of a similar colour. Returns the largest x drawn (0 when nothing
    was marked)."""
    marked = rows.marked
    dense = len(rows.task) > _HATCH_ROWS  # rows too thin for an outline: fill them
    if dense:
        pad = 0.0
    xmax = 0.0
    for status in MARKED_STATUSES:
        m = marked & (rows.status == status)
        if not m.any():
            continue
        color = STATUS_COLORS[status]
        lo, hi = rows.lo[m] - t0 - pad, rows.hi[m] - t0 + pad
        path = _rects_path(lo, hi, rows.y[m], height if dense else min(height + 0.12, 1.0))
        if path is None:
            continue
        face = color if dense else "none"
        count = int(m.sum())
        label = f"{status} ({count} {unit if count > 1 else unit[:-1]})"
        ax.add_collection(PathCollection(
            [path], facecolors=face, edgecolors=color, linewidths=0 if dense else 1.5,
            antialiased=count < 20_000, zorder=3, label=label, gid=f"timeline:mark:{status}"),
            autolim=False)
        handles.append(Patch(facecolor=face, edgecolor=color, linewidth=1.5, label=label))
        xmax = max(xmax, float(np.nanmax(hi)))
    return xmax


def _row_label(key: object, lane: str = "session") -> str:
    if isinstance(key, tuple):
        return f"task {key[0]}/{lane[0]}{key[1]}"
    return f"task {key}"


def timeline_figure(spans_or_tasks: pd.DataFrame, *, tasks: pd.DataFrame | None = None,
                    width: float = 9.0, **kwargs: Any) -> Figure:
    """A standalone ``Figure`` with :func:`plot_timeline` (not registered with pyplot, so
    nothing needs closing): for widgets and files. ``kwargs`` go to ``plot_timeline``
    (with ``server_metrics=``, the figure grows by the lanes' height)."""
    n = len(tasks) if tasks is not None else len(spans_or_tasks)
    metrics = kwargs.get("server_metrics")
    extra = (0.8 * len(kwargs.get("lanes", DEFAULT_LANES))
             if metrics is not None and len(metrics) else 0.0)
    fig = Figure(figsize=(width, min(2 + 0.15 * n, 6) + extra),
                 layout="constrained" if extra else None)
    plot_timeline(spans_or_tasks, tasks=tasks, ax=fig.add_subplot(), **kwargs)
    return fig
