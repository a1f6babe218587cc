"""Pure pandas/numpy analysis of the trace DataFrames (never imports matplotlib).

Every function takes the ``tasks`` / ``sessions`` / ``spans`` frames built by
``rollout_kit.tracing`` (column names from :mod:`rollout_kit.tracing.schema`), checks the
columns it needs (a missing one raises :class:`~rollout_kit.errors.TraceSchemaError`
naming it) and returns a DataFrame. Empty input gives an empty but well-formed result.

Times in results are seconds since the first submit (tasks) or the first span start
(spans) unless ``t0`` is given, so they line up with the plots of ``rollout_kit.plotting``.

Usage::

    from rollout_kit import analysis
    s = analysis.summary(traces.tasks, sessions=traces.sessions)
    s.latency            # p50/p90/p99/max per metric
    analysis.compare({"baseline": a.tasks, "new": b.tasks})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .errors import ConfigError, TraceSchemaError
from .tracing import schema as S
from .tracing.phases import registered_phases

__all__ = [
    "LATENCY_STATS",
    "PERCENTILES",
    "Summary",
    "by_phase",
    "by_server",
    "compare",
    "concurrency",
    "is_spans",
    "phase_names",
    "require_columns",
    "slowest",
    "summary",
    "throughput",
]

PERCENTILES = (50, 90, 99)
LATENCY_STATS = ("count", "mean", "p50", "p90", "p99", "max")
"""Columns of :attr:`Summary.latency` (and of the per-group latency tables)."""

# ``*_s`` columns that are not phase totals.
_NON_PHASE_SECONDS = frozenset({S.QUEUE_S, S.RUN_S, S.TOTAL_S, S.TTFT_S, S.ITL_S})
_THROUGHPUT_COLUMNS = ("tasks", "accepted", "tasks_per_s", "completion_tokens_per_s")
_CONCURRENCY_COLUMNS = ("time", "in_flight")


# -- validation helpers ----------------------------------------------------------------

def require_columns(df: object, columns: Iterable[str], what: str) -> pd.DataFrame:
    """Check that ``df`` is a DataFrame holding ``columns`` (index names count too).

    Args:
        df: the object to check.
        columns: the required column names.
        what: what the frame is, for the message (``"tasks"``, ``"spans"``…).

    Returns:
        ``df`` with any named index levels among ``columns`` turned into columns.

    Raises:
        TraceSchemaError: ``df`` is not a DataFrame or lacks some of ``columns``.
    """
    if not isinstance(df, pd.DataFrame):
        raise TraceSchemaError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    cols = list(columns)
    index_names = [n for n in df.index.names if n is not None]
    missing = [c for c in cols if c not in df.columns and c not in index_names]
    if missing:
        raise TraceSchemaError(
            f"{what} frame lacks required column(s) {missing}; has {list(df.columns)[:20]}")
    if any(c in index_names and c not in df.columns for c in cols):
        return df.reset_index(level=[c for c in cols if c in index_names and c not in df.columns])
    return df


def is_spans(df: pd.DataFrame) -> bool:
    """Whether ``df`` looks like a spans frame (has a ``phase`` column) rather than tasks."""
    return S.PHASE in df.columns


def _is_session_seconds(col: str, cols: set[str]) -> bool:
    """Whether ``col`` is the ``<phase>_session_s`` companion of a ``<phase>_s`` column."""
    if not col.endswith(S.PHASE_SESSION_SUFFIX):
        return False
    phase = col[: -len(S.PHASE_SESSION_SUFFIX)]
    return S.phase_column(phase) in cols or phase in registered_phases()


def phase_names(df: pd.DataFrame) -> list[str]:
    """Phases present in a frame: from ``phase`` values (spans) or ``<phase>_s`` columns.

    The summed ``<phase>_session_s`` columns of a tasks frame are not phases of their own.
    Registered phases come first in registry order, then any other phase found.
    """
    order = registered_phases()
    if is_spans(df):
        found = [str(p) for p in pd.unique(df[S.PHASE].dropna())]
    else:
        cols = {c for c in df.columns if isinstance(c, str)}
        found = [c[:-2] for c in df.columns
                 if isinstance(c, str) and c.endswith("_s") and c not in _NON_PHASE_SECONDS
                 and not _is_session_seconds(c, cols)]
    known = [p for p in order if p in found]
    return known + sorted(p for p in found if p not in order)


def _floats(s: pd.Series[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _is_status(status: pd.Series[Any], value: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return (status == value).to_numpy(dtype=bool, na_value=False)


def _stats(values: np.ndarray[Any, np.dtype[np.float64]]) -> list[float]:
    v = values[~np.isnan(values)]
    if v.size == 0:
        return [0.0] + [np.nan] * (len(LATENCY_STATS) - 1)
    q = np.percentile(v, PERCENTILES)
    return [float(v.size), float(v.mean()), *map(float, q), float(v.max())]


def _stats_frame(columns: Mapping[str, np.ndarray[Any, np.dtype[np.float64]]]) -> pd.DataFrame:
    out = pd.DataFrame([_stats(v) for v in columns.values()], index=list(columns),
                       columns=list(LATENCY_STATS), dtype="float64")
    out["count"] = out["count"].astype("int64")
    out.index.name = "metric"
    return out


# -- summary ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Summary:
    """What :func:`summary` returns.

    Attributes:
        latency: one row per metric (``queue_s``, ``ttft_s``, ``<phase>_s``, ``run_s``,
            ``total_s``), columns :data:`LATENCY_STATS`.
        throughput: ``duration_s``, ``tasks_per_s``, ``accepted_per_s``,
            ``completion_tokens_per_s``, ``prompt_tokens_per_s``.
        status: task count per status (every status, zeros included).
    """

    latency: pd.DataFrame
    throughput: pd.Series[float]
    status: pd.Series[int]

    def as_series(self) -> pd.Series[float]:
        """One flat Series (``"total_s p50"``, ``"tasks_per_s"``, ``"status accepted"``…)."""
        stats = self.latency.drop(columns=["count", "mean"])
        lat = pd.Series(stats.to_numpy(dtype=np.float64).ravel(),
                        index=[f"{m} {c}" for m in stats.index for c in stats.columns])
        status = self.status.astype("float64")
        status.index = [f"status {k}" for k in status.index]
        out: pd.Series[float] = pd.concat([lat, self.throughput.astype("float64"), status])
        return out

    def to_markdown(self) -> str:
        """The summary as Markdown tables (latency, throughput, status)."""
        thr = self.throughput.to_frame("value")
        st = self.status.to_frame("tasks")
        return "\n\n".join([
            "### Latency (seconds)\n\n" + _markdown_table(self.latency),
            "### Throughput\n\n" + _markdown_table(thr),
            "### Status\n\n" + _markdown_table(st),
        ]) + "\n"

    def _repr_html_(self) -> str:
        return "".join(f"<h4>{t}</h4>{df.to_html(float_format='{:.4g}'.format)}"
                       for t, df in (("Latency (s)", self.latency),
                                     ("Throughput", self.throughput.to_frame("value")),
                                     ("Status", self.status.to_frame("tasks"))))


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        return "nan" if np.isnan(v) else f"{v:.4g}"
    return str(v)


def _markdown_table(df: pd.DataFrame) -> str:
    head = [str(df.index.name or "")] + [str(c) for c in df.columns]
    rows = [[str(i)] + [_fmt(v) for v in row]
            for i, row in zip(df.index, df.itertuples(index=False), strict=True)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def summary(tasks: pd.DataFrame, *, sessions: pd.DataFrame | None = None) -> Summary:
    """Latency percentiles, throughput and status counts of one run.

    Args:
        tasks: the tasks frame (needs ``status``, ``submit_ts``, ``end_ts``).
        sessions: the sessions frame; when given (with ``ttft_s``), TTFT percentiles are
            taken per session.

    Returns:
        A :class:`Summary`.

    Raises:
        TraceSchemaError: a required column is missing.
    """
    tasks = require_columns(tasks, (S.STATUS, S.SUBMIT_TS, S.END_TS), "tasks")
    submit, end = _floats(tasks[S.SUBMIT_TS]), _floats(tasks[S.END_TS])
    metrics: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
    if S.QUEUE_S in tasks.columns:
        metrics[S.QUEUE_S] = _floats(tasks[S.QUEUE_S])
    elif S.DISPATCH_TS in tasks.columns:
        metrics[S.QUEUE_S] = _floats(tasks[S.DISPATCH_TS]) - submit
    if sessions is not None and S.TTFT_S in sessions.columns:
        metrics[S.TTFT_S] = _floats(sessions[S.TTFT_S])
    elif S.TTFT_S in tasks.columns:
        metrics[S.TTFT_S] = _floats(tasks[S.TTFT_S])
    for phase in phase_names(tasks):
        v = _floats(tasks[S.phase_column(phase)])
        if np.any(v > 0):  # registered phases never used have all-zero columns: skip
            metrics[S.phase_column(phase)] = v
    if S.RUN_S in tasks.columns:
        metrics[S.RUN_S] = _floats(tasks[S.RUN_S])
    metrics[S.TOTAL_S] = _floats(tasks[S.TOTAL_S]) if S.TOTAL_S in tasks.columns else end - submit

    finished = ~np.isnan(end)
    duration = float(np.nanmax(end) - np.nanmin(submit)) if finished.any() else 0.0
    accepted = _is_status(tasks[S.STATUS], "accepted")

    def rate(x: float) -> float:
        return x / duration if duration > 0 else np.nan

    def tokens(col: str) -> float:  # NA when no task has a count (not a silent 0)
        v = _floats(tasks[col]) if col in tasks.columns else np.full(1, np.nan)
        return float(np.nansum(v)) if not np.isnan(v).all() else np.nan

    thr = pd.Series({
        "duration_s": duration,
        "tasks_per_s": rate(float(finished.sum())),
        "accepted_per_s": rate(float((finished & accepted).sum())),
        "completion_tokens_per_s": rate(tokens(S.COMPLETION_TOKENS)),
        "prompt_tokens_per_s": rate(tokens(S.PROMPT_TOKENS)),
    }, dtype="float64")
    status = (tasks[S.STATUS].value_counts()  # categorical-aware, no string conversion
              .reindex(list(S.STATUSES), fill_value=0).astype("int64"))
    status.index.name = S.STATUS
    return Summary(latency=_stats_frame(metrics), throughput=thr, status=status)


def compare(runs: Mapping[str, pd.DataFrame], *,
            sessions: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Side-by-side summary of several runs: one column per run, one row per metric.

    Args:
        runs: run name → tasks frame.
        sessions: optional run name → sessions frame (for TTFT).

    Returns:
        A DataFrame indexed by metric (``"total_s p50"``, ``"tasks_per_s"``…).

    Raises:
        ConfigError: ``runs`` is empty.
        TraceSchemaError: a frame lacks required columns.
    """
    if not runs:
        raise ConfigError("compare() needs at least one run")
    sessions = sessions or {}
    cols = {name: summary(t, sessions=sessions.get(name)).as_series() for name, t in runs.items()}
    order: dict[str, None] = {}
    for col in cols.values():
        order.update(dict.fromkeys(col.index))
    out = pd.DataFrame({name: col.reindex(list(order)) for name, col in cols.items()})
    out.index.name = "metric"
    return out


# -- over time -------------------------------------------------------------------------

def throughput(tasks: pd.DataFrame, window: float = 1.0, *,
               t0: float | None = None) -> pd.DataFrame:
    """Finished tasks (and tokens) per second, in fixed windows of finish time.

    Args:
        tasks: the tasks frame (needs ``status``, ``submit_ts``, ``end_ts``).
        window: window width in seconds.
        t0: time origin; defaults to the first submit.

    Returns:
        A DataFrame indexed by window start (seconds since ``t0``) with columns
        ``tasks``, ``accepted``, ``tasks_per_s``, ``completion_tokens_per_s`` (NA in a window
        whose finished tasks all lack a token count; 0 in a window where none finished).

    Raises:
        ConfigError: ``window`` is not positive.
        TraceSchemaError: a required column is missing.
    """
    if not window > 0:
        raise ConfigError(f"window must be > 0 seconds, got {window!r}")
    tasks = require_columns(tasks, (S.STATUS, S.SUBMIT_TS, S.END_TS), "tasks")
    end = _floats(tasks[S.END_TS])
    done = ~np.isnan(end)
    if not done.any():
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in _THROUGHPUT_COLUMNS},
                            index=pd.Index([], dtype="float64", name="time"))
    origin = float(np.nanmin(_floats(tasks[S.SUBMIT_TS]))) if t0 is None else t0
    bins = np.floor((end[done] - origin) / window).astype(np.int64)
    lo = min(int(bins.min()), 0)
    bins -= lo
    n = int(bins.max()) + 1
    count = np.bincount(bins, minlength=n)
    acc = _is_status(tasks[S.STATUS], "accepted")
    accepted = np.bincount(bins, weights=acc[done].astype(np.float64), minlength=n)
    if S.COMPLETION_TOKENS in tasks.columns:
        tok = _floats(tasks[S.COMPLETION_TOKENS])[done]
        known = ~np.isnan(tok)
        tokens = np.bincount(bins, weights=np.where(known, tok, 0.0), minlength=n) / window
        tokens[(count > 0) & (np.bincount(bins, weights=known, minlength=n) == 0)] = np.nan
    else:
        tokens = np.full(n, np.nan)
    index = pd.Index((np.arange(n) + lo) * window, dtype="float64", name="time")
    return pd.DataFrame({"tasks": count.astype(np.int64), "accepted": accepted.astype(np.int64),
                         "tasks_per_s": count / window, "completion_tokens_per_s": tokens},
                        index=index)


def _intervals(df: pd.DataFrame, kind: str) -> tuple[np.ndarray[Any, np.dtype[np.float64]],
                                                     np.ndarray[Any, np.dtype[np.float64]],
                                                     float]:
    if is_spans(df):
        df = require_columns(df, (S.START, S.END), "spans")
        start, end = _floats(df[S.START]), _floats(df[S.END])
        return start, end, float(np.nanmin(start)) if np.isfinite(start).any() else 0.0
    df = require_columns(df, (S.SUBMIT_TS, S.END_TS), "tasks")
    submit, end = _floats(df[S.SUBMIT_TS]), _floats(df[S.END_TS])
    t0 = float(np.nanmin(submit)) if np.isfinite(submit).any() else 0.0
    if kind == "total":
        return submit, end, t0
    dispatch = (_floats(df[S.DISPATCH_TS]) if S.DISPATCH_TS in df.columns
                else np.full(len(df), np.nan))
    if kind == "queued":  # a task that ended without a dispatch left the queue then
        return submit, np.where(np.isnan(dispatch), end, dispatch), t0
    if kind == "running":
        begin = _floats(df[S.START_TS]) if S.START_TS in df.columns else dispatch
        begin = np.where(np.isnan(begin), dispatch, begin)
        return begin, end, t0
    raise ConfigError(f"kind must be 'running', 'queued' or 'total', got {kind!r}")


def concurrency(spans_or_tasks: pd.DataFrame, *, kind: str = "running",
                phase: str | None = None, t0: float | None = None) -> pd.DataFrame:
    """In-flight count over time, by a sweep line over interval starts and ends.

    Args:
        spans_or_tasks: a spans frame (intervals ``start``→``end``) or a tasks frame.
        kind: for tasks: ``"running"`` (start→end), ``"queued"`` (submit→dispatch, or
            submit→end for a task that ended without a dispatch, e.g. cancelled in the
            queue) or ``"total"`` (submit→end). Ignored for spans.
        phase: for spans, count only this phase.
        t0: time origin; defaults to the first submit (tasks) or first span start.

    Returns:
        A step function as a DataFrame with columns ``time`` (seconds since ``t0``) and
        ``in_flight`` (the count from that time on). An interval with no end is counted
        as open until the last time seen; intervals touching end-to-start do not overlap.

    Raises:
        TraceSchemaError: a required column is missing.
    """
    df = spans_or_tasks
    if phase is not None:
        df = require_columns(df, (S.PHASE,), "spans")
        df = df[df[S.PHASE].astype("string") == phase]
    start, end, origin = _intervals(df, kind)
    origin = origin if t0 is None else t0
    ok = ~np.isnan(start)
    start, end = start[ok], end[ok]
    if start.size == 0:
        return pd.DataFrame({"time": pd.Series(dtype="float64"),
                             "in_flight": pd.Series(dtype="int64")})
    last = float(np.nanmax(np.concatenate([start, end])))
    end = np.where(np.isnan(end), last, end)
    times = np.concatenate([start, end]) - origin
    delta = np.concatenate([np.ones(start.size, np.int64), -np.ones(end.size, np.int64)])
    order = np.lexsort((delta, times))  # ends before starts at equal times
    times, level = times[order], np.cumsum(delta[order])
    keep = np.append(times[1:] != times[:-1], True)  # last value at each distinct time
    return pd.DataFrame({"time": times[keep], "in_flight": level[keep]})


# -- groupings -------------------------------------------------------------------------

def _group_stats(df: pd.DataFrame, key: str, value: str) -> pd.DataFrame:
    vals = pd.Series(_floats(df[value]), index=df.index)
    g = vals.groupby(df[key].astype("string").fillna("?").to_numpy(), sort=True)
    out = pd.DataFrame({"count": g.count().astype("int64"), "mean": g.mean()})
    for p in PERCENTILES:
        out[f"p{p}"] = g.quantile(p / 100)
    out["max"] = g.max()
    out.index.name = key
    return out


def by_server(sessions: pd.DataFrame) -> pd.DataFrame:
    """Per-server session counts, latency percentiles, tokens and retries.

    Args:
        sessions: the sessions frame (needs ``server`` and ``total_s``; uses ``status``,
            ``ttft_s``, token counts and ``retries`` when present).

    Returns:
        A DataFrame indexed by server with columns ``sessions``, ``failed``, the
        :data:`LATENCY_STATS` of ``total_s`` (``mean``, ``p50``…), ``ttft_p50``,
        ``prompt_tokens``, ``completion_tokens``, ``completion_tokens_per_s`` (over the
        server's summed session time) and ``retries``; a total is NA for a server none of
        whose sessions has a value (not 0).

    Raises:
        TraceSchemaError: a required column is missing.
    """
    sessions = require_columns(sessions, (S.SERVER, S.TOTAL_S), "sessions")
    out = _group_stats(sessions, S.SERVER, S.TOTAL_S).rename(columns={"count": "sessions"})
    key = sessions[S.SERVER].astype("string").fillna("?").to_numpy()

    def total(col: str) -> pd.Series[float]:  # NA for a server without any value
        if col not in sessions.columns:
            return pd.Series(np.nan, index=out.index)
        return pd.Series(_floats(sessions[col]), index=sessions.index).groupby(
            key).sum(min_count=1).reindex(out.index)

    if S.STATUS in sessions.columns:
        failed = (sessions[S.STATUS].astype("string") == "failed").astype("int64")
        out.insert(1, "failed", failed.groupby(key).sum().reindex(out.index).to_numpy())
    if S.TTFT_S in sessions.columns:
        out["ttft_p50"] = _group_stats(sessions, S.SERVER, S.TTFT_S)["p50"]
    busy = total(S.TOTAL_S)
    out[S.PROMPT_TOKENS] = total(S.PROMPT_TOKENS)
    out[S.COMPLETION_TOKENS] = total(S.COMPLETION_TOKENS)
    out["completion_tokens_per_s"] = out[S.COMPLETION_TOKENS] / busy.where(busy > 0)
    out[S.RETRIES] = total(S.RETRIES)
    return out


def by_phase(spans: pd.DataFrame) -> pd.DataFrame:
    """Per-phase span counts, total seconds, share of time and duration percentiles.

    Args:
        spans: the spans frame (needs ``phase`` and ``duration`` or ``start``/``end``).

    Returns:
        A DataFrame indexed by phase (registry order first) with columns ``count``,
        ``mean``, ``p50``, ``p90``, ``p99``, ``max``, ``total_s`` and ``share``.

    Raises:
        TraceSchemaError: a required column is missing.
    """
    spans = require_columns(spans, (S.PHASE,), "spans")
    if S.DURATION not in spans.columns:
        spans = require_columns(spans, (S.START, S.END), "spans")
        spans = spans.assign(**{S.DURATION: _floats(spans[S.END]) - _floats(spans[S.START])})
    out = _group_stats(spans, S.PHASE, S.DURATION)
    dur = pd.Series(_floats(spans[S.DURATION]), index=spans.index)
    out["total_s"] = dur.groupby(spans[S.PHASE].astype("string").fillna("?").to_numpy()).sum(
        min_count=1)  # NA for a phase whose spans are all open
    grand = float(out["total_s"].sum())
    out["share"] = out["total_s"] / grand if grand > 0 else np.nan
    order = [p for p in phase_names(spans) if p in out.index]
    return out.reindex(order + [p for p in out.index if p not in order])


def slowest(tasks: pd.DataFrame, n: int = 10, *, by: str = S.TOTAL_S,
            columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The ``n`` tasks with the largest ``by`` (default ``total_s``), largest first.

    Args:
        tasks: the tasks frame.
        n: how many rows.
        by: the column to rank by.
        columns: columns to keep (default: all).

    Returns:
        The top rows of ``tasks``, same index (task_id); ties keep frame order, rows whose
        ``by`` is NA (unfinished tasks) come after every known value.

    Raises:
        ConfigError: ``n`` is negative.
        TraceSchemaError: ``by`` (or one of ``columns``) is missing.
    """
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    tasks = require_columns(tasks, (by, *(columns or ())), "tasks")
    pos = pd.Series(_floats(tasks[by])).nlargest(n).index.to_numpy()
    top = tasks.iloc[pos]
    return top[list(columns)] if columns is not None else top
