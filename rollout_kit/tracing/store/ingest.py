"""Records read back into a store: task and mark records (schema 1) and batches of columns
(schema 2) after a header, each checked in full before anything is appended, times
re-anchored on the reader's epoch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import TraceSchemaError
from .. import phases
from ..codes import EVENT_CODES, SESSION_EVENT_CODES, STATUS_CODES
from ..schema import LIFECYCLE_EVENTS, MIN_SCHEMA_VERSION, SCHEMA_VERSION
from .attrs import SCALARS, AttrValue
from .buffers import Buffers
from .layout import (
    COLUMNS,
    E_STRIDE,
    FORMAT,
    M_STRIDE,
    MISSING,
    P_STRIDE,
    S_STRIDE,
    T_ID,
    T_MARKS,
    T_NSESS,
    T_NSPAN,
    T_STATUS,
    T_STRIDE,
    T_WORKER,
    EventRow,
    SessionRow,
    Sparse,
)
from .metrics import METRICS

__all__ = ["RecordReader"]


class RecordReader(Buffers):
    """Appends records (both forms, see the package) to the buffers."""

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
        fixed: list[tuple[Sparse, int, tuple[np.ndarray, list[AttrValue]]]] = []
        for key, col in (("reason", self.reason), ("error", self.error)):
            if rec.get(key) is not None:
                fixed.append((col, t0, _sparse_in(rec[key], n)))
        named: list[tuple[dict[str, Sparse], str, int,
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
                target = cols[name] = Sparse()
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
                elif kind == METRICS:
                    self.server_metrics.ingest(rec, shift)
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
        reason, error = rec.get("reason"), rec.get("error")
        for key, text in (("reason", reason), ("error", error)):
            if text is not None and not isinstance(text, str):
                raise ValueError(f"a task's {key} must be a string or null, "
                                 f"got {type(text).__name__}")
        task_id = int(rec["task_id"])
        # commit keeps rows as Python ints until they settle: check the 64-bit range here,
        # so a bad value is this record's error and never reaches the store
        values = [task_id, *marks, *spans, *(v for s in sessions for v in s[:4]),
                  *(v for e in events for v in e)]
        if min(values) < MISSING or max(values) >= -MISSING:
            raise OverflowError("a number of the record does not fit in 64 bits")
        self.commit(task_id, STATUS_CODES[rec["status"]], self.worker_code(worker),
                    marks, reason, error, dict(rec.get("attrs") or {}),
                    sessions, spans, events)


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
        if type(v) not in SCALARS:
            raise TypeError(f"attribute value {v!r} is not a JSON scalar")
    return rows, values
