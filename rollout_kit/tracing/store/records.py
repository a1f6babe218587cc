"""The store's rows as records, from cursors on: task and mark records (``records``: what
``Tracer.drain_records`` ships between processes) and one batch of columns (``columns``:
a line of a trace file); the formats are in :mod:`rollout_kit.tracing.store`."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any

import numpy as np

from .. import phases
from ..schema import LIFECYCLE_EVENTS, SESSION_EVENTS, STATUSES
from .attrs import AttrValue
from .buffers import Buffers
from .layout import (
    COLUMNS,
    E_STRIDE,
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
    Sparse,
    row_array,
)

__all__ = ["RecordWriter"]


class RecordWriter(Buffers):
    """Writes the rows of the buffers out as records (both forms, see the package)."""

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
