"""The :class:`Store`: the buffers (:class:`~.buffers.Buffers`) with their rows written out
as records from cursors on (``records``: what ``Tracer.drain_records`` ships between
processes; ``columns``: a line of a trace file) and records read back in (task and mark
records of schema 1, batches of columns of schema 2, each checked in full before anything
is appended, times re-anchored on the reader's epoch); the formats are in
:mod:`rollout_kit.tracing._store`."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..._errors import TraceSchemaError
from .. import _phases as phases
from .._codes import EVENT_CODES, SESSION_EVENT_CODES, STATUS_CODES
from ..schema import LIFECYCLE_EVENTS, MIN_SCHEMA_VERSION, SCHEMA_VERSION, SESSION_EVENTS, STATUSES
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
    row_array,
)
from .metrics import METRICS
from .steps import STEPS


class Store(Buffers):
    """Columnar buffers of committed tasks, sessions, spans, session events and late marks
    (:class:`~.buffers.Buffers`), written out as records and read back from them."""

    # -- rows out as records ---------------------------------------------------------------

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

    # -- records back in -----------------------------------------------------------------

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
                elif kind == STEPS:
                    self.steps.ingest(rec, shift)
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
            if not -1 <= int(local) < len(sessions):
                raise ValueError("a span's session index is outside its task's sessions")
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


def _rows_by_owner(cols: dict[str, Sparse], from_row: int) -> dict[int, dict[str, AttrValue]]:
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


def _sparse_out(col: Sparse, base: int) -> list[Any] | None:
    """``[rows - base, values]`` of the attribute rows at or after ``base`` (None: none)."""
    start = bisect_left(col.rows, base)
    if start == len(col.rows):
        return None
    rows = np.frombuffer(col.rows, dtype=np.int64, offset=start * 8).copy() - base
    return [rows, col.values[start:]]


def _events_from(buf: array[int], from_row: int) -> np.ndarray:
    """The session events of task rows at or after ``from_row`` (rows increase), as a
    ``(E_STRIDE, n)`` block of contiguous columns."""
    e = row_array(buf, E_STRIDE)
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
        if type(v) not in SCALARS:
            raise TypeError(f"attribute value {v!r} is not a JSON scalar")
    return rows, values
