"""The Chrome trace's layout: which slice goes on which track, the flow chains and the
counter samples, as plain DataFrames (:func:`chrome_layout`), before any JSON is written.
See :mod:`rollout_kit.tracing._frames.chrome` for what the trace shows and why."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ... import schema as S
from .columns import DEFAULT_PROCESS, F64, I64, NO_SESSION, floats, ints, require_columns, strings
from .counters import counter_samples

QUEUED_EVENT = "queued"
"""Name of the event for a task's queue wait (submit → dispatch)."""
SUBMIT_EVENT, DISPATCH_EVENT, CONSUME_EVENT = "submit", "dispatch", "consume"
"""Names of the zero-length lifecycle marks (``cat: lifecycle``)."""
CONTINUE_EVENT = S.CONTINUE
"""Name of the zero-length slice of a continuation after a server abort."""

# slice categories
CAT_PHASE, CAT_QUEUE, CAT_SESSION = "phase", "queue", "session"
CAT_LIFECYCLE, CAT_CONTINUE, CAT_COUNTER = "lifecycle", "continue", "counter"

_QUEUE_SESSION = -1  # pseudo session id of the queued segment
_SPAN_REQUIRED = (S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END)
_SESSION_REQUIRED = (S.TASK_ID, S.SESSION_ID, S.START_TS, S.END_TS)
_EVENT_REQUIRED = (S.TASK_ID, S.SESSION_ID, S.EVENT, S.TS)
_REWARD = "reward"
# order of chain steps that share a timestamp
_STEP_RANK = {SUBMIT_EVENT: 0, DISPATCH_EVENT: 1, CAT_SESSION: 2, CAT_CONTINUE: 3, _REWARD: 4,
              CONSUME_EVENT: 5}
_LIFECYCLE = ((SUBMIT_EVENT, S.SUBMIT_TS), (DISPATCH_EVENT, S.DISPATCH_TS),
              (CONSUME_EVENT, S.CONSUME_TS))


@dataclass
class ChromeLayout:
    """What the Chrome trace will show, before any JSON is written.

    Attributes:
        slices: one row per complete event: ``pid``, ``tid``, ``task``, ``name``, ``cat``,
            ``ts``/``dur`` (µs), ``session``, ``server``, ``status``, ``version``,
            ``continuations`` (NA where not applicable), ``bind_id`` (NA: no flow),
            ``flow_in``, ``flow_out``.
        tracks: one row per thread track: ``pid``, ``tid``, ``task``, ``lane``, ``name``,
            ``sort_index``.
        processes: ``pid``, ``name``, ``sort_index`` of every process used.
        counters: one row per counter sample: ``pid``, ``name``, ``ts`` (µs), one column
            per series (``queued``, ``in_flight``; NaN where the series is not drawn).
        stride: the lane stride of the ``tid`` numbering.
        open_spans_dropped: spans without an end, left out.
    """

    slices: pd.DataFrame
    tracks: pd.DataFrame
    processes: pd.DataFrame
    counters: pd.DataFrame
    stride: int
    open_spans_dropped: int


def _greedy_lanes(start: F64, end: F64) -> list[int]:
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


def _lanes(group: I64, start: F64, end: F64) -> I64:
    """Lane of each interval within its group so that no lane holds overlapping ones.

    Inputs must be sorted by (group, start), group ascending. Groups without any overlap
    (the common case) are handled vectorised; only overlapping groups go through the greedy
    loop, each over its own slice of rows.
    """
    lanes = np.zeros(group.size, dtype=np.int64)
    if group.size < 2:
        return lanes
    run_max = pd.Series(end).groupby(group).cummax().to_numpy()
    same = group[1:] == group[:-1]
    overlap = same & (start[1:] < run_max[:-1])
    if not overlap.any():
        return lanes
    bounds = np.flatnonzero(np.concatenate(([True], ~same, [True])))  # group starts, then n
    firsts = bounds[:-1]
    which = np.searchsorted(group[firsts], np.unique(group[1:][overlap]))
    for a, b in zip(firsts[which].tolist(), bounds[which + 1].tolist(), strict=True):
        lanes[a:b] = _greedy_lanes(start[a:b], end[a:b])
    return lanes


# -- units: the intervals to lay out on tracks ------------------------------------------

def _span_units(spans: pd.DataFrame) -> pd.DataFrame:
    start, end = floats(spans[S.START]), floats(spans[S.END])
    ok = ~(np.isnan(start) | np.isnan(end))
    return pd.DataFrame({
        "task": spans[S.TASK_ID].to_numpy(dtype=np.int64)[ok],
        "session": ints(spans[S.SESSION_ID], NO_SESSION)[ok],
        "name": spans[S.PHASE].astype("string").fillna("?").to_numpy()[ok],
        "cat": CAT_PHASE, "start": start[ok], "end": np.maximum(end[ok], start[ok]),
        "server": strings(spans, S.SERVER, ok), "status": strings(spans, S.STATUS, ok),
        "worker": strings(spans, S.WORKER, ok), "continuations": pd.NA,
    })


def _queue_units(tasks: pd.DataFrame) -> pd.DataFrame | None:
    if S.DISPATCH_TS not in tasks.columns:
        return None
    submit, dispatch = floats(tasks[S.SUBMIT_TS]), floats(tasks[S.DISPATCH_TS])
    q = ~(np.isnan(submit) | np.isnan(dispatch)) & (dispatch > submit)
    return pd.DataFrame({
        "task": tasks[S.TASK_ID].to_numpy(dtype=np.int64)[q], "session": _QUEUE_SESSION,
        "name": QUEUED_EVENT, "cat": CAT_QUEUE, "start": submit[q], "end": dispatch[q],
        "server": None, "status": strings(tasks, S.STATUS, q),
        "worker": strings(tasks, S.WORKER, q), "continuations": pd.NA})


def _session_units(sessions: pd.DataFrame, spans: pd.DataFrame,
                   events: pd.DataFrame | None) -> pd.DataFrame:
    """One ``session N`` slice per session: its own extent, widened to its spans and events."""
    key = ["task", "session"]
    sess = pd.DataFrame({
        "task": sessions[S.TASK_ID].to_numpy(dtype=np.int64),
        "session": ints(sessions[S.SESSION_ID], NO_SESSION),
        "start": floats(sessions[S.START_TS]), "end": floats(sessions[S.END_TS]),
        "server": strings(sessions, S.SERVER), "status": strings(sessions, S.STATUS),
        "continuations": (pd.to_numeric(sessions[S.CONTINUATIONS], errors="coerce")
                          .astype("Int64").to_numpy() if S.CONTINUATIONS in sessions.columns
                          else pd.NA)})
    sess = sess[np.isfinite(sess["start"].to_numpy()) & np.isfinite(sess["end"].to_numpy())
                & (sess["session"].to_numpy() >= 0)]
    hull = spans[spans["session"] >= 0].groupby(key, sort=False).agg(
        s_start=("start", "min"), s_end=("end", "max"), worker=("worker", "first"))
    sess = sess.join(hull, on=key)
    if events is not None and len(events):
        ev = events.groupby(key, sort=False)["ts"].agg(["min", "max"])
        sess = sess.join(ev, on=key)
        sess["s_start"] = np.fmin(sess["s_start"].to_numpy(), sess["min"].to_numpy())
        sess["s_end"] = np.fmax(sess["s_end"].to_numpy(), sess["max"].to_numpy())
    start = np.fmin(sess["start"].to_numpy(), sess["s_start"].to_numpy())
    end = np.fmax(sess["end"].to_numpy(), sess["s_end"].to_numpy())
    return pd.DataFrame({
        "task": sess["task"].to_numpy(), "session": sess["session"].to_numpy(),
        "name": [f"session {s}" for s in sess["session"].tolist()], "cat": CAT_SESSION,
        "start": start, "end": np.maximum(end, start), "server": sess["server"].to_numpy(),
        "status": sess["status"].to_numpy(), "worker": sess["worker"].to_numpy(),
        "continuations": sess["continuations"].to_numpy()})


def _event_frame(events: pd.DataFrame) -> pd.DataFrame:
    ts = floats(events[S.TS])
    kind = events[S.EVENT].astype("string").to_numpy()
    ok = np.isfinite(ts) & (kind == CONTINUE_EVENT)
    version = (pd.to_numeric(events[S.VERSION], errors="coerce").astype("Int64").to_numpy()
               if S.VERSION in events.columns else pd.NA)
    out = pd.DataFrame({"task": events[S.TASK_ID].to_numpy(dtype=np.int64),
                        "session": ints(events[S.SESSION_ID], NO_SESSION), "ts": ts,
                        "version": version})
    return pd.DataFrame(out.loc[ok].reset_index(drop=True))


# -- processes and tracks -------------------------------------------------------------

def _codes(names: list[str]) -> dict[str, int]:
    """Process ids: 0 for the default process, workers 1, 2, … in name order."""
    codes = {n: i + 1 for i, n in enumerate(sorted(set(names) - {DEFAULT_PROCESS}))}
    codes[DEFAULT_PROCESS] = 0
    return codes


def _task_workers(tasks: pd.DataFrame | None) -> pd.Series[Any] | None:
    if tasks is None or S.WORKER not in tasks.columns:
        return None
    return tasks.drop_duplicates(S.TASK_ID).set_index(S.TASK_ID)[S.WORKER].astype("string")


def _unit_workers(units: pd.DataFrame, tasks: pd.DataFrame | None) -> pd.Series[Any]:
    """Each unit's worker: its own ``worker`` column, else its task's worker.

    Without a ``worker`` column on the spans, a task id used by several workers (SPMD ids
    restart at 0 per rank) is attributed to the first worker listing it.
    """
    per_unit = pd.Series(units["worker"].to_numpy(), dtype="string")
    by_task = _task_workers(tasks)
    if by_task is not None:
        per_unit = per_unit.fillna(pd.Series(by_task.reindex(units["task"].to_numpy())
                                             .to_numpy(), dtype="string"))
    return per_unit.fillna(DEFAULT_PROCESS)


def _assign_tracks(units: pd.DataFrame) -> pd.DataFrame:
    """Add ``slane`` and ``lane``: sessions (and the queue wait) of one (pid, task) that
    overlap go to different session lanes ``slane``; overlapping phase spans of one session
    to different sub-lanes (a session slice is on its first); ``lane`` numbers the
    (slane, sub-lane) pairs of a task densely."""
    units = units.sort_values(["pid", "task", "start", "session"], kind="stable",
                              ignore_index=True)
    owner = ["pid", "task"]
    sess = units.groupby([*owner, "session"], sort=False).agg(
        start=("start", "min"), end=("end", "max")).reset_index()
    sess = sess.sort_values([*owner, "start"], kind="stable", ignore_index=True)
    group = np.asarray(sess.groupby(owner, sort=False).ngroup(), dtype=np.int64)
    sess["slane"] = _lanes(group, sess["start"].to_numpy(), sess["end"].to_numpy())
    units = units.merge(sess[[*owner, "session", "slane"]], on=[*owner, "session"], how="left")
    sub = np.zeros(len(units), dtype=np.int64)
    packed = np.flatnonzero(units["cat"].to_numpy() == CAT_PHASE)
    if packed.size:
        p = units.iloc[packed]
        key = np.asarray(p.groupby([*owner, "session"], sort=False).ngroup(), dtype=np.int64)
        start, end = p["start"].to_numpy(), p["end"].to_numpy()
        order = np.lexsort((start, key))
        sub_p = np.empty(packed.size, dtype=np.int64)
        sub_p[order] = _lanes(key[order], start[order], end[order])
        sub[packed] = sub_p
    combined = pd.Series(units["slane"].to_numpy(dtype=np.int64) * 1_000_000 + sub)
    owners = np.asarray(units.groupby(owner, sort=False).ngroup(), dtype=np.int64)
    units["lane"] = (combined.groupby(owners).rank(method="dense")
                     .to_numpy(dtype=np.int64) - 1)
    units["sub"] = sub
    return units


# -- marks and flows --------------------------------------------------------------------

def _marks(tasks: pd.DataFrame, codes: dict[str, int]) -> pd.DataFrame:
    """The lifecycle marks of each task row (submit, dispatch, consume) with its pid."""
    worker = (tasks[S.WORKER].astype("string").fillna(DEFAULT_PROCESS).to_numpy()
              if S.WORKER in tasks.columns else np.full(len(tasks), DEFAULT_PROCESS))
    pid = np.asarray([codes[w] for w in worker.tolist()], dtype=np.int64)
    parts = []
    for name, col in _LIFECYCLE:
        if col not in tasks.columns:
            continue
        ts = floats(tasks[col])
        ok = np.isfinite(ts)
        parts.append(pd.DataFrame({
            "pid": pid[ok], "task": tasks[S.TASK_ID].to_numpy(dtype=np.int64)[ok],
            "name": name, "start": ts[ok], "status": strings(tasks, S.STATUS, ok)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["pid", "task", "name", "start", "status"])


def _chains(steps: pd.DataFrame) -> pd.DataFrame:
    """``bind_id``/``flow_in``/``flow_out`` of chain steps grouped by ``chain`` (a label).

    Steps are ordered by time (ties: submit, dispatch, session, continue, reward, consume);
    a chain of one step gets no flow. Ids count from 1 in chain order.
    """
    steps = steps.sort_values(["chain", "start", "rank"], kind="stable")
    chain = steps["chain"].to_numpy()
    size = steps.groupby("chain", sort=False)["chain"].transform("size").to_numpy()
    pos = steps.groupby("chain", sort=False).cumcount().to_numpy()
    linked = size > 1
    ids = pd.factorize(chain)[0].astype(np.int64) + 1
    return pd.DataFrame({
        "row": steps["row"].to_numpy(),
        "bind_id": pd.arrays.IntegerArray(np.where(linked, ids, 0), ~linked),
        "flow_in": linked & (pos > 0), "flow_out": linked & (pos < size - 1)})


# -- the layout ---------------------------------------------------------------------------

def _lifecycle_slices(tasks: pd.DataFrame, codes: dict[str, int], slanes: pd.DataFrame,
                      lane_of: pd.Series[Any]) -> pd.DataFrame:
    """The submit / dispatch / consume marks, one copy on each session lane of the task
    (a task without any other slice: on lane 0)."""
    marks = _marks(tasks, codes)
    lanes = slanes.merge(marks[["pid", "task"]].drop_duplicates(), on=["pid", "task"],
                         how="right")
    lanes["slane"] = lanes["slane"].fillna(0).astype(np.int64)
    marks = marks.merge(lanes, on=["pid", "task"])
    marks["lane"] = lane_of.reindex(pd.MultiIndex.from_frame(
        marks[["pid", "task", "slane"]])).fillna(0).to_numpy(dtype=np.int64)
    return marks.assign(session=_QUEUE_SESSION, cat=CAT_LIFECYCLE, end=marks["start"],
                        server=None, continuations=None, version=None, sub=0,
                        chain_rank=[_STEP_RANK[n] for n in marks["name"].tolist()])


def _continue_slices(ev: pd.DataFrame, units: pd.DataFrame, default_pid: int,
                     lane_of: pd.Series[Any]) -> pd.DataFrame:
    """One zero-length ``continue`` slice per continuation, on its session's track (a
    session that left no slice: its task's lane 0)."""
    where = (units[units["cat"] != CAT_QUEUE].drop_duplicates(["task", "session"])
             .set_index(["task", "session"])[["pid", "slane"]])
    at = where.reindex(pd.MultiIndex.from_frame(ev[["task", "session"]]))
    pid_of_task = units.drop_duplicates("task").set_index("task")["pid"]
    pid = at["pid"].to_numpy(dtype=np.float64)
    pid = np.where(np.isnan(pid), pid_of_task.reindex(ev["task"].to_numpy())
                   .to_numpy(dtype=np.float64), pid)
    pid = np.where(np.isnan(pid), default_pid, pid).astype(np.int64)
    slane = np.nan_to_num(at["slane"].to_numpy(dtype=np.float64)).astype(np.int64)
    lane = lane_of.reindex(pd.MultiIndex.from_arrays([pid, ev["task"].to_numpy(), slane])
                           ).fillna(0).to_numpy(dtype=np.int64)
    return pd.DataFrame({
        "task": ev["task"].to_numpy(), "session": ev["session"].to_numpy(),
        "name": CONTINUE_EVENT, "cat": CAT_CONTINUE, "start": ev["ts"].to_numpy(),
        "end": ev["ts"].to_numpy(), "server": None, "status": None, "worker": None,
        "continuations": None, "pid": pid, "slane": slane, "lane": lane, "sub": 0,
        "version": ev["version"].to_numpy(), "chain_rank": _STEP_RANK[CAT_CONTINUE]})


def _add_flows(sl: pd.DataFrame) -> None:
    """Set ``bind_id``/``flow_in``/``flow_out``: one chain per (pid, task, session lane)."""
    step = sl["chain_rank"].to_numpy(dtype=np.int64) >= 0
    sl["bind_id"] = pd.array([pd.NA] * len(sl), dtype="Int64")
    sl["flow_in"] = False
    sl["flow_out"] = False
    if not step.any():
        return
    st = sl[step]
    flows = _chains(pd.DataFrame({
        "row": np.flatnonzero(step),
        "chain": st.groupby(["pid", "task", "slane"], sort=False).ngroup().to_numpy(),
        "start": st["start"].to_numpy(), "rank": st["chain_rank"].to_numpy()}))
    rows = flows["row"].to_numpy()
    sl.loc[rows, "bind_id"] = flows["bind_id"].to_numpy()
    sl.loc[rows, "flow_in"] = flows["flow_in"].to_numpy()
    sl.loc[rows, "flow_out"] = flows["flow_out"].to_numpy()


def _slice_frame(sl: pd.DataFrame) -> pd.DataFrame:
    """The :attr:`ChromeLayout.slices` columns: µs times, nullable args."""
    t_start = np.round(sl["start"].to_numpy(dtype=np.float64) * 1e6, 3)  # µs, ns resolution
    t_end = np.round(sl["end"].to_numpy(dtype=np.float64) * 1e6, 3)
    session = sl["session"].to_numpy(dtype=np.int64)
    return pd.DataFrame({
        "pid": sl["pid"].to_numpy(dtype=np.int64), "tid": sl["tid"].to_numpy(dtype=np.int64),
        "task": sl["task"].to_numpy(dtype=np.int64), "lane": sl["lane"].to_numpy(np.int64),
        "name": sl["name"].to_numpy(), "cat": sl["cat"].to_numpy(),
        "ts": t_start, "dur": np.round(t_end - t_start, 3),  # ts + dur: the rounded end
        "session": pd.arrays.IntegerArray(np.maximum(session, 0), session < 0),
        "server": pd.array(sl["server"].to_numpy(), dtype="string"),
        "status": pd.array(sl["status"].to_numpy(), dtype="string"),
        "version": pd.array(sl["version"].to_numpy(), dtype="Int64"),
        "continuations": pd.array(sl["continuations"].to_numpy(), dtype="Int64"),
        "bind_id": pd.array(sl["bind_id"].to_numpy(), dtype="Int64"),
        "flow_in": sl["flow_in"].to_numpy(dtype=bool),
        "flow_out": sl["flow_out"].to_numpy(dtype=bool)})


def _tracks(slices: pd.DataFrame) -> pd.DataFrame:
    tracks = (slices[["pid", "task", "lane", "tid"]].drop_duplicates()
              .sort_values(["pid", "task", "lane"], ignore_index=True))
    n_lanes = int(tracks["lane"].max()) + 1 if len(tracks) else 1
    tracks["name"] = [f"task {t}" if lane == 0 else f"task {t} · lane {lane}"
                      for t, lane in zip(tracks["task"].tolist(), tracks["lane"].tolist(),
                                         strict=True)]
    tracks["sort_index"] = tracks["task"] * n_lanes + tracks["lane"]
    return tracks


def chrome_layout(spans: pd.DataFrame, *, tasks: pd.DataFrame | None = None,
                  sessions: pd.DataFrame | None = None,
                  events: pd.DataFrame | None = None) -> ChromeLayout:
    """Lay the frames out as Chrome trace slices, tracks, flows and counters (no JSON).

    Arguments as for :func:`to_chrome_trace`.

    Raises:
        TraceSchemaError: a frame lacks required columns.
    """
    spans = require_columns(spans, _SPAN_REQUIRED, "spans")
    if tasks is not None:
        tasks = require_columns(tasks, (S.TASK_ID, S.SUBMIT_TS), "tasks")
    if sessions is not None:
        sessions = require_columns(sessions, _SESSION_REQUIRED, "sessions")
    ev = _event_frame(require_columns(events, _EVENT_REQUIRED, "events")) if events is not None \
        else None

    # units: the intervals that decide the tracks (spans, queue waits, sessions)
    span_units = _span_units(spans)
    parts = [span_units]
    if tasks is not None and (queued := _queue_units(tasks)) is not None:
        parts.insert(0, queued)
    if sessions is not None and len(sessions):
        parts.append(_session_units(sessions, span_units, ev))
    parts = [p for p in parts if len(p)]
    units = pd.concat(parts, ignore_index=True) if len(parts) > 1 else (
        parts[0] if parts else span_units)
    workers = _unit_workers(units, tasks)
    names = workers.tolist()
    if tasks is not None and S.WORKER in tasks.columns:
        names += tasks[S.WORKER].astype("string").dropna().tolist()
    codes = _codes(names)
    units["pid"] = np.asarray([codes[w] for w in workers.tolist()], dtype=np.int64)
    units = _assign_tracks(units) if len(units) else units.assign(slane=0, lane=0, sub=0)
    max_task = max([int(units["task"].max()) if len(units) else 0,
                    int(tasks[S.TASK_ID].max()) if tasks is not None and len(tasks) else 0,
                    int(ev["task"].max()) if ev is not None and len(ev) else 0])
    stride = 10 ** len(str(max(max_task, 0) + 1))

    # slices: the units, then the marks on the tracks of the lanes they belong to
    lane_of = (units[units["sub"] == 0].drop_duplicates(["pid", "task", "slane"])
               .set_index(["pid", "task", "slane"])["lane"])
    cat = units["cat"].to_numpy()
    slices = [units.assign(version=None, chain_rank=np.select(  # -1: not a chain step
        [cat == CAT_SESSION, (cat == CAT_PHASE) & (units["name"].to_numpy() == _REWARD)],
        [_STEP_RANK[CAT_SESSION], _STEP_RANK[_REWARD]], -1))]
    if tasks is not None and len(tasks):
        slices.append(_lifecycle_slices(
            tasks, codes, units[["pid", "task", "slane"]].drop_duplicates(), lane_of))
    if ev is not None and len(ev):
        slices.append(_continue_slices(ev, units, codes[DEFAULT_PROCESS], lane_of))
    slices = [x for x in slices if len(x)]
    sl = pd.concat(slices, ignore_index=True) if len(slices) > 1 else (
        slices[0] if slices else units.assign(version=None, chain_rank=-1))
    sl["tid"] = (sl["lane"].to_numpy(dtype=np.int64) * stride
                 + sl["task"].to_numpy(dtype=np.int64) + 1)
    _add_flows(sl)
    out = _slice_frame(sl)

    counters, servers = counter_samples(spans, tasks, sessions, codes)
    used = set(out["pid"].tolist()) | set(counters["pid"].tolist())
    procs = [(pid, name if name == DEFAULT_PROCESS else f"worker {name}")
             for name, pid in codes.items() if pid in used]
    processes = pd.DataFrame(sorted([*procs, *servers.items()]), columns=["pid", "name"])
    processes["sort_index"] = processes["pid"]
    return ChromeLayout(slices=out, tracks=_tracks(out), processes=processes,
                        counters=counters, stride=stride,
                        open_spans_dropped=int(len(spans) - len(span_units)))
