"""Grouped tables: sessions per server (``by_server``), spans per phase (``by_phase``), and
the slowest tasks (``slowest``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .._errors import ConfigError
from ..tracing import schema as S
from ._common import PERCENTILES, floats, phase_names, require_columns


def _group_stats(df: pd.DataFrame, key: str, value: str) -> pd.DataFrame:
    vals = pd.Series(floats(df[value]), index=df.index)
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
        return pd.Series(floats(sessions[col]), index=sessions.index).groupby(
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
        spans = spans.assign(**{S.DURATION: floats(spans[S.END]) - floats(spans[S.START])})
    out = _group_stats(spans, S.PHASE, S.DURATION)
    dur = pd.Series(floats(spans[S.DURATION]), index=spans.index)
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
    pos = pd.Series(floats(tasks[by])).nlargest(n).index.to_numpy()
    top = tasks.iloc[pos]
    return top[list(columns)] if columns is not None else top
