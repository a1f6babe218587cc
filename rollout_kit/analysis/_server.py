"""The servers' state over a run: named series from the server metrics frame.

:func:`server_series` turns the samples a controller scraped from each server's
``/metrics`` (``Traces.server_metrics``, ``RolloutController.server_metrics()``: columns
``ts``, ``server``, ``metric``, ``labels``, ``value``) into the series a user reads beside a
timeline, on the same clock. Each comes from vLLM's or SGLang's own metrics
(:data:`rollout_kit.tracing.server_metrics.SERIES`); the first source a server exposes wins:

=========================== ==============================================================
series                      source (vLLM; SGLang)
=========================== ==============================================================
``running``                 ``vllm:num_requests_running``; ``sglang:num_running_reqs``
                            (gauges, summed)
``waiting``                 ``vllm:num_requests_waiting``; ``sglang:num_queue_reqs``
                            (gauges, summed)
``kv_cache_usage``          ``vllm:kv_cache_usage_perc`` (≤ 0.10:
                            ``vllm:gpu_cache_usage_perc``); ``sglang:token_usage``
                            (gauges, averaged; a fraction)
``preemptions_per_s``       rate of ``vllm:num_preemptions_total``; rate of
                            ``sglang:num_retracted_requests_total`` (newer SGLang)
``prefix_cache_hit_rate``   Δ ``vllm:prefix_cache_hits_total`` /
                            Δ ``vllm:prefix_cache_queries_total`` (≤ 0.10:
                            ``vllm:gpu_prefix_cache_*``); Δ ``sglang:cached_tokens_total``
                            / Δ ``sglang:prompt_tokens_total``, else the gauge
                            ``sglang:cache_hit_rate``
``prompt_tokens_per_s``     rate of ``vllm:prompt_tokens_total``;
                            rate of ``sglang:prompt_tokens_total``
``generation_tokens_per_s`` rate of ``vllm:generation_tokens_total``;
                            rate of ``sglang:generation_tokens_total``
``ttft_s``                  Δ ``vllm:time_to_first_token_seconds_sum`` / Δ ``…_count``;
                            the same of ``sglang:time_to_first_token_seconds``: the mean
                            TTFT of the requests whose first token came in the interval
``scrape_failed``           the scrapes that got no answer (timeouts, refused connections,
                            error statuses, malformed text): 1 at each; the other series
                            hold NaN there (a gap, not the last value seen)
=========================== ==============================================================

*sum* / *mean*: a gauge over its label sets (engines, ranks). A *rate* is the counter's
increase between two scrapes of the server over the seconds between them, at the later
scrape (a counter that went down — a restart — counts from zero). A ratio or a histogram's
mean is NaN for an interval where the denominator did not move (no prompt token, no first
token). A series a server does not expose is absent for it (SGLang ≤ 0.5 has no retraction
counter; the simulators never preempt).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..tracing import schema as S
from ..tracing.server_metrics import SERIES, SERIES_NAMES, Source
from ._common import require_columns

#: the columns of :func:`server_series`'s tidy frame
SERIES_COLUMNS = (S.TS, S.SERVER, "series", S.VALUE)


def _deltas(v: np.ndarray) -> np.ndarray:
    """Increases between consecutive values of a counter; a decrease (a restart) counts
    the new value from zero."""
    d = np.diff(v)
    reset = d < 0
    if reset.any():
        d[reset] = v[1:][reset]
    return d


def _compute(how: str, names: list[str], per: dict[str, pd.DataFrame]) -> pd.Series | None:
    """One series of one server from its per-metric frames (index ts; sum, mean)."""
    if any(n not in per for n in names):
        return None
    if how in ("sum", "mean"):
        return per[names[0]][how]
    if how == "rate":
        s = per[names[0]]["sum"]
        if len(s) < 2:
            return None
        ts = s.index.to_numpy(dtype=np.float64)
        dt = np.diff(ts)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = _deltas(s.to_numpy(dtype=np.float64)) / dt
        return pd.Series(np.where(dt > 0, rate, np.nan), index=s.index[1:])
    # ratio, hist_mean: Δ first / Δ second, on the scrapes that hold both
    num, den = (per[n]["sum"] for n in names)
    both = pd.concat([num, den], axis=1, join="inner")
    if len(both) < 2:
        return None
    a, b = both.iloc[:, 0].to_numpy(np.float64), both.iloc[:, 1].to_numpy(np.float64)
    dn, dd = _deltas(a), _deltas(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(dd > 0, dn / dd, np.nan)
    return pd.Series(out, index=both.index[1:])


def _with_gaps(parts: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """Each server's gauges (and rates) with a NaN at its failed scrapes, so a line drawn of
    them breaks there instead of holding the last value seen across the gap."""
    failed = [p for p in parts if len(p) and p["series"].iloc[0] == "scrape_failed"]
    if not failed:
        return parts
    at = {str(p[S.SERVER].iloc[0]): p[S.TS].to_numpy(dtype=np.float64) for p in failed}
    out: list[pd.DataFrame] = []
    for p in parts:
        ts = at.get(str(p[S.SERVER].iloc[0])) if len(p) else None
        if ts is None or p["series"].iloc[0] == "scrape_failed":
            out.append(p)
            continue
        gaps = ts[~np.isin(ts, p[S.TS].to_numpy(dtype=np.float64))]
        out.append(pd.concat([p, pd.DataFrame({
            S.TS: gaps, S.SERVER: p[S.SERVER].iloc[0], "series": p["series"].iloc[0],
            S.VALUE: np.full(len(gaps), np.nan)})], ignore_index=True))
    return out


def _source_metrics(how: str, names: tuple[str, ...]) -> list[str]:
    if how == "hist_mean":
        return [f"{names[0]}_sum", f"{names[0]}_count"]
    return list(names)


def server_series(metrics: pd.DataFrame, *, wide: bool = False) -> pd.DataFrame:
    """Named series of each server's state over time (see the module docstring).

    Args:
        metrics: a server metrics frame (``Traces.server_metrics``,
            ``RolloutController.server_metrics()``).
        wide: one row per ``(server, ts)`` and one column per series instead of the tidy
            frame.

    Returns:
        Tidy: columns ``ts`` (seconds on the trace clock), ``server``, ``series`` (a
        categorical in the order of the module's table), ``value``; sorted by server,
        series and time. Wide: index ``(server, ts)``, one float column per series found.

    Raises:
        TraceSchemaError: ``metrics`` lacks one of the frame's columns.
    """
    df = require_columns(metrics, (S.TS, S.SERVER, S.METRIC, S.VALUE), "server metrics")
    sources: list[tuple[str, str, list[str]]] = []  # (series, how, metric names)
    needed: set[str] = set()
    for series in SERIES:
        src: Source
        for src in (*series.vllm, *series.sglang):
            names = _source_metrics(src[0], src[1:])
            sources.append((series.name, src[0], names))
            needed.update(names)
    df = df[df[S.METRIC].astype(str).isin(needed)]
    parts: list[pd.DataFrame] = []
    if len(df):
        grouped = (df.assign(**{S.SERVER: df[S.SERVER].astype(str),
                                S.METRIC: df[S.METRIC].astype(str)})
                   .groupby([S.SERVER, S.METRIC, S.TS], sort=True)[S.VALUE]
                   .agg(["sum", "mean"]))
        for server, by_server in grouped.groupby(level=0, sort=True):
            per = {str(m): f.droplevel([0, 1])
                   for m, f in by_server.groupby(level=1, sort=False)}
            done: set[str] = set()
            for name, how, names in sources:
                if name in done:
                    continue
                got = _compute(how, names, per)
                if got is None:
                    continue
                done.add(name)
                parts.append(pd.DataFrame({S.TS: got.index.to_numpy(dtype=np.float64),
                                           S.SERVER: server, "series": name,
                                           S.VALUE: got.to_numpy(dtype=np.float64)}))
    parts = _with_gaps(parts)
    out: Any = (pd.concat(parts, ignore_index=True) if parts
                else pd.DataFrame({S.TS: np.empty(0), S.SERVER: pd.Series([], dtype=object),
                                   "series": pd.Series([], dtype=object),
                                   S.VALUE: np.empty(0)}))
    out[S.SERVER] = out[S.SERVER].astype("string")
    out["series"] = pd.Categorical(out["series"], categories=list(SERIES_NAMES))
    out = out.sort_values([S.SERVER, "series", S.TS], ignore_index=True, kind="stable")
    if not wide:
        return pd.DataFrame(out[list(SERIES_COLUMNS)])
    table: pd.DataFrame = out.pivot_table(index=[S.SERVER, S.TS], columns="series",
                                          values=S.VALUE, observed=True, aggfunc="first",
                                          dropna=False)
    table.columns = pd.Index([str(c) for c in table.columns], name="series")
    return table


#: the columns of :func:`server_segments` (those ``plot_timeline(server_spans=...)`` reads)
SEGMENT_COLUMNS = (S.TASK_ID, S.SESSION_ID, S.SERVER, "start_ts", "queue_s", "prefill_s",
                   "decode_s", "e2e_s", "requests")


def server_segments(sessions: pd.DataFrame) -> pd.DataFrame:
    """The server's own queue, prefill and decode of each session, from its ``server_*``
    columns, shaped as :func:`rollout_kit.otel.join_server_spans`'s ``spans``: what
    ``plot_timeline(..., server_spans=...)`` draws inside the rows.

    SGLang's engines record those columns from every answer's ``meta_info`` (no OTLP
    needed); a joined vLLM view (``join_server_spans(...).sessions``) has them too. A
    session of one request is drawn exactly; one of several (continuations, turns) has its
    sums drawn back to back from its first request's arrival (``requests`` says how many).

    Args:
        sessions: a sessions frame (index ``(task_id, session_id)``).

    Returns:
        One row per session that has ``server_start_ts``, with :data:`SEGMENT_COLUMNS`
        (empty when the frame has no such column).
    """
    have = [c for c in ("server_start_ts", "server_queue_s", "server_prefill_s",
                        "server_decode_s", "server_e2e_s") if c in sessions.columns]
    if "server_start_ts" not in have or not len(sessions):
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in SEGMENT_COLUMNS})
    df = sessions.reset_index() if S.TASK_ID not in sessions.columns else sessions
    df = require_columns(df, (S.TASK_ID, S.SESSION_ID), "sessions")

    def col(name: str) -> np.ndarray:
        if name not in df.columns:
            return np.full(len(df), np.nan)
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64)

    start = col("server_start_ts")
    keep = np.isfinite(start)
    n = col("server_spans")
    out = pd.DataFrame({
        S.TASK_ID: df[S.TASK_ID].to_numpy(dtype=np.int64)[keep],
        S.SESSION_ID: df[S.SESSION_ID].to_numpy(dtype=np.int64)[keep],
        S.SERVER: (df[S.SERVER].astype("string").to_numpy()[keep] if S.SERVER in df.columns
                   else pd.NA),
        "start_ts": start[keep], "queue_s": col("server_queue_s")[keep],
        "prefill_s": col("server_prefill_s")[keep], "decode_s": col("server_decode_s")[keep],
        "e2e_s": col("server_e2e_s")[keep],
        "requests": np.where(np.isfinite(n), n, 1.0)[keep].astype(np.int64)})
    return out.reset_index(drop=True)
