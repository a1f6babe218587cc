"""Columnar storage of finished tasks, their sessions and spans.

A task is committed once, when it is finalized, together with all its sessions and spans, so
the sessions (and the spans) of one task sit in consecutive rows: a task row only needs its
counts ``n_sessions``/``n_spans`` and a span only the task-local index of its session. Numbers
live in ``array.array`` buffers (8 bytes per value, no per-row objects); strings and
attributes in lists. Attributes are sparse columns: ``name -> (rows, values)``.

Times are ``perf_counter_ns`` integers on the owning tracer's clock; ``MISSING`` marks an
absent lifecycle mark. Late marks (e.g. ``consume`` after ``finalize``) are appended to their
own small table and merged when frames are built.

Records (the JSONL lines and what ``Tracer.drain_records`` returns) are plain dicts::

    {"kind": "header", "format": "rollout_kit.trace", "schema": 1, "wall_epoch": 1.7e9,
     "epoch_ns": 123, "worker": "w0", "pid": 42}
    {"kind": "task", "task_id": 7, "worker": "w0", "status": "accepted", "reason": null,
     "error": null, "marks": [0, 10, 20, 90, null], "attrs": {...},
     "sessions": [{"session_id": 3, "status": "accepted", "start": 21, "end": 80,
                   "attrs": {"server": "127.0.0.1:30000", "prompt_tokens": 12}}],
     "spans": [[0, "generate", 22, 60, 0]],   # [session index or -1, phase, start, end, flags]
     "events": [[0, "continue", 41, 3]]}      # [session index, kind, ts, weight version]
    {"kind": "mark", "task_id": 7, "worker": "w0", "event": "consume", "ts": 120}

Times in records are integer nanoseconds relative to the header's ``epoch_ns``. ``events``
(timestamped session events, e.g. a continuation after a server abort) is present only when
the task has some; the version is ``null`` when not known.

A trace *file* (schema 2) holds, after its header, ``columns`` records: one line per flush,
every task, session, span, session event and late mark of the batch as a column (one
``orjson`` call per batch, numpy arrays encoded in C, instead of a dict per task)::

    {"kind": "columns",
     "names": {"status": [...], "event": [...], "session_event": [...], "phase": [...],
               "worker": [...]},                         # what the codes below index
     "tasks": {"task_id": [...], "status": [...], "worker": [...], "n_sessions": [...],
               "n_spans": [...], "marks": {"submit": [...], "dispatch": null, ...}},
     "sessions": {"session_id": [...], "status": [...], "start": [...], "end": [...]},
     "spans": {"session": [...], "phase": [...], "start": [...], "end": [...], "flags": [...]},
     "reason": [[rows], [values]], "error": [[rows], [values]],          # only if any
     "task_attrs": {"split": [[rows], [values]]}, "session_attrs": {...}, # only if any
     "events": {"task": [...], "session": [...], "kind": [...], "ts": [...], "value": [...]},
     "marks": {"task_id": [...], "worker": [...], "event": [...], "ts": [...]}}  # if any

A task's sessions and spans follow each other as in :class:`Store` (``n_sessions`` /
``n_spans`` per task); attribute and event rows count from the batch's first task (or
session); a time column is ``null`` when absent for every row and holds ``null`` where absent
for some. Readers take both forms: task and mark records (schema 1 files, what
``Tracer.drain_records`` ships between processes) and ``columns`` records.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigError, TraceSchemaError
from . import phases
from .codes import EVENT_CODES, SESSION_EVENT_CODES, STATUS_CODES
from .schema import (
    LIFECYCLE_EVENTS,
    MIN_SCHEMA_VERSION,
    PHASE_SESSION_SUFFIX,
    SCHEMA_VERSION,
    SESSION_EVENTS,
    STATUSES,
)

__all__ = [
    "COLUMNS",
    "FLAG_CLOSED_AT_FINALIZE",
    "FLAG_RAISED",
    "FORMAT",
    "MISSING",
    "AttrValues",
    "EventRow",
    "IdSet",
    "Snapshot",
    "Store",
    "check_attrs",
    "check_counts",
]

FORMAT = "rollout_kit.trace"
COLUMNS = "columns"  # the kind of a batch-of-columns record (trace files, schema 2)
MISSING = -(2**63)
FLAG_CLOSED_AT_FINALIZE = 1
FLAG_RAISED = 2
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SCALARS = (str, int, float, bool, type(None))

AttrValue = str | int | float | bool | None
# the values of one sparse attribute column in a snapshot: a list, or (read from Parquet) a
# numpy array of one type — int64, float64, bool — or a Categorical of str
AttrValues = list[AttrValue] | np.ndarray | pd.Categorical
SessionRow = tuple[int, int, int, int, Mapping[str, AttrValue]]  # id, status, start, end, attrs
SpanRow = tuple[int, int, int, int, int]  # session index | -1, phase code, start, end, flags
EventRow = tuple[int, int, int, int]  # session index, kind code, ts, value (MISSING: none)


def check_attrs(attrs: Mapping[str, object], reserved: frozenset[str]) -> None:
    """Reject attributes that would not survive JSON or would shadow a computed column.

    Values must be ``None``, ``bool``, ``str``, ``float`` or an ``int`` that fits in 64 bits
    (orjson rejects wider ints; a ``uuid4().int`` is 128 bits).

    Raises:
        ConfigError: a value of another type, an int beyond 64 bits, or a reserved name.
    """
    for name, value in attrs.items():
        if type(value) not in _SCALARS and not isinstance(value, _SCALARS):
            raise ConfigError(
                f"trace attribute {name!r} must be None, bool, int, float or str, got "
                f"{type(value).__name__} (convert it, e.g. str(value), before annotating)"
            )
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            raise ConfigError(f"trace attribute {name!r}={value} does not fit in 64 bits")
        if name in reserved or (name.endswith("_s") and phases.is_phase(name[:-2])) or (
                name.endswith(PHASE_SESSION_SUFFIX)
                and phases.is_phase(name[: -len(PHASE_SESSION_SUFFIX)])):
            raise ConfigError(f"trace attribute name {name!r} is reserved for a computed column")


def check_counts(counts: Mapping[str, object], reserved: frozenset[str]) -> None:
    """Like :func:`check_attrs`, for ``increment``: values must be int or float (not bool)."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"increment({name}=...) needs an int or float, got {type(value).__name__}"
            )
    check_attrs(counts, reserved)


class IdSet:
    """Set of task ids, as a bitmap for ids below 2**27 (16 MiB at most), else a set.

    ``top`` is one more than the largest id added (0 when empty): an id at or above it is
    not in the set, which a caller can test without a method call (ids usually grow).
    """

    __slots__ = ("_big", "_bits", "top")
    LIMIT = 1 << 27

    def __init__(self) -> None:
        self._bits = bytearray()
        self._big: set[int] = set()
        self.top = 0

    def add(self, i: int) -> None:
        """Insert ``i``."""
        if i >= self.top:
            self.top = i + 1
        if i >= self.LIMIT:
            self._big.add(i)
            return
        byte = i >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
        self._bits[byte] |= 1 << (i & 7)

    def __contains__(self, i: int) -> bool:
        if i >= self.LIMIT:
            return i in self._big
        byte = i >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (i & 7)))


class _Sparse:
    """One attribute column: the rows that have a value, and the values."""

    __slots__ = ("rows", "values")

    def __init__(self) -> None:
        self.rows = array("q")
        self.values: list[AttrValue] = []

    def copy(self) -> _Sparse:
        c = _Sparse()
        c.rows = array("q", self.rows)
        c.values = list(self.values)
        return c


def _put(cols: dict[str, _Sparse], row: int, attrs: Mapping[str, AttrValue]) -> None:
    for name, value in attrs.items():
        col = cols.get(name)
        if col is None:
            col = cols[name] = _Sparse()
        col.rows.append(row)
        col.values.append(value)


@dataclass
class Snapshot:
    """An immutable numpy copy of a :class:`Store`, the input of the frame builders."""

    task_id: np.ndarray
    status: np.ndarray
    worker: np.ndarray
    workers: list[str | None]
    marks: list[np.ndarray]
    reason: list[str | None]
    error: list[str | None]
    n_sessions: np.ndarray
    n_spans: np.ndarray
    task_attrs: dict[str, tuple[np.ndarray, AttrValues]]
    session_id: np.ndarray
    session_status: np.ndarray
    session_start: np.ndarray
    session_end: np.ndarray
    session_attrs: dict[str, tuple[np.ndarray, AttrValues]]
    span_session: np.ndarray
    span_phase: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    span_flags: np.ndarray
    mark_task: np.ndarray
    mark_worker: np.ndarray
    mark_event: np.ndarray
    mark_ts: np.ndarray
    # session events (rare: continuations after a server abort): the task's row, the
    # session's index within the task, kind code, ts, value (MISSING: none)
    event_task: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_session: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_kind: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_ts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_value: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    extra: dict[str, Any] = field(default_factory=dict)


def _np(a: array[Any], dtype: type) -> np.ndarray:
    if len(a) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(a, dtype=dtype).copy()


# strides of the flat int64 row buffers
T_ID, T_STATUS, T_WORKER, T_NSESS, T_NSPAN, T_MARKS = 0, 1, 2, 3, 4, 5
T_STRIDE = T_MARKS + len(LIFECYCLE_EVENTS)
S_STRIDE = 4  # session_id, status, start, end
P_STRIDE = 5  # session index | -1, phase code, start, end, flags
M_STRIDE = 4  # task_id, worker, event, ts
E_STRIDE = 5  # task row, session index, kind, ts, value


def _rows(a: array[int], stride: int) -> np.ndarray:
    if len(a) == 0:
        return np.empty((0, stride), dtype=np.int64)
    return np.frombuffer(a, dtype=np.int64).reshape(-1, stride).copy()


class Store:
    """Columnar buffers of committed tasks, sessions, spans, session events and late marks.

    Numbers of one row are stored side by side in one flat ``array('q')`` per table (one
    ``extend`` per row instead of one ``append`` per field), read back as a 2-D numpy view.
    """

    def __init__(self) -> None:
        self.tasks = array("q")
        self.sessions = array("q")
        self.spans = array("q")
        self.marks = array("q")
        self.events = array("q")  # rarely any: continuations after a server abort
        self.workers: list[str | None] = []
        self._worker_codes: dict[str | None, int] = {}  # the index of each name in workers
        self.reason = _Sparse()
        self.error = _Sparse()
        self.task_attrs: dict[str, _Sparse] = {}
        self.session_attrs: dict[str, _Sparse] = {}

    def __len__(self) -> int:
        return len(self.tasks) // T_STRIDE

    @property
    def n_sessions(self) -> int:
        """Number of committed sessions."""
        return len(self.sessions) // S_STRIDE

    @property
    def n_spans(self) -> int:
        """Number of committed spans."""
        return len(self.spans) // P_STRIDE

    @property
    def n_events(self) -> int:
        """Number of committed session events."""
        return len(self.events) // E_STRIDE

    @property
    def n_marks(self) -> int:
        """Number of late marks."""
        return len(self.marks) // M_STRIDE

    # -- writing ------------------------------------------------------------------------
    def worker_code(self, worker: str | None) -> int:
        """The code of ``worker`` in this store, adding it on first use (a dict lookup: the
        tracer asks on every ``register_task`` that names a worker)."""
        code = self._worker_codes.get(worker)
        if code is None:
            code = self._worker_codes[worker] = len(self.workers)
            self.workers.append(worker)
        return code

    def commit(self, task_id: int, status: int, worker: int, marks: list[int],
               reason: str | None, error: str | None, attrs: Mapping[str, AttrValue],
               sessions: Sequence[SessionRow], spans: list[int],
               events: Sequence[EventRow] = ()) -> None:
        """Append one finished task with its sessions, spans (flat: :data:`P_STRIDE` values
        per span, the fields of a :data:`SpanRow`) and session events (read, never kept)."""
        # ``array.fromlist`` of a list: about half of what ``extend`` of a tuple costs
        # (that one grows the buffer value by value); this runs once per finished task
        row = len(self.tasks) // T_STRIDE
        self.tasks.fromlist([task_id, status, worker, len(sessions), len(spans) // P_STRIDE,
                             *marks])
        if reason is not None:
            self.reason.rows.append(row)
            self.reason.values.append(reason)
        if error is not None:
            self.error.rows.append(row)
            self.error.values.append(error)
        if attrs:
            _put(self.task_attrs, row, attrs)
        buf = self.sessions
        for sid, sstatus, start, end, sattrs in sessions:
            if sattrs:
                _put(self.session_attrs, len(buf) // S_STRIDE, sattrs)
            buf.fromlist([sid, sstatus, start, end])
        if spans:
            self.spans.fromlist(spans)
        if events:
            ev = self.events
            for e in events:
                ev.fromlist([row, *e])

    def add_mark(self, task_id: int, worker: int, event: int, ts: int) -> None:
        """Append a mark for an already committed task."""
        self.marks.fromlist([task_id, worker, event, ts])

    # -- reading ------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Copy every buffer into numpy arrays (call under the owner's lock)."""
        def sparse(cols: dict[str, _Sparse]) -> dict[str, tuple[np.ndarray, AttrValues]]:
            return {k: (_np(c.rows, np.int64), list(c.values)) for k, c in cols.items()}

        t = _rows(self.tasks, T_STRIDE)
        s = _rows(self.sessions, S_STRIDE)
        p = _rows(self.spans, P_STRIDE)
        m = _rows(self.marks, M_STRIDE)
        e = _rows(self.events, E_STRIDE)
        n = len(t)
        return Snapshot(
            task_id=t[:, T_ID], status=t[:, T_STATUS].astype(np.int8),
            worker=t[:, T_WORKER].astype(np.int16), workers=list(self.workers),
            marks=[t[:, T_MARKS + i] for i in range(len(LIFECYCLE_EVENTS))],
            reason=_dense(n, self.reason), error=_dense(n, self.error),
            n_sessions=t[:, T_NSESS], n_spans=t[:, T_NSPAN],
            task_attrs=sparse(self.task_attrs),
            session_id=s[:, 0], session_status=s[:, 1].astype(np.int8),
            session_start=s[:, 2], session_end=s[:, 3],
            session_attrs=sparse(self.session_attrs),
            span_session=p[:, 0], span_phase=p[:, 1], span_start=p[:, 2], span_end=p[:, 3],
            span_flags=p[:, 4],
            mark_task=m[:, 0], mark_worker=m[:, 1].astype(np.int16),
            mark_event=m[:, 2].astype(np.int8), mark_ts=m[:, 3],
            event_task=e[:, 0], event_session=e[:, 1], event_kind=e[:, 2], event_ts=e[:, 3],
            event_value=e[:, 4],
        )

    def copy(self) -> Store:
        """A deep copy of the buffers (for a snapshot that adds live tasks)."""
        c = Store()
        for name in ("tasks", "sessions", "spans", "marks", "events"):
            setattr(c, name, array("q", getattr(self, name)))
        c.workers = list(self.workers)
        c._worker_codes = dict(self._worker_codes)
        c.reason, c.error = self.reason.copy(), self.error.copy()
        c.task_attrs = {k: v.copy() for k, v in self.task_attrs.items()}
        c.session_attrs = {k: v.copy() for k, v in self.session_attrs.items()}
        return c

    # -- records ------------------------------------------------------------------------
    def records(self, epoch_ns: int, task_from: int, span_from: int, session_from: int,
                mark_from: int) -> tuple[list[dict[str, Any]], tuple[int, int, int, int]]:
        """Records for the rows from the given cursors on, and the new cursors."""
        def rel(ts: int) -> int | None:
            return None if ts == MISSING else ts - epoch_ns

        t_attr_rows = _rows_by_owner(self.task_attrs, task_from)
        s_attr_rows = _rows_by_owner(self.session_attrs, session_from)
        reasons = _rows_by_owner({"r": self.reason, "e": self.error}, task_from)
        names = phases.phase_names()
        events = _events_by_row(self.events, task_from) if self.events else {}
        T, Ss, P = self.tasks, self.sessions, self.spans
        out: list[dict[str, Any]] = []
        srow, prow = session_from, span_from
        for row in range(task_from, len(T) // T_STRIDE):
            b = row * T_STRIDE
            sessions = []
            for _ in range(T[b + T_NSESS]):
                o = srow * S_STRIDE
                sessions.append({
                    "session_id": Ss[o], "status": STATUSES[Ss[o + 1]],
                    "start": rel(Ss[o + 2]), "end": rel(Ss[o + 3]),
                    "attrs": s_attr_rows.get(srow, {}),
                })
                srow += 1
            spans = []
            for _ in range(T[b + T_NSPAN]):
                o = prow * P_STRIDE
                spans.append([P[o], names[P[o + 1]], P[o + 2] - epoch_ns, P[o + 3] - epoch_ns,
                              P[o + 4]])
                prow += 1
            re = reasons.get(row, {})
            rec: dict[str, Any] = {
                "kind": "task", "task_id": T[b], "worker": self.workers[T[b + T_WORKER]],
                "status": STATUSES[T[b + T_STATUS]], "reason": re.get("r"),
                "error": re.get("e"),
                "marks": [rel(T[b + T_MARKS + i]) for i in range(len(LIFECYCLE_EVENTS))],
                "attrs": t_attr_rows.get(row, {}), "sessions": sessions, "spans": spans,
            }
            if row in events:
                rec["events"] = [[local, SESSION_EVENTS[kind], ts - epoch_ns,
                                  None if value == MISSING else value]
                                 for local, kind, ts, value in events[row]]
            out.append(rec)
        M = self.marks
        for i in range(mark_from, len(M) // M_STRIDE):
            o = i * M_STRIDE
            out.append({"kind": "mark", "task_id": M[o], "worker": self.workers[M[o + 1]],
                        "event": LIFECYCLE_EVENTS[M[o + 2]], "ts": M[o + 3] - epoch_ns})
        return out, (len(T) // T_STRIDE, prow, srow, len(M) // M_STRIDE)

    def columns(self, epoch_ns: int, task_from: int, span_from: int, session_from: int,
                mark_from: int) -> tuple[dict[str, Any] | None, tuple[int, int, int, int]]:
        """One ``columns`` record (see the module docstring) for the rows from the given
        cursors on (``None``: nothing new), and the new cursors.

        The numbers are numpy arrays (encode with ``orjson.OPT_SERIALIZE_NUMPY``), copied
        out of the buffers, so the record stays valid while the store grows; call under
        the owner's lock, encode outside it.
        """
        n_t, n_s, n_p, n_m = len(self), self.n_sessions, self.n_spans, self.n_marks
        cursor = (n_t, n_p, n_s, n_m)
        if n_t == task_from and n_m == mark_from:
            return None, cursor
        # column blocks: one row per column, each row contiguous (what orjson encodes)
        t = _block(self.tasks, T_STRIDE, task_from, n_t)
        s = _block(self.sessions, S_STRIDE, session_from, n_s)
        p = _block(self.spans, P_STRIDE, span_from, n_p)
        marks = _times_out(t[T_MARKS:], epoch_ns)
        s_times = _times_out(s[2:], epoch_ns)
        p_times = _times_out(p[2:4], epoch_ns)
        rec: dict[str, Any] = {
            "kind": COLUMNS,
            "names": {"status": STATUSES, "event": LIFECYCLE_EVENTS,
                      "session_event": SESSION_EVENTS, "phase": list(phases.phase_names()),
                      "worker": list(self.workers)},
            "tasks": {"task_id": t[T_ID], "status": t[T_STATUS], "worker": t[T_WORKER],
                      "n_sessions": t[T_NSESS], "n_spans": t[T_NSPAN],
                      "marks": dict(zip(LIFECYCLE_EVENTS, marks, strict=True))},
            "sessions": {"session_id": s[0], "status": s[1], "start": s_times[0],
                         "end": s_times[1]},
            "spans": {"session": p[0], "phase": p[1], "start": p_times[0], "end": p_times[1],
                      "flags": p[4]},
        }
        for key, col in (("reason", self.reason), ("error", self.error)):
            part = _sparse_out(col, task_from)
            if part is not None:
                rec[key] = part
        for key, cols, base in (("task_attrs", self.task_attrs, task_from),
                                ("session_attrs", self.session_attrs, session_from)):
            parts = {name: part for name, col in cols.items()
                     if (part := _sparse_out(col, base)) is not None}
            if parts:
                rec[key] = parts
        if self.events:
            e = _events_from(self.events, task_from)
            if e.shape[1]:
                ts, = _times_out(e[3:4], epoch_ns)
                value, = _times_out(e[4:5], 0)
                rec["events"] = {"task": e[0] - task_from, "session": e[1], "kind": e[2],
                                 "ts": ts, "value": value}
        if n_m > mark_from:
            m = _block(self.marks, M_STRIDE, mark_from, n_m)
            ts, = _times_out(m[3:4], epoch_ns)
            rec["marks"] = {"task_id": m[0], "worker": m[1], "event": m[2], "ts": ts}
        return rec, cursor

    def _ingest_columns(self, rec: Mapping[str, Any], shift: int) -> int:
        """Append one ``columns`` record, times shifted by ``shift``; the number of tasks."""
        names = rec["names"]
        tasks, sessions, spans = rec["tasks"], rec["sessions"], rec["spans"]
        tid = _ints(tasks["task_id"])
        n = len(tid)
        n_sess, n_span = _ints(tasks["n_sessions"], n), _ints(tasks["n_spans"], n)
        sid = _ints(sessions["session_id"])
        local = _ints(spans["session"])
        if (n_sess < 0).any() or (n_span < 0).any() or int(n_sess.sum()) != len(sid) \
                or int(n_span.sum()) != len(local):
            raise ValueError("the tasks' n_sessions / n_spans do not match the sessions and "
                             "spans in the record")
        if len(local) and ((local < -1).any() or (local >= np.repeat(n_sess, n_span)).any()):
            raise ValueError("a span's session index is outside its task's sessions")
        # codes of the file -> codes here, in order of first use (as the task records
        # register phases and workers)
        worker = _recode(_ints(tasks["worker"], n), names["worker"], self.worker_code)
        rows = np.empty((n, T_STRIDE), dtype=np.int64)
        rows[:, T_ID] = tid
        rows[:, T_STATUS] = _recode(_ints(tasks["status"], n), names["status"],
                                    STATUS_CODES.__getitem__)
        rows[:, T_WORKER] = worker
        rows[:, T_NSESS] = n_sess
        rows[:, T_NSPAN] = n_span
        marks = tasks["marks"]
        file_events = [EVENT_CODES[e] for e in names["event"]]
        rows[:, T_MARKS:] = MISSING
        for i, code in enumerate(file_events):
            rows[:, T_MARKS + code] = _times_in(marks.get(names["event"][i]), n, shift)
        s = np.empty((len(sid), S_STRIDE), dtype=np.int64)
        s[:, 0] = sid
        s[:, 1] = _recode(_ints(sessions["status"], len(sid)), names["status"],
                          STATUS_CODES.__getitem__)
        s[:, 2] = _times_in(sessions["start"], len(sid), shift)
        s[:, 3] = _times_in(sessions["end"], len(sid), shift)
        p = np.empty((len(local), P_STRIDE), dtype=np.int64)
        p[:, 0] = local
        p[:, 1] = _recode(_ints(spans["phase"], len(local)), names["phase"], phases.phase_code)
        p[:, 2] = _times_in(spans["start"], len(local), shift, nullable=False)
        p[:, 3] = _times_in(spans["end"], len(local), shift, nullable=False)
        p[:, 4] = _ints(spans["flags"], len(local))
        ev = rec.get("events")
        e = None
        if ev is not None:
            etask = _ints(ev["task"])
            ne = len(etask)
            if ne and ((etask < 0).any() or (etask >= n).any()):
                raise ValueError("a session event's task row is outside the record")
            esess = _ints(ev["session"], ne)
            if ne and ((np.diff(etask) < 0).any() or (esess < 0).any()
                       or (esess >= n_sess[etask]).any()):
                raise ValueError("session events are not in task order or name a session "
                                 "outside their task")
            e = np.empty((ne, E_STRIDE), dtype=np.int64)
            e[:, 0] = etask + len(self)
            e[:, 1] = esess
            e[:, 2] = _recode(_ints(ev["kind"], ne), names["session_event"],
                              SESSION_EVENT_CODES.__getitem__)
            e[:, 3] = _times_in(ev["ts"], ne, shift, nullable=False)
            e[:, 4] = _times_in(ev["value"], ne, 0)
        mk = rec.get("marks")
        m = None
        if mk is not None:
            mtask = _ints(mk["task_id"])
            nm = len(mtask)
            m = np.empty((nm, M_STRIDE), dtype=np.int64)
            m[:, 0] = mtask
            m[:, 1] = _recode(_ints(mk["worker"], nm), names["worker"], self.worker_code)
            m[:, 2] = _recode(_ints(mk["event"], nm), names["event"], EVENT_CODES.__getitem__)
            m[:, 3] = _times_in(mk["ts"], nm, shift, nullable=False)
        # everything checked: append (nothing is half-added when a record is malformed)
        t0, s0 = len(self), self.n_sessions
        fixed: list[tuple[_Sparse, int, tuple[np.ndarray, list[AttrValue]]]] = []
        for key, col in (("reason", self.reason), ("error", self.error)):
            if rec.get(key) is not None:
                fixed.append((col, t0, _sparse_in(rec[key], n)))
        named: list[tuple[dict[str, _Sparse], str, int,
                          tuple[np.ndarray, list[AttrValue]]]] = []
        for key, cols, base, size in (("task_attrs", self.task_attrs, t0, n),
                                      ("session_attrs", self.session_attrs, s0, len(sid))):
            for name, part in (rec.get(key) or {}).items():
                if not isinstance(name, str):
                    raise ValueError(f"attribute name {name!r} is not a string")
                named.append((cols, name, base, _sparse_in(part, size)))
        for cols, name, base, parsed in named:
            target = cols.get(name)
            if target is None:
                target = cols[name] = _Sparse()
            fixed.append((target, base, parsed))
        self.tasks.frombytes(rows.tobytes())
        self.sessions.frombytes(s.tobytes())
        self.spans.frombytes(p.tobytes())
        if e is not None:
            self.events.frombytes(e.tobytes())
        if m is not None:
            self.marks.frombytes(m.tobytes())
        for col, base, (srows, values) in fixed:
            col.rows.frombytes((srows + base).tobytes())
            col.values.extend(values)
        return n

    def ingest(self, records: Iterable[Mapping[str, Any]], epoch_ns: int,
               wall_epoch: float, source: str = "records") -> int:
        """Append records (header first) re-anchored on ``wall_epoch``/``epoch_ns``.

        Times of a segment are shifted by the difference of its header's wall-clock anchor
        and ``wall_epoch``, so traces of several processes share one time axis.

        Returns:
            The number of task records ingested.

        Raises:
            TraceSchemaError: a record is malformed, or comes before any header.
        """
        shift: int | None = None
        default_worker: str | None = None
        n = 0
        for i, rec in enumerate(records):
            try:
                kind = rec["kind"]
                if kind == "header":
                    if rec.get("format") != FORMAT:
                        raise TraceSchemaError(f"{source}: record {i} is not a {FORMAT} header")
                    version = rec.get("schema")
                    if type(version) is not int or not \
                            MIN_SCHEMA_VERSION <= version <= SCHEMA_VERSION:
                        raise TraceSchemaError(
                            f"{source}: schema {version!r}, expected {MIN_SCHEMA_VERSION}.."
                            f"{SCHEMA_VERSION}")
                    shift = epoch_ns + round((float(rec["wall_epoch"]) - wall_epoch) * 1e9)
                    default_worker = rec.get("worker")
                    continue
                if shift is None:
                    raise TraceSchemaError(f"{source}: record {i} comes before any header")
                if kind == "task":
                    self._ingest_task(rec, shift, rec.get("worker", default_worker))
                    n += 1
                elif kind == COLUMNS:
                    n += self._ingest_columns(rec, shift)
                elif kind == "mark":
                    self.add_mark(int(rec["task_id"]),
                                  self.worker_code(rec.get("worker", default_worker)),
                                  EVENT_CODES[rec["event"]], int(rec["ts"]) + shift)
                else:
                    raise TraceSchemaError(f"{source}: record {i} has unknown kind {kind!r}")
            except (KeyError, TypeError, ValueError, IndexError, OverflowError,
                    AttributeError) as exc:
                if isinstance(exc, TraceSchemaError):
                    raise
                raise TraceSchemaError(f"{source}: malformed record {i}: {exc!r}") from exc
        return n

    def _ingest_task(self, rec: Mapping[str, Any], shift: int, worker: str | None) -> None:
        def ts(v: int | None) -> int:
            return MISSING if v is None else int(v) + shift

        marks = [ts(m) for m in rec["marks"]]
        if len(marks) != len(LIFECYCLE_EVENTS):
            raise ValueError(f"marks must have {len(LIFECYCLE_EVENTS)} entries")
        sessions: list[SessionRow] = [
            (int(s["session_id"]), STATUS_CODES[s["status"]], ts(s["start"]), ts(s["end"]),
             dict(s.get("attrs") or {}))
            for s in rec["sessions"]
        ]
        spans: list[int] = []
        for local, name, start, end, flags in rec["spans"]:
            spans.extend((int(local), phases.phase_code(name), int(start) + shift,
                          int(end) + shift, int(flags)))
        events: list[EventRow] = [
            (int(local), SESSION_EVENT_CODES[kind], int(t) + shift,
             MISSING if value is None else int(value))
            for local, kind, t, value in rec.get("events") or ()
        ]
        self.commit(int(rec["task_id"]), STATUS_CODES[rec["status"]], self.worker_code(worker),
                    marks, rec.get("reason"), rec.get("error"), dict(rec.get("attrs") or {}),
                    sessions, spans, events)


def _rows_by_owner(cols: dict[str, _Sparse], from_row: int) -> dict[int, dict[str, AttrValue]]:
    """``row -> {name: value}`` for attribute rows at or after ``from_row``."""
    out: dict[int, dict[str, AttrValue]] = {}
    for name, col in cols.items():
        rows = col.rows
        # rows are increasing: scan back from the end to the first row >= from_row
        start = len(rows)
        while start > 0 and rows[start - 1] >= from_row:
            start -= 1
        for j in range(start, len(rows)):
            out.setdefault(rows[j], {})[name] = col.values[j]
    return out


def _events_by_row(buf: array[int], from_row: int) -> dict[int, list[EventRow]]:
    """``task row -> its event rows`` for task rows at or after ``from_row``."""
    out: dict[int, list[EventRow]] = {}
    # rows are increasing: scan back from the end to the first row >= from_row
    i = len(buf) - E_STRIDE
    while i >= 0 and buf[i] >= from_row:
        i -= E_STRIDE
    for o in range(i + E_STRIDE, len(buf), E_STRIDE):
        out.setdefault(buf[o], []).append((buf[o + 1], buf[o + 2], buf[o + 3], buf[o + 4]))
    return out


def _dense(n: int, col: _Sparse) -> list[str | None]:
    out: list[str | None] = [None] * n
    for r, v in zip(col.rows, col.values, strict=True):
        out[r] = v  # type: ignore[assignment]
    return out


def _block(a: array[int], stride: int, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo`` .. ``hi`` of a flat row buffer as a ``(stride, hi - lo)`` copy: one
    contiguous row per column."""
    if hi <= lo:
        return np.empty((stride, 0), dtype=np.int64)
    view = np.frombuffer(a, dtype=np.int64, count=(hi - lo) * stride, offset=lo * stride * 8)
    return view.reshape(-1, stride).T.copy()  # the copy releases the buffer (it may grow)


TimesOut = np.ndarray | list[int | None] | None


def _times_out(block: np.ndarray, epoch_ns: int) -> list[TimesOut]:
    """Time columns (rows of ``block``) relative to ``epoch_ns``; ``MISSING`` becomes
    ``null``, the whole column's ``null`` when every row is missing."""
    missing = block == MISSING
    rel = block - epoch_ns
    out: list[TimesOut] = []
    for i, (some, every) in enumerate(zip(missing.any(axis=1).tolist(),
                                          missing.all(axis=1).tolist(), strict=True)):
        if not some:
            out.append(rel[i])
        elif every:
            out.append(None)
        else:
            values: list[int | None] = list(rel[i].tolist())
            for j in np.flatnonzero(missing[i]).tolist():
                values[j] = None
            out.append(values)
    return out


def _sparse_out(col: _Sparse, base: int) -> list[Any] | None:
    """``[rows - base, values]`` of the attribute rows at or after ``base`` (None: none)."""
    start = bisect_left(col.rows, base)
    if start == len(col.rows):
        return None
    rows = np.frombuffer(col.rows, dtype=np.int64, offset=start * 8).copy() - base
    return [rows, col.values[start:]]


def _events_from(buf: array[int], from_row: int) -> np.ndarray:
    """The session events of task rows at or after ``from_row`` (rows increase), as a
    ``(E_STRIDE, n)`` block of contiguous columns."""
    e = _rows(buf, E_STRIDE)
    return np.ascontiguousarray(e[np.searchsorted(e[:, 0], from_row):].T)


def _ints(values: Any, n: int | None = None) -> np.ndarray:
    """A list of ints as int64 (of length ``n`` when given).

    Raises:
        ValueError, TypeError, OverflowError: not a list of ints (or not of length ``n``).
    """
    if not isinstance(values, list):
        raise TypeError(f"expected a list of ints, got {type(values).__name__}")
    arr = np.asarray(values) if values else np.empty(0, dtype=np.int64)
    if arr.dtype.kind != "i" or arr.ndim != 1:
        raise TypeError(f"expected a list of ints, got {arr.dtype} values")
    if n is not None and len(arr) != n:
        raise ValueError(f"a column has {len(arr)} values, expected {n}")
    return arr.astype(np.int64, copy=False)


def _times_in(values: Any, n: int, shift: int, *, nullable: bool = True) -> np.ndarray:
    """A time column read back: ``null`` (all missing) or ints / nulls, plus ``shift``."""
    if values is None and nullable:
        return np.full(n, MISSING, dtype=np.int64)
    if isinstance(values, list) and nullable and None in values:
        missing = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
        filled = _ints([0 if v is None else v for v in values], n) + shift
        filled[missing] = MISSING
        return filled
    return _ints(values, n) + shift


def _recode(codes: np.ndarray, names: Sequence[Any], code_of: Any) -> np.ndarray:
    """``codes`` (indices into a record's ``names``) as this process's codes; the names are
    looked up (``code_of``) in order of first use.

    Raises:
        IndexError: a code outside ``names``; KeyError: a name ``code_of`` does not know.
    """
    if not len(codes):
        return codes
    if not isinstance(names, list):
        raise TypeError("a names table is not a list")
    if codes.min() < 0 or codes.max() >= len(names):
        raise IndexError(f"a code is outside its names table ({len(names)} names)")
    uniq, first = np.unique(codes, return_index=True)
    lut = np.zeros(len(names), dtype=np.int64)
    for c in uniq[np.argsort(first, kind="stable")].tolist():
        lut[c] = code_of(names[c])
    out: np.ndarray = lut[codes]
    return out


def _sparse_in(part: Any, size: int) -> tuple[np.ndarray, list[AttrValue]]:
    """``[rows, values]`` of a sparse column read back, checked against ``size`` rows."""
    if not isinstance(part, list) or len(part) != 2 or not isinstance(part[1], list):
        raise TypeError("a sparse column is not [rows, values]")
    rows = _ints(part[0], len(part[1]))
    if len(rows) and ((rows < 0).any() or (rows >= size).any() or (np.diff(rows) <= 0).any()):
        raise ValueError("a sparse column's rows are out of range or not increasing")
    values = part[1]
    for v in values:
        if type(v) not in _SCALARS:
            raise TypeError(f"attribute value {v!r} is not a JSON scalar")
    return rows, values
