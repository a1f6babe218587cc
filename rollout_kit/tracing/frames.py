"""Build the ``tasks``, ``sessions`` and ``spans`` DataFrames from a store snapshot.

Everything is vectorised over numpy arrays: the sessions/spans of one task are consecutive
rows, so owner rows come from ``np.repeat``, per-phase sums from one ``np.bincount`` and
per-phase wall times (the union of a phase's spans) from one near-linear sort of the spans
that share a ``(task, phase)`` or ``(session, phase)`` with another (:func:`_union_seconds`).
Column names and order come from :mod:`rollout_kit.tracing.schema`; dtypes are fixed:
``status`` and ``phase`` are categoricals, times are ``float64`` seconds since the tracer's
epoch (NaN when missing), counts are nullable ``Int64``, strings are ``string``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import phases
from . import schema as S
from .store import FLAG_CLOSED_AT_FINALIZE, FLAG_RAISED, MISSING, AttrValue, Snapshot

__all__ = ["Traces", "build_traces"]

_STATUS_DTYPE = pd.CategoricalDtype(list(S.STATUSES))
_STRING = pd.StringDtype()
# fixed dtypes of the well-known attribute columns
_SESSION_ATTR_DTYPES: dict[str, str] = {
    S.SERVER: "string", S.PROMPT_TOKENS: "Int64", S.COMPLETION_TOKENS: "Int64",
    S.STOP_REASON: "string", S.TTFT_S: "float64", S.ITL_S: "float64",
    S.CONTINUATIONS: "Int64", S.RETRIES: "Int64",
}
_PHASE_FREE = (S.STATUS, S.START_TS, S.END_TS, S.TOTAL_S)


@dataclass
class Traces:
    """The three trace DataFrames plus the clock anchor they are relative to.

    Attributes:
        tasks: one row per task, indexed by ``task_id``.
        sessions: one row per session, indexed by ``(task_id, session_id)``.
        spans: one row per phase span (tidy), the input of a latency timeline.
        wall_epoch: Unix time of ``t = 0``; ``wall_epoch + tasks.submit_ts`` is a Unix time.
    """

    tasks: pd.DataFrame
    sessions: pd.DataFrame
    spans: pd.DataFrame
    wall_epoch: float

    def to_datetime(self, seconds: pd.Series | float) -> Any:
        """Convert seconds since the epoch (a column or a number) to UTC datetimes."""
        if isinstance(seconds, pd.Series):
            return pd.to_datetime(seconds + self.wall_epoch, unit="s", utc=True)
        return pd.to_datetime(float(seconds) + self.wall_epoch, unit="s", utc=True)


def _seconds(ns: np.ndarray, epoch_ns: int) -> np.ndarray:
    out = (ns - epoch_ns).astype(np.float64) / 1e9
    out[ns == MISSING] = np.nan
    return out


def _infer(values: list[AttrValue]) -> str:
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if not kinds:
        return "object"
    if kinds == {bool}:
        return "boolean"
    if kinds == {int}:
        return "Int64"
    if kinds <= {int, float}:
        return "float64"
    if kinds == {str}:
        return "string"
    return "object"


def _column(n: int, rows: np.ndarray, values: list[AttrValue], dtype: str | None) -> Any:
    """A length-``n`` column with ``values`` at ``rows`` and NA elsewhere."""
    kind = dtype or _infer(values)
    try:
        if kind == "Int64":
            data = np.zeros(n, dtype=np.int64)
            mask = np.ones(n, dtype=bool)
            if values:
                data[rows] = np.asarray(values, dtype=np.int64)
                mask[rows] = False
            return pd.arrays.IntegerArray(data, mask)
        if kind == "float64":
            f = np.full(n, np.nan)
            if values:
                f[rows] = np.asarray(values, dtype=np.float64)
            return f
        if kind == "boolean":
            b = np.zeros(n, dtype=bool)
            bmask = np.ones(n, dtype=bool)
            if values:
                b[rows] = np.asarray(values, dtype=bool)
                bmask[rows] = False
            return pd.arrays.BooleanArray(b, bmask)
        if kind == "string":
            obj = np.full(n, None, dtype=object)
            if values:
                obj[rows] = np.asarray(values, dtype=object)
            return pd.array(obj, dtype=_STRING)
    except (TypeError, ValueError, OverflowError):
        pass  # a well-known column holding unexpected types: fall back to object
    obj = np.full(n, None, dtype=object)
    if values:
        obj[rows] = np.asarray([*values, None], dtype=object)[:-1]
    return obj


def _strings(values: list[str | None]) -> Any:
    return pd.array(np.asarray([*values, None], dtype=object)[:-1], dtype=_STRING)


def _int_sums(n: int, owner: np.ndarray, col: Any) -> Any:
    """Per-owner sums of a nullable Int64 column; NA where no row had a value."""
    if isinstance(col, pd.arrays.IntegerArray):
        valid = ~np.asarray(col.isna())
        data = col.to_numpy(dtype=np.int64, na_value=0)
    else:  # object fallback: sum what is numeric
        s = pd.to_numeric(pd.Series(col), errors="coerce")
        valid = s.notna().to_numpy()
        data = s.fillna(0).to_numpy(dtype=np.int64)
    sums = np.bincount(owner[valid], weights=data[valid], minlength=n).astype(np.int64)
    counts = np.bincount(owner[valid], minlength=n)
    return pd.arrays.IntegerArray(sums, counts == 0)


def _union_seconds(owner: np.ndarray, phase: np.ndarray, start: np.ndarray, end: np.ndarray,
                   base: np.ndarray, n: int, n_phase: int) -> np.ndarray:
    """Wall seconds per ``(owner, phase)``: the length of the union of those spans.

    ``owner`` is a row in ``[0, n)`` per span, or ``-1`` for spans to leave out; an owner (a
    task or a session) lies within one task, and ``base`` is the earliest span start of
    the span's task. ``start``/``end``/``base`` are int64 ns. Returns an ``(n, n_phase)``
    float64 array.

    A span alone in its group is its own union (one ``bincount``). The others are sorted by
    one int64 key, ``group * width + start - base``: rows are already in task order, so
    only spans within a task are out of order and the stable sort (timsort) runs in
    near-linear time. Ends get the same key; a running max of them then restarts at each
    group by itself, and each span adds what it reaches past the ends before it:
    ``max(0, end - max(start, running max before))``. Written with few temporaries: this
    runs over every span of a million-session run.
    """
    size = n * n_phase
    group = owner * n_phase
    group += phase
    dur = end - start
    np.maximum(dur, 0, out=dur)  # a clock step backwards must not count negative time
    if owner.size and owner.min() < 0:  # spans of no owner (task-level spans, for sessions)
        keep = owner >= 0
        group, start, dur, base = group[keep], start[keep], dur[keep], base[keep]
    multi = np.bincount(group, minlength=size)[group] > 1
    if not multi.any():
        return (np.bincount(group, weights=dur, minlength=size) / 1e9).reshape(n, n_phase)
    out = np.zeros(size)
    if not multi.all():
        single = ~multi
        out += np.bincount(group[single], weights=dur[single], minlength=size)
        group, start, dur, base = group[multi], start[multi], dur[multi], base[multi]
    rel_e = start - base
    rel_e += dur
    width = int(rel_e.max()) + 1
    fits = size * width < 2**63
    if fits:
        key_e = group * width
        key_e += rel_e
        key_s = key_e - dur
        order = np.argsort(key_s, kind="stable")
        key_s, key_e, group = key_s[order], key_e[order], group[order]
        run = np.maximum.accumulate(key_e)  # < (group + 1) * width: restarts at each group
    else:  # tasks so long that the key would overflow int64: the slower way
        order = np.lexsort((rel_e - dur, group))
        key_e, group = rel_e[order], group[order]
        key_s = key_e - dur[order]
        run = pd.Series(key_e).groupby(group).cummax().to_numpy()
    prev = np.empty_like(run)  # running max of the ends before each span, then its gain
    prev[0] = key_s[0]
    prev[1:] = run[:-1]
    if not fits:
        prev[np.flatnonzero(group[1:] != group[:-1]) + 1] = 0  # first of a group: all of it
    np.maximum(prev, key_s, out=prev)
    np.subtract(key_e, prev, out=prev)
    np.maximum(prev, 0, out=prev)
    out += np.bincount(group, weights=prev, minlength=size)
    return (out / 1e9).reshape(n, n_phase)


def build_traces(snap: Snapshot, epoch_ns: int, wall_epoch: float) -> Traces:
    """Build all three frames from ``snap``; times are seconds since ``epoch_ns``."""
    names = phases.registered_phases()
    n_phase = len(names)
    n_task, n_sess, n_span = len(snap.task_id), len(snap.session_id), len(snap.span_start)

    # -- owners ---------------------------------------------------------------------------
    task_rows = np.arange(n_task)
    sess_task = np.repeat(task_rows, snap.n_sessions)
    span_task = np.repeat(task_rows, snap.n_spans)
    sess_first = np.concatenate(([0], np.cumsum(snap.n_sessions, dtype=np.int64)[:-1])) \
        if n_task else np.empty(0, dtype=np.int64)
    local = snap.span_session.astype(np.int64)
    has_sess = local >= 0
    span_sess = np.where(has_sess, sess_first[span_task] + local if n_span else local, -1)
    dur = (snap.span_end - snap.span_start).astype(np.float64) / 1e9

    # per-phase seconds: wall time (union of the spans) per task and per session, and the
    # plain sum of span durations per task (parallel sessions add up: session-seconds)
    task_sum = np.bincount(span_task * n_phase + snap.span_phase, weights=dur,
                           minlength=n_task * n_phase).astype(np.float64).reshape(n_task, n_phase)
    span_base = np.empty(0, dtype=np.int64)  # per span: the earliest span start of its task
    if n_span:
        with_spans = snap.n_spans > 0
        span_first = np.cumsum(snap.n_spans) - snap.n_spans
        span_base = np.repeat(np.minimum.reduceat(snap.span_start, span_first[with_spans]),
                              snap.n_spans[with_spans])
    task_wall = _union_seconds(span_task, snap.span_phase, snap.span_start, snap.span_end,
                               span_base, n_task, n_phase)
    sess_wall = _union_seconds(span_sess, snap.span_phase, snap.span_start, snap.span_end,
                               span_base, n_sess, n_phase)

    # -- sessions -------------------------------------------------------------------------
    s_start = _seconds(snap.session_start, epoch_ns)
    s_end = _seconds(snap.session_end, epoch_ns)
    s_cols: dict[str, Any] = {
        S.STATUS: pd.Categorical.from_codes(snap.session_status, dtype=_STATUS_DTYPE),
        S.START_TS: s_start, S.END_TS: s_end, S.TOTAL_S: s_end - s_start,
    }
    for name, dtype in _SESSION_ATTR_DTYPES.items():
        rows, values = snap.session_attrs.get(name, (np.empty(0, np.int64), []))
        s_cols[name] = _column(n_sess, rows, values, dtype)
    for j, ph in enumerate(names):
        s_cols[S.phase_column(ph)] = sess_wall[:, j]
    for name, (rows, values) in snap.session_attrs.items():
        if name not in s_cols:
            s_cols[name] = _column(n_sess, rows, values, None)
    sess_index = pd.MultiIndex.from_arrays(
        [snap.task_id[sess_task], snap.session_id], names=[S.TASK_ID, S.SESSION_ID])
    sessions = pd.DataFrame(s_cols, index=sess_index)

    # -- tasks ----------------------------------------------------------------------------
    ts = {ev: _seconds(m, epoch_ns) for ev, m in zip(S.LIFECYCLE_EVENTS, snap.marks, strict=True)}
    # late marks (e.g. consume after finalize): the last one per (task, event) wins
    if len(snap.mark_task):
        ids = pd.Index(snap.task_id)
        if ids.is_unique:  # common case (one id source): plain int hash lookup
            ipos = ids.get_indexer(snap.mark_task)
            found = ipos >= 0
            pos = ipos.astype(np.float64)
        else:
            key = pd.Series(task_rows, index=pd.MultiIndex.from_arrays(
                [snap.worker, snap.task_id]))
            key = key[~key.index.duplicated(keep="last")]
            pos = key.reindex(pd.MultiIndex.from_arrays(
                [snap.mark_worker, snap.mark_task])).to_numpy()
            found = ~np.isnan(pos)
        for code, ev in enumerate(S.LIFECYCLE_EVENTS):
            sel = found & (snap.mark_event == code)
            ts[ev][pos[sel].astype(np.int64)] = (snap.mark_ts[sel] - epoch_ns) / 1e9
    workers = np.asarray([*snap.workers, None], dtype=object)[:-1]
    t_cols: dict[str, Any] = {
        S.STATUS: pd.Categorical.from_codes(snap.status, dtype=_STATUS_DTYPE),
        S.REASON: _strings(snap.reason), S.ERROR: _strings(snap.error),
        S.WORKER: pd.array(workers[snap.worker] if n_task else workers[:0], dtype=_STRING),
        S.SUBMIT_TS: ts["submit"], S.DISPATCH_TS: ts["dispatch"], S.START_TS: ts["start"],
        S.END_TS: ts["end"], S.CONSUME_TS: ts["consume"],
        S.QUEUE_S: ts["dispatch"] - ts["submit"], S.RUN_S: ts["end"] - ts["start"],
        S.TOTAL_S: ts["end"] - ts["submit"],
        S.N_SESSIONS: snap.n_sessions.astype(np.int64),
        S.PROMPT_TOKENS: _int_sums(n_task, sess_task, s_cols[S.PROMPT_TOKENS]),
        S.COMPLETION_TOKENS: _int_sums(n_task, sess_task, s_cols[S.COMPLETION_TOKENS]),
    }
    for j, ph in enumerate(names):
        t_cols[S.phase_column(ph)] = task_wall[:, j]
    for j, ph in enumerate(names):
        t_cols[S.phase_session_column(ph)] = task_sum[:, j]
    for name, (rows, values) in snap.task_attrs.items():
        if name not in t_cols:
            t_cols[name] = _column(n_task, rows, values, None)
    tasks = pd.DataFrame(t_cols, index=pd.Index(snap.task_id, name=S.TASK_ID, dtype=np.int64))

    # -- spans ----------------------------------------------------------------------------
    server = s_cols[S.SERVER]
    span_server = pd.array(np.full(n_span, None, dtype=object), dtype=_STRING)
    if n_span and n_sess:
        span_server[has_sess] = server[span_sess[has_sess]]
    spans = pd.DataFrame({
        S.TASK_ID: snap.task_id[span_task],
        S.SESSION_ID: pd.arrays.IntegerArray(
            np.where(has_sess, snap.session_id[np.maximum(span_sess, 0)] if n_sess else 0, 0)
            .astype(np.int64), ~has_sess),
        S.PHASE: pd.Categorical.from_codes(snap.span_phase, dtype=pd.CategoricalDtype(names)),
        S.START: _seconds(snap.span_start, epoch_ns), S.END: _seconds(snap.span_end, epoch_ns),
        S.DURATION: dur, S.SERVER: span_server,
        S.STATUS: pd.Categorical.from_codes(snap.status[span_task], dtype=_STATUS_DTYPE),
        S.CLOSED_AT_FINALIZE: (snap.span_flags & FLAG_CLOSED_AT_FINALIZE).astype(bool),
        S.RAISED: (snap.span_flags & FLAG_RAISED).astype(bool),
    })
    # tasks finish out of order; frames are in task-id order (stable for SPMD duplicates)
    if not tasks.index.is_monotonic_increasing:
        tasks = tasks.sort_index(kind="stable")
    if not sessions.index.is_monotonic_increasing:
        sessions = sessions.sort_index(kind="stable")
    if not math.isfinite(wall_epoch):
        wall_epoch = float("nan")
    return Traces(tasks=tasks, sessions=sessions, spans=spans, wall_epoch=wall_epoch)
