"""Counter series of the Chrome trace (``"ph": "C"``): per worker process, tasks ``queued``
and ``in_flight``; per server, requests ``in_flight`` and (streamed runs) ``queued`` for
their first token. See :mod:`rollout_kit.tracing._frames.chrome` for what the trace shows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import schema as S
from .columns import DEFAULT_PROCESS, F64, NO_SESSION, floats, ints

TASK_COUNTER = "tasks"
"""Counter of a worker process: series ``queued`` and ``in_flight``."""
SERVER_COUNTER = "requests"
"""Counter of a server process: series ``in_flight`` and (streamed runs) ``queued``."""
_GENERATE = "generate"


def _steps(key: np.ndarray, start: F64, end: F64) -> pd.DataFrame:
    """The value after each change of ``count of intervals [start, end) open`` per key.

    ``end`` may be NaN (still open at the end of the trace).
    """
    has_end = np.isfinite(end)
    t = np.concatenate([start, end[has_end]])
    d = np.concatenate([np.ones(start.size), -np.ones(int(has_end.sum()))])
    k = np.concatenate([key, key[has_end]])
    sums = pd.DataFrame({"key": k, "t": t, "d": d}).groupby(["key", "t"], sort=True)["d"].sum()
    df = sums.reset_index()
    df["value"] = df.groupby("key", sort=False)["d"].cumsum()
    return df[["key", "t", "value"]]


def _merge_series(series: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (key, t) change of any series, every series' value at that time."""
    merged: pd.DataFrame | None = None
    for name, df in series.items():
        df = df.rename(columns={"value": name})
        merged = df if merged is None else merged.merge(df, on=["key", "t"], how="outer")
    assert merged is not None
    merged = merged.sort_values(["key", "t"], kind="stable", ignore_index=True)
    names = list(series)
    merged[names] = merged.groupby("key", sort=False)[names].ffill().fillna(0.0)
    return merged


def _worker_counters(tasks: pd.DataFrame, codes: dict[str, int]) -> pd.DataFrame | None:
    worker = (tasks[S.WORKER].astype("string").fillna(DEFAULT_PROCESS).to_numpy()
              if S.WORKER in tasks.columns else np.full(len(tasks), DEFAULT_PROCESS))
    pid = np.asarray([codes[w] for w in worker.tolist()], dtype=np.int64)
    submit = floats(tasks[S.SUBMIT_TS])
    nan = np.full(len(tasks), np.nan)
    dispatch = floats(tasks[S.DISPATCH_TS]) if S.DISPATCH_TS in tasks.columns else nan
    end = floats(tasks[S.END_TS]) if S.END_TS in tasks.columns else nan
    ok = np.isfinite(submit)
    if not ok.any():
        return None
    q_end = np.where(np.isfinite(dispatch), dispatch, end)
    run = ok & np.isfinite(dispatch)
    merged = _merge_series({
        "queued": _steps(pid[ok], submit[ok], q_end[ok]),
        "in_flight": _steps(pid[run], dispatch[run], end[run])})
    return merged.rename(columns={"key": "pid"}).assign(name=TASK_COUNTER)


def _server_counters(spans: pd.DataFrame, sessions: pd.DataFrame | None,
                     first_pid: int) -> tuple[pd.DataFrame | None, dict[int, str]]:
    if S.SERVER not in spans.columns or not len(spans):
        return None, {}
    gen = spans[(spans[S.PHASE].astype("string") == _GENERATE).fillna(False)
                .to_numpy(dtype=bool) & spans[S.SERVER].notna().to_numpy()]
    start, end = floats(gen[S.START]), floats(gen[S.END])
    ok = np.isfinite(start) & np.isfinite(end)
    gen, start, end = gen[ok], start[ok], np.maximum(end[ok], start[ok])
    if not len(gen):
        return None, {}
    server = gen[S.SERVER].astype("string").to_numpy()
    names = sorted(set(server.tolist()))
    pids = {name: first_pid + i for i, name in enumerate(names)}
    pid = np.asarray([pids[s] for s in server.tolist()], dtype=np.int64)
    series = {"in_flight": _steps(pid, start, end)}
    waiting = _first_token_waits(gen, start, end, sessions)
    w = np.isfinite(waiting) if waiting is not None else np.zeros(len(gen), dtype=bool)
    if w.any():
        assert waiting is not None
        series["queued"] = _steps(pid[w], start[w], waiting[w])
    merged = _merge_series(series)
    if w.any():  # a server without first-token times: its queue is not drawn
        merged.loc[~merged["key"].isin(np.unique(pid[w])), "queued"] = np.nan
    return (merged.rename(columns={"key": "pid"}).assign(name=SERVER_COUNTER),
            {v: f"server {k}" for k, v in pids.items()})


def _first_token_waits(gen: pd.DataFrame, start: F64, end: F64,
                       sessions: pd.DataFrame | None) -> F64 | None:
    """When each generate span got its first token (NaN: not known): its session's
    ``ttft_s`` after its start, for the last generate span of a session only."""
    if sessions is None or S.TTFT_S not in sessions.columns:
        return None
    ttft = pd.Series(floats(sessions[S.TTFT_S]), index=pd.MultiIndex.from_arrays(
        [sessions[S.TASK_ID].to_numpy(dtype=np.int64),
         ints(sessions[S.SESSION_ID], NO_SESSION)]))
    ttft = ttft[~ttft.index.duplicated()]
    task = gen[S.TASK_ID].to_numpy(dtype=np.int64)
    sess = ints(gen[S.SESSION_ID], NO_SESSION)
    per = ttft.reindex(pd.MultiIndex.from_arrays([task, sess])).to_numpy(dtype=np.float64)
    last = (pd.DataFrame({"t": task, "s": sess, "start": start})
            .groupby(["t", "s"])["start"].transform("max").to_numpy() == start)
    return np.where(last & (sess >= 0) & np.isfinite(per),
                    np.minimum(start + np.maximum(per, 0.0), end), np.nan)


def counter_samples(spans: pd.DataFrame, tasks: pd.DataFrame | None,
              sessions: pd.DataFrame | None, codes: dict[str, int]
              ) -> tuple[pd.DataFrame, dict[int, str]]:
    """The counter samples (µs) and the server processes they need."""
    parts = []
    wc = _worker_counters(tasks, codes) if tasks is not None and len(tasks) else None
    if wc is not None:
        parts.append(wc)
    sc, servers = _server_counters(spans, sessions, max(codes.values()) + 1)
    if sc is not None:
        parts.append(sc)
    counters = (pd.concat(parts, ignore_index=True) if parts
                else pd.DataFrame(columns=["pid", "name", "t", "queued", "in_flight"]))
    counters["ts"] = np.round(counters["t"].to_numpy(dtype=np.float64) * 1e6, 3)
    return (counters.reindex(columns=["pid", "name", "ts", "queued", "in_flight"]),
            servers)
