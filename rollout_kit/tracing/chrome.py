"""Export the spans frame to the Chrome Trace Event Format (Perfetto, chrome://tracing).

Each task gets its own track (``tid = task_id``, named ``task N``), inside one process
per worker (``pid``, named by ``process_name`` metadata), so tasks that run at the same time
render side by side instead of piling onto one thread as in AReaL. Spans are complete
(``"X"``) events with microsecond ``ts``/``dur``; with ``tasks`` given, the queue wait
(submit → dispatch) is drawn too.

A track never holds overlapping events: when sessions of one task overlap (n samples in
parallel), the extra sessions go to sub-tracks ``task N · lane k`` right under the task's
track (``tid = k * stride + task_id`` with ``stride`` a power of ten above every task id).

Usage::

    from rollout_kit.tracing.chrome import to_chrome_trace
    to_chrome_trace(traces.spans, "trace.json", tasks=traces.tasks)  # open in ui.perfetto.dev
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from ..errors import ConfigError, TraceSchemaError
from . import schema as S

__all__ = ["QUEUED_EVENT", "to_chrome_trace"]

QUEUED_EVENT = "queued"
"""Name of the event for a task's queue wait (submit → dispatch)."""

_QUEUE_SESSION = -1  # pseudo session id of the queued segment
_NO_SESSION = -2  # pseudo session id of spans recorded outside any session
_DEFAULT_PROCESS = "rollout_kit"
_SPAN_REQUIRED = (S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END)

_F64 = np.ndarray[Any, np.dtype[np.float64]]
_I64 = np.ndarray[Any, np.dtype[np.int64]]


def _columns(df: object, required: tuple[str, ...], what: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TraceSchemaError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    names = [n for n in df.index.names if n is not None and n not in df.columns]
    if names:
        df = df.reset_index(level=names)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceSchemaError(f"{what} frame lacks required column(s) {missing}")
    return df


def _floats(s: pd.Series[Any]) -> _F64:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _greedy_lanes(start: _F64, end: _F64) -> list[int]:
    """First-fit interval partitioning of intervals sorted by start: lowest free lane."""
    free: list[int] = []  # heap of free lane numbers
    busy: list[tuple[float, int]] = []  # heap of (end, lane)
    lanes: list[int] = []
    for a, b in zip(start.tolist(), end.tolist(), strict=True):
        while busy and busy[0][0] <= a:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (b, lane))
        lanes.append(lane)
    return lanes


def _lanes(group: _I64, start: _F64, end: _F64) -> _I64:
    """Lane of each interval within its group so that no lane holds overlapping ones.

    Inputs must be sorted by (group, start). Groups without any overlap (the common case)
    are handled vectorised; only overlapping groups go through the greedy loop.
    """
    lanes = np.zeros(group.size, dtype=np.int64)
    if group.size < 2:
        return lanes
    run_max = pd.Series(end).groupby(group).cummax().to_numpy()
    same = group[1:] == group[:-1]
    overlap = same & (start[1:] < run_max[:-1])
    for g in np.unique(group[1:][overlap]).tolist():
        idx = np.flatnonzero(group == g)
        lanes[idx] = _greedy_lanes(start[idx], end[idx])
    return lanes


def _units(spans: pd.DataFrame, tasks: pd.DataFrame | None) -> pd.DataFrame:
    """One row per interval to lay out: each phase span, and each task's queue wait."""
    start, end = _floats(spans[S.START]), _floats(spans[S.END])
    ok = ~(np.isnan(start) | np.isnan(end))
    units = pd.DataFrame({
        "task": spans[S.TASK_ID].to_numpy(dtype=np.int64)[ok],
        "session": pd.to_numeric(spans[S.SESSION_ID], errors="coerce").fillna(_NO_SESSION)
        .to_numpy(dtype=np.int64)[ok],
        "name": spans[S.PHASE].astype("string").fillna("?").to_numpy()[ok],
        "start": start[ok], "end": np.maximum(end[ok], start[ok]),
        "server": (spans[S.SERVER].astype("string").to_numpy()[ok] if S.SERVER in spans.columns
                   else None),
        "status": (spans[S.STATUS].astype("string").to_numpy()[ok] if S.STATUS in spans.columns
                   else None),
        "worker": (spans[S.WORKER].astype("string").to_numpy()[ok] if S.WORKER in spans.columns
                   else None),
    })
    if tasks is not None and S.DISPATCH_TS in tasks.columns:
        submit, dispatch = _floats(tasks[S.SUBMIT_TS]), _floats(tasks[S.DISPATCH_TS])
        q = ~(np.isnan(submit) | np.isnan(dispatch)) & (dispatch > submit)
        queued = pd.DataFrame({
            "task": tasks[S.TASK_ID].to_numpy(dtype=np.int64)[q], "session": _QUEUE_SESSION,
            "name": QUEUED_EVENT, "start": submit[q], "end": dispatch[q], "server": None,
            "status": (tasks[S.STATUS].astype("string").to_numpy()[q]
                       if S.STATUS in tasks.columns else None),
            "worker": (tasks[S.WORKER].astype("string").to_numpy()[q]
                       if S.WORKER in tasks.columns else None)})
        units = pd.concat([queued, units], ignore_index=True) if len(units) else queued
    return units


def _assign_tracks(units: pd.DataFrame) -> pd.DataFrame:
    """Add ``lane``: sessions (and the queue wait) of one (pid, task) that overlap go to
    different lanes; so do overlapping spans of one session."""
    units = units.sort_values(["pid", "task", "start", "session"], kind="stable",
                              ignore_index=True)
    owner = ["pid", "task"]
    sess = units.groupby([*owner, "session"], sort=False).agg(
        start=("start", "min"), end=("end", "max")).reset_index()
    sess = sess.sort_values([*owner, "start"], kind="stable", ignore_index=True)
    group = np.asarray(sess.groupby(owner, sort=False).ngroup(), dtype=np.int64)
    sess["slane"] = _lanes(group, sess["start"].to_numpy(), sess["end"].to_numpy())
    units = units.merge(sess[[*owner, "session", "slane"]], on=[*owner, "session"], how="left")
    key = np.asarray(units.groupby([*owner, "session"], sort=False).ngroup(), dtype=np.int64)
    order = np.lexsort((units["start"].to_numpy(), key))
    sub = np.empty(len(units), dtype=np.int64)
    sub[order] = _lanes(key[order], units["start"].to_numpy()[order],
                        units["end"].to_numpy()[order])
    combined = pd.Series(units["slane"].to_numpy(dtype=np.int64) * 1_000_000 + sub)
    owners = np.asarray(units.groupby(owner, sort=False).ngroup(), dtype=np.int64)
    units["lane"] = (combined.groupby(owners).rank(method="dense")
                     .to_numpy(dtype=np.int64) - 1)
    return units


def _worker_pids(units: pd.DataFrame, tasks: pd.DataFrame | None
                 ) -> tuple[_I64, dict[int, str]]:
    """One pid per worker: the span's own ``worker`` column, else its task's worker.

    Without a ``worker`` column on the spans, a task id used by several workers (SPMD ids
    restart at 0 per rank) is attributed to the first worker listing it.
    """
    per_unit = pd.Series(units["worker"].to_numpy(), dtype="string")
    if tasks is not None and S.WORKER in tasks.columns:
        by_task = (tasks.drop_duplicates(S.TASK_ID).set_index(S.TASK_ID)[S.WORKER]
                   .astype("string"))
        per_unit = per_unit.fillna(pd.Series(by_task.reindex(units["task"].to_numpy())
                                             .to_numpy(), dtype="string"))
    per_unit = per_unit.fillna(_DEFAULT_PROCESS)
    names = sorted(set(per_unit.tolist()) - {_DEFAULT_PROCESS})
    codes = pd.Series(np.arange(len(names), dtype=np.int64) + 1, index=names, dtype="int64")
    codes[_DEFAULT_PROCESS] = 0
    pids = codes.reindex(per_unit.to_numpy()).to_numpy(dtype=np.int64)
    return pids, {int(v): (k if k == _DEFAULT_PROCESS else f"worker {k}")
                  for k, v in codes.items()}


def _metadata(tracks: pd.DataFrame, processes: dict[int, str], stride: int
              ) -> list[dict[str, Any]]:
    used = set(tracks["pid"].tolist())
    events: list[dict[str, Any]] = []
    for pid, name in sorted(processes.items()):
        if pid in used:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": pid}})
    n_lanes = int(tracks["lane"].max()) + 1 if len(tracks) else 1
    for pid, task, lane in tracks[["pid", "task", "lane"]].itertuples(index=False):
        tid = int(lane) * stride + int(task)
        name = f"task {task}" if lane == 0 else f"task {task} · lane {lane}"
        events.append({"ph": "M", "name": "thread_name", "pid": int(pid), "tid": tid,
                       "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": int(pid), "tid": tid,
                       "args": {"sort_index": int(task) * n_lanes + int(lane)}})
    return events


def _span_events(units: pd.DataFrame, tids: _I64, pids: _I64) -> list[dict[str, Any]]:
    t_start = np.round(units["start"].to_numpy() * 1e6, 3)  # µs, ns resolution
    t_end = np.round(units["end"].to_numpy() * 1e6, 3)
    ts, dur = t_start.tolist(), (t_end - t_start).tolist()  # ts + dur == rounded end
    cat = np.where(units["name"].to_numpy() == QUEUED_EVENT, "queue", "phase").tolist()
    server = units["server"].tolist()
    status = units["status"].tolist()
    return [
        {"ph": "X", "name": name, "cat": c, "ts": t, "dur": d, "pid": p, "tid": tid,
         "args": {"task_id": task, "session_id": sess if sess >= 0 else None,
                  "server": None if sv is None or sv is pd.NA else sv,
                  "status": None if st is None or st is pd.NA else st}}
        for name, c, t, d, p, tid, task, sess, sv, st in zip(
            units["name"].tolist(), cat, ts, dur, pids.tolist(), tids.tolist(),
            units["task"].tolist(), units["session"].tolist(), server, status, strict=True)
    ]


def to_chrome_trace(spans: pd.DataFrame, path: str | Path | None = None, *,
                    tasks: pd.DataFrame | None = None) -> dict[str, Any]:
    """Build (and optionally write) a Chrome / Perfetto trace with one track per task.

    Args:
        spans: the spans frame (``task_id``, ``session_id``, ``phase``, ``start``, ``end``;
            ``server`` and ``status`` go into each event's ``args``). Spans still open
            (no ``end``) are left out and counted in ``otherData``.
        path: where to write the JSON (with orjson); its folder must exist.
        tasks: the tasks frame; adds the queue-wait events and one process per worker.

    Returns:
        The trace as a dict: ``traceEvents`` (metadata ``M`` events, then ``X`` events with
        µs ``ts``/``dur``), ``displayTimeUnit`` and ``otherData``.

    Raises:
        TraceSchemaError: ``spans`` / ``tasks`` lack required columns.
        ConfigError: ``path``'s folder does not exist.
    """
    spans = _columns(spans, _SPAN_REQUIRED, "spans")
    if tasks is not None:
        tasks = _columns(tasks, (S.TASK_ID, S.SUBMIT_TS), "tasks")
    if path is not None and not Path(path).parent.is_dir():
        raise ConfigError(f"cannot write the Chrome trace: folder {Path(path).parent} "
                          "does not exist")
    units = _units(spans, tasks)
    pids, processes = _worker_pids(units, tasks)
    units = _assign_tracks(units.assign(pid=pids))
    pids = units["pid"].to_numpy(dtype=np.int64)
    max_task = int(units["task"].max()) if len(units) else 0
    stride = 10 ** len(str(max(max_task, 0) + 1))
    tids = units["lane"].to_numpy(dtype=np.int64) * stride + units["task"].to_numpy()
    tracks = (pd.DataFrame({"pid": pids, "task": units["task"], "lane": units["lane"]})
              .drop_duplicates().sort_values(["pid", "task", "lane"]))
    dropped = int(len(spans) - (units["name"] != QUEUED_EVENT).sum())
    trace: dict[str, Any] = {
        "traceEvents": _metadata(tracks, processes, stride) + _span_events(units, tids, pids),
        "displayTimeUnit": "ms",
        "otherData": {"generator": "rollout_kit", "schema_version": S.SCHEMA_VERSION,
                      "lane_tid_stride": stride, "open_spans_dropped": dropped},
    }
    if path is not None:
        Path(path).write_bytes(orjson.dumps(trace))
    return trace
