"""Over time: finished tasks and tokens per window of finish time (``throughput``) and the
in-flight count as a step function (``concurrency``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .._errors import ConfigError
from ..tracing import schema as S
from ._common import floats, is_spans, is_status, require_columns

_THROUGHPUT_COLUMNS = ("tasks", "accepted", "tasks_per_s", "completion_tokens_per_s")
_CONCURRENCY_COLUMNS = ("time", "in_flight")


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
    end = floats(tasks[S.END_TS])
    done = ~np.isnan(end)
    if not done.any():
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in _THROUGHPUT_COLUMNS},
                            index=pd.Index([], dtype="float64", name="time"))
    origin = float(np.nanmin(floats(tasks[S.SUBMIT_TS]))) if t0 is None else t0
    bins = np.floor((end[done] - origin) / window).astype(np.int64)
    lo = min(int(bins.min()), 0)
    bins -= lo
    n = int(bins.max()) + 1
    count = np.bincount(bins, minlength=n)
    acc = is_status(tasks[S.STATUS], "accepted")
    accepted = np.bincount(bins, weights=acc[done].astype(np.float64), minlength=n)
    if S.COMPLETION_TOKENS in tasks.columns:
        tok = floats(tasks[S.COMPLETION_TOKENS])[done]
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
        start, end = floats(df[S.START]), floats(df[S.END])
        return start, end, float(np.nanmin(start)) if np.isfinite(start).any() else 0.0
    df = require_columns(df, (S.SUBMIT_TS, S.END_TS), "tasks")
    submit, end = floats(df[S.SUBMIT_TS]), floats(df[S.END_TS])
    t0 = float(np.nanmin(submit)) if np.isfinite(submit).any() else 0.0
    if kind == "total":
        return submit, end, t0
    dispatch = (floats(df[S.DISPATCH_TS]) if S.DISPATCH_TS in df.columns
                else np.full(len(df), np.nan))
    if kind == "queued":  # a task that ended without a dispatch left the queue then
        return submit, np.where(np.isnan(dispatch), end, dispatch), t0
    if kind == "running":
        begin = floats(df[S.START_TS]) if S.START_TS in df.columns else dispatch
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
