"""Build the ``tasks``, ``sessions`` and ``spans`` DataFrames from a store snapshot.

Everything is vectorised over numpy arrays: the sessions/spans of one task are consecutive
rows, so owner rows come from ``np.repeat``, per-phase sums from one ``np.bincount`` and
per-phase wall times (the union of a phase's spans) from one near-linear sort of the spans
that share a ``(task, phase)`` or ``(session, phase)`` with another (:func:`_union_seconds`).
Column names and order come from ``rollout_kit.tracing.schema``; dtypes are fixed:
``status`` and ``phase`` are categoricals, times are ``float64`` seconds since the tracer's
epoch (NaN when missing), counts are nullable ``Int64``, strings are ``string``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from .. import _phases as phases
from .. import schema as S
from .._store import (
    FLAG_CLOSED_AT_FINALIZE,
    FLAG_RAISED,
    MISSING,
    AttrValue,
    AttrValues,
    Snapshot,
)
from .._store.metrics import MetricRows
from .._store.steps import SAMPLE_FIELDS, STEP_FIELDS, StepRows

_STATUS_DTYPE = pd.CategoricalDtype(list(S.STATUSES))
_STRING = pd.StringDtype()
# fixed dtypes of the well-known attribute columns
_SESSION_ATTR_DTYPES: dict[str, str] = {
    S.SERVER: "string", S.PROMPT_TOKENS: "Int64", S.COMPLETION_TOKENS: "Int64",
    S.STOP_REASON: "string", S.TTFT_S: "float64", S.ITL_S: "float64",
    S.CONTINUATIONS: "Int64", S.RETRIES: "Int64",
}
_PHASE_FREE = (S.STATUS, S.START_TS, S.END_TS, S.TOTAL_S)
_EVENT_DTYPE = pd.CategoricalDtype(list(S.SESSION_EVENTS))


def empty_events() -> pd.DataFrame:
    """An events frame without rows (the columns and dtypes of ``Traces.events``)."""
    return pd.DataFrame({
        S.TASK_ID: np.empty(0, dtype=np.int64),
        S.SESSION_ID: pd.array([], dtype="Int64"),
        S.EVENT: pd.Categorical([], dtype=_EVENT_DTYPE),
        S.TS: np.empty(0),  # float64
        S.VERSION: pd.array([], dtype="Int64"),
    })


def empty_server_metrics() -> pd.DataFrame:
    """A server metrics frame without rows (the columns and dtypes of
    ``Traces.server_metrics``)."""
    return build_server_metrics(MetricRows(), 0)


def empty_steps() -> pd.DataFrame:
    """A steps frame without rows (the columns and dtypes of ``Traces.steps``)."""
    return build_steps(StepRows(), 0)[0]


def empty_step_samples() -> pd.DataFrame:
    """A step samples frame without rows (``Traces.step_samples``)."""
    return build_steps(StepRows(), 0)[1]


def build_steps(rows: StepRows, epoch_ns: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The steps frame (index ``step``) and the step samples frame (index ``task_id``)."""
    steps = list(zip(*rows.steps, strict=True)) or [()] * len(STEP_FIELDS)
    col = dict(zip(STEP_FIELDS, steps, strict=True))
    frame: dict[str, Any] = {S.VERSION: pd.array(col[S.VERSION], dtype="Int64")}
    for name in S.STEP_TIMES:
        frame[name] = np.array([np.nan if v is None else (v - epoch_ns) / 1e9
                                for v in col[name]], dtype=np.float64)
    frame[S.SAMPLES] = pd.array(col[S.SAMPLES], dtype="Int64")
    frame[S.TOKENS] = pd.array(col[S.TOKENS], dtype="Int64")
    frame[S.STEP_STATUS] = pd.array(col[S.STEP_STATUS], dtype=_STRING)
    frame[S.ERROR] = pd.array(col[S.ERROR], dtype=_STRING)
    steps_df = pd.DataFrame(frame, index=pd.Index(np.asarray(col[S.STEP], dtype=np.int64),
                                                  name=S.STEP))
    samples = list(zip(*rows.samples, strict=True)) or [()] * len(SAMPLE_FIELDS)
    scol = dict(zip(SAMPLE_FIELDS, samples, strict=True))
    samples_df = pd.DataFrame(
        {name: (np.asarray(scol[name], dtype=bool) if name == S.PARTIAL
                else np.asarray(scol[name], dtype=np.int64))
         for name in S.STEP_SAMPLE_COLUMNS},
        index=pd.Index(np.asarray(scol[S.TASK_ID], dtype=np.int64), name=S.TASK_ID))
    return steps_df.sort_index(kind="stable"), samples_df


def _categories(codes: np.ndarray, names: list[str]) -> Any:
    return pd.Categorical.from_codes(codes.astype(np.int32, copy=False),
                                     dtype=pd.CategoricalDtype(pd.Index(names, dtype=object)))


def build_server_metrics(rows: MetricRows, epoch_ns: int) -> pd.DataFrame:
    """The server metrics frame of ``rows`` (:data:`~._schema.SERVER_METRIC_COLUMNS`): ``ts``
    seconds since ``epoch_ns``, ``server`` / ``metric`` / ``labels`` categoricals, ``value``
    float64; in time order (stable: a scrape's samples keep their order)."""
    ts = (rows.ts - epoch_ns) / 1e9
    order = None
    if len(ts) > 1 and (np.diff(ts) < 0).any():
        order = np.argsort(ts, kind="stable")

    def pick(a: np.ndarray) -> np.ndarray:
        return a if order is None else a[order]

    return pd.DataFrame({
        S.TS: pick(ts),
        S.SERVER: _categories(pick(rows.server), rows.servers),
        S.METRIC: _categories(pick(rows.metric), rows.metrics),
        S.LABELS: _categories(pick(rows.labels), rows.label_sets),
        S.VALUE: pick(rows.value),
    })


@dataclass
class Traces:
    """The three trace DataFrames plus the clock anchor they are relative to.

    Attributes:
        tasks: one row per task, indexed by ``task_id``.
        sessions: one row per session, indexed by ``(task_id, session_id)``.
        spans: one row per phase span (tidy), the input of a latency timeline.
        wall_epoch: Unix time of ``t = 0``; ``wall_epoch + tasks.submit_ts`` is a Unix time.
        events: one row per timestamped session event (``task_id``, ``session_id``,
            ``event``, ``ts`` seconds, ``version``): a ``continue`` when the engine resent a
            generation a server had aborted, with the weight version it resumed under.
        server_metrics: one row per sample scraped from a server's ``/metrics`` during the
            run (``ts`` seconds on the same clock, ``server``, ``metric``, ``labels``,
            ``value``; :class:`~rollout_kit.engines.MetricsScraper`); empty when nothing was
            scraped.
            :func:`rollout_kit.analysis.server_series` turns it into named series.
        steps: one row per training step of an RL loop (:mod:`rollout_kit.rl`), indexed by
            ``step`` (:data:`~rollout_kit.tracing.schema.STEP_COLUMNS`); empty otherwise.
        step_samples: one row per result an RL step consumed, indexed by ``task_id``
            (:data:`~rollout_kit.tracing.schema.STEP_SAMPLE_COLUMNS`).
    """

    tasks: pd.DataFrame
    sessions: pd.DataFrame
    spans: pd.DataFrame
    wall_epoch: float
    events: pd.DataFrame = field(default_factory=empty_events)
    server_metrics: pd.DataFrame = field(default_factory=empty_server_metrics)
    steps: pd.DataFrame = field(default_factory=empty_steps)
    step_samples: pd.DataFrame = field(default_factory=empty_step_samples)

    def to_datetime(self, seconds: pd.Series | float) -> Any:
        """Convert seconds since the epoch (a column or a number) to UTC datetimes."""
        if isinstance(seconds, pd.Series):
            return pd.to_datetime(seconds + self.wall_epoch, unit="s", utc=True)
        return pd.to_datetime(float(seconds) + self.wall_epoch, unit="s", utc=True)


def _seconds(ns: np.ndarray, epoch_ns: int) -> np.ndarray:
    out = (ns - epoch_ns) / 1e9  # float64
    out[ns == MISSING] = np.nan
    return out


# the column kind of an attribute array read from Parquet (one Python type per array)
_ARRAY_KINDS = {np.dtype(bool): "boolean", np.dtype(np.int64): "Int64",
                np.dtype(np.float64): "float64", np.dtype(object): "string"}


def _infer(values: AttrValues) -> str:
    if isinstance(values, np.ndarray):
        return _ARRAY_KINDS.get(values.dtype, "object")
    if isinstance(values, pd.Categorical):
        return "string"  # of str categories (read from Parquet)
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


def _column(n: int, rows: np.ndarray, values: AttrValues, dtype: str | None) -> Any:
    """A length-``n`` column with ``values`` at ``rows`` and NA elsewhere.

    ``values`` is a list, or a typed array or a Categorical of str (read from Parquet) that
    gives the same column as the list of its Python values would.
    """
    if not isinstance(values, list) and dtype not in (None, _infer(values)):
        # a well-known column of another type: the list rules
        values = cast("list[AttrValue]", values.tolist())
    kind = dtype or _infer(values)
    if isinstance(values, pd.Categorical):  # strings by code: no Python object per row
        codes = np.full(n, -1)
        codes[rows] = values.codes
        words = pd.array(np.asarray(values.categories), dtype=_STRING)
        return words.take(codes, allow_fill=True)
    if kind in ("Int64", "boolean") and isinstance(values, list) and None in values:
        # an explicit None among ints or bools is NA, as the rows without a value (not
        # False, nor a reason to fall back to an object column)
        keep = [v is not None for v in values]
        rows = rows[np.asarray(keep, dtype=bool)]
        values = [v for v in values if v is not None]
    try:
        if kind == "Int64":
            data = np.zeros(n, dtype=np.int64)
            mask = np.ones(n, dtype=bool)
            if len(values):
                data[rows] = np.asarray(values, dtype=np.int64)
                mask[rows] = False
            return pd.arrays.IntegerArray(data, mask)
        if kind == "float64":
            f = np.full(n, np.nan)
            if len(values):
                f[rows] = np.asarray(values, dtype=np.float64)
            return f
        if kind == "boolean":
            b = np.zeros(n, dtype=bool)
            bmask = np.ones(n, dtype=bool)
            if len(values):
                b[rows] = np.asarray(values, dtype=bool)
                bmask[rows] = False
            return pd.arrays.BooleanArray(b, bmask)
        if kind == "string":
            obj = np.full(n, None)
            if len(values):
                obj[rows] = np.asarray(values, dtype=object)
            return pd.array(obj, dtype=_STRING)
    except (TypeError, ValueError, OverflowError):
        pass  # a well-known column holding unexpected types: fall back to object
    obj = np.full(n, None)
    if len(values):
        obj[rows] = np.asarray([*values, None])[:-1]  # the None: an object array
    return obj


def _strings(values: list[str | None]) -> Any:
    return pd.array(np.asarray([*values, None])[:-1], dtype=_STRING)


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


def _union_seconds(group: np.ndarray, start: np.ndarray, end: np.ndarray, dur: np.ndarray,
                   base: np.ndarray | int, size: int, *, singles: bool) -> np.ndarray:
    """Wall seconds per group: the length of the union of the group's spans.

    ``group`` is a code in ``[0, size)`` per span (an owner's row times the number of phases
    plus the phase); a group lies within one task. ``base`` is at most the earliest span
    start of the span's task: one number, or one per span (the task's earliest start) when
    a single number would make ``size * (end - base)`` overflow int64. ``start``/``end``/
    ``base`` are int64 ns, ``dur`` float seconds.
    With ``singles``, spans alone in their group are taken as they are (one ``bincount``)
    and only the others are sorted. Returns ``size`` float64 seconds.

    The spans are sorted by one int64 key, ``group * width + start - base``: rows are in
    task order already, so only spans within a task are out of order and the stable sort
    (timsort) runs in near-linear time. Ends get the same key; a running max of them then
    restarts at each group by itself, and each span adds what it reaches past the ends
    before it: ``max(0, end - max(start, running max before))``. Written with few
    temporaries: this runs over every span of a million-session run.
    """
    count = np.bincount(group, minlength=size)
    if singles:
        multi = count[group] > 1
        if not multi.any():
            return np.bincount(group, weights=np.maximum(dur, 0.0), minlength=size
                               ).astype(np.float64, copy=False)  # int64 when empty
    out = np.zeros(size)
    if singles:
        if not multi.all():
            single = ~multi
            out += np.bincount(group[single], weights=np.maximum(dur[single], 0.0),
                               minlength=size)
            group, start, end = group[multi], start[multi], end[multi]
            if isinstance(base, np.ndarray):
                base = base[multi]
            count = np.bincount(group, minlength=size)
    if not group.size:
        return out
    key_e = np.maximum(end, start)  # a clock step back must neither count nor reorder
    key_e -= base
    width = int(key_e.max()) + 1
    if size * width < 2**63:
        key_s = group * width
        key_e += key_s
        key_s += start
        key_s -= base
        order = np.argsort(key_s, kind="stable")
        key_s = key_s[order]
        key_e = key_e[order]
        del order
        run = np.maximum.accumulate(key_e)  # < (group + 1) * width: restarts at each group
        np.maximum(key_s[1:], run[:-1], out=key_s[1:])
        del run
        gain = np.subtract(key_e, key_s, out=key_e)
        np.maximum(gain, 0, out=gain)
        # groups come in ascending order, ``count`` rows each
        present = np.flatnonzero(count)
        firsts = (np.cumsum(count) - count)[present]
        out[present] += np.add.reduceat(gain, firsts) / 1e9
    else:  # tasks so long that the key would overflow int64: the slower way
        key_s = start - base
        order = np.lexsort((key_s, group))
        key_s, key_e, group = key_s[order], key_e[order], group[order]
        run = pd.Series(key_e).groupby(group).cummax().to_numpy()
        prev = np.concatenate((key_s[:1], run[:-1]))
        prev[np.flatnonzero(group[1:] != group[:-1]) + 1] = 0  # a group's first span: all of it
        gain = np.maximum(key_e - np.maximum(key_s, prev), 0)
        out += np.bincount(group, weights=gain / 1e9, minlength=size)
    return out


def _phase_seconds(snap: Snapshot, span_task: np.ndarray, span_sess: np.ndarray,
                   has_sess: np.ndarray, dur: np.ndarray, n_phase: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-phase seconds: wall time per task, summed span seconds per task (parallel
    sessions add up: session-seconds), and wall time per session; ``(rows, n_phase)`` each.
    """
    n_task, n_sess = len(snap.task_id), len(snap.session_id)
    task_key = span_task * n_phase + snap.span_phase
    task_sum = np.bincount(task_key, weights=dur, minlength=n_task * n_phase
                           ).astype(np.float64).reshape(n_task, n_phase)
    # sort keys are ``group * width + start - base``: one base for the whole run while the
    # keys fit in int64, else per span the earliest span start of its task (shorter widths)
    span_base: np.ndarray | int = 0
    if len(span_task):
        span_base = int(snap.span_start.min())
        width = int(snap.span_end.max()) - span_base + 1
        if max(n_task, n_sess) * n_phase * width >= 2**63:
            with_spans = snap.n_spans > 0
            span_first = np.cumsum(snap.n_spans) - snap.n_spans
            span_base = np.repeat(np.minimum.reduceat(snap.span_start, span_first[with_spans]),
                                  snap.n_spans[with_spans])
    task_wall = _union_seconds(task_key, snap.span_start, snap.span_end, dur, span_base,
                               n_task * n_phase, singles=False).reshape(n_task, n_phase)
    del task_key
    sess_key = span_sess * n_phase + snap.span_phase
    start, end = snap.span_start, snap.span_end
    if not has_sess.all():  # task-level spans belong to no session
        sess_key, start, end = sess_key[has_sess], start[has_sess], end[has_sess]
        dur = dur[has_sess]
        if isinstance(span_base, np.ndarray):
            span_base = span_base[has_sess]
    sess_wall = _union_seconds(sess_key, start, end, dur, span_base, n_sess * n_phase,
                               singles=True).reshape(n_sess, n_phase)
    return task_wall, task_sum, sess_wall


#: a session attribute: when its first request reached the server, by the server's clock (Unix
#: seconds, as SGLang's ``meta_info.request_received_ts``); the frame adds it on the trace
#: clock as ``server_start_ts``, the column the OTLP join of vLLM's spans gives
SERVER_START_WALL = "server_start_wall"


def build_traces(snap: Snapshot, epoch_ns: int, wall_epoch: float) -> Traces:
    """Build all three frames from ``snap``; times are seconds since ``epoch_ns``."""
    names = phases.registered_phases()
    n_phase = len(names)
    n_task, n_sess, n_span = len(snap.task_id), len(snap.session_id), len(snap.span_start)

    # -- owners ---------------------------------------------------------------------------
    task_rows = np.arange(n_task)
    sess_task = np.repeat(task_rows, snap.n_sessions)
    span_task = np.repeat(task_rows, snap.n_spans)
    sess_first = np.cumsum(snap.n_sessions) - snap.n_sessions
    local = snap.span_session.astype(np.int64)
    has_sess = local >= 0
    span_sess = np.where(has_sess, sess_first[span_task] + local, -1)
    dur = (snap.span_end - snap.span_start) / 1e9  # float64

    task_wall, task_sum, sess_wall = _phase_seconds(snap, span_task, span_sess, has_sess, dur,
                                                    n_phase)

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
            pos = ipos
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
    workers = np.asarray([*snap.workers, None])[:-1]
    t_cols: dict[str, Any] = {
        S.STATUS: pd.Categorical.from_codes(snap.status, dtype=_STATUS_DTYPE),
        S.REASON: _strings(snap.reason), S.ERROR: _strings(snap.error),
        S.WORKER: pd.array(workers[snap.worker], dtype=_STRING),
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
    if isinstance(server, pd.api.extensions.ExtensionArray) and n_sess:
        span_server = server.take(span_sess, allow_fill=True)  # -1 (no session): NA
    else:
        span_server = pd.array(np.full(n_span, None), dtype=_STRING)
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
        sessions = sessions.sort_index()  # a MultiIndex: a stable lexsort
    if not math.isfinite(wall_epoch):
        wall_epoch = math.nan
    if SERVER_START_WALL in sessions.columns:  # a server's own stamp: onto the trace clock
        sessions["server_start_ts"] = pd.to_numeric(sessions[SERVER_START_WALL],
                                                    errors="coerce").astype("float64") \
            - wall_epoch
    events = _events(snap, sess_first, epoch_ns)
    steps, step_samples = build_steps(snap.steps, epoch_ns)
    return Traces(tasks=tasks, sessions=sessions, spans=spans, wall_epoch=wall_epoch,
                  events=events,
                  server_metrics=build_server_metrics(snap.server_metrics, epoch_ns),
                  steps=steps, step_samples=step_samples)


def _events(snap: Snapshot, sess_first: np.ndarray, epoch_ns: int) -> pd.DataFrame:
    """The events frame: one row per session event, in (task id, time) order."""
    row = snap.event_task.astype(np.int64)
    local = snap.event_session.astype(np.int64)
    has_sess = local >= 0
    sess_row = np.where(has_sess, sess_first[row] + local, 0)
    value = snap.event_value.astype(np.int64)
    missing = value == MISSING
    ev = pd.DataFrame({
        S.TASK_ID: snap.task_id[row],
        S.SESSION_ID: pd.arrays.IntegerArray(
            np.where(has_sess, snap.session_id[sess_row], 0).astype(np.int64), ~has_sess),
        S.EVENT: pd.Categorical.from_codes(snap.event_kind.astype(np.int8),
                                           dtype=_EVENT_DTYPE),
        S.TS: _seconds(snap.event_ts, epoch_ns),
        S.VERSION: pd.arrays.IntegerArray(np.where(missing, 0, value), missing),
    })
    return ev.sort_values([S.TASK_ID, S.TS], ignore_index=True)  # two keys: a stable lexsort
