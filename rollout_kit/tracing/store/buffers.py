"""The store's buffers and their writing: committed tasks with their sessions, spans and
session events, and late marks, as flat ``array('q')`` rows beside sparse attribute columns;
``commit`` / ``add_mark``, the counts, the numpy :class:`~.snapshot.Snapshot` and a copy."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Self

import numpy as np

from ..schema import LIFECYCLE_EVENTS
from .attrs import AttrValue
from .layout import (
    E_STRIDE,
    M_STRIDE,
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
from .snapshot import AttrValues, Snapshot

__all__ = ["Buffers"]


def _put(cols: dict[str, Sparse], row: int, attrs: Mapping[str, AttrValue]) -> None:
    for name, value in attrs.items():
        col = cols.get(name)
        if col is None:
            col = cols[name] = Sparse()
        col.rows.append(row)
        col.values.append(value)


def _np(a: array[Any], dtype: type) -> np.ndarray:
    if len(a) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(a, dtype=dtype).copy()


def _dense(n: int, col: Sparse) -> list[str | None]:
    out: list[str | None] = [None] * n
    for r, v in zip(col.rows, col.values, strict=True):
        out[r] = v  # type: ignore[assignment]
    return out


class Buffers:
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
        self.reason = Sparse()
        self.error = Sparse()
        self.task_attrs: dict[str, Sparse] = {}
        self.session_attrs: dict[str, Sparse] = {}

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
        def sparse(cols: dict[str, Sparse]) -> dict[str, tuple[np.ndarray, AttrValues]]:
            return {k: (_np(c.rows, np.int64), list(c.values)) for k, c in cols.items()}

        t = row_array(self.tasks, T_STRIDE)
        s = row_array(self.sessions, S_STRIDE)
        p = row_array(self.spans, P_STRIDE)
        m = row_array(self.marks, M_STRIDE)
        e = row_array(self.events, E_STRIDE)
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

    def copy(self) -> Self:
        """A deep copy of the buffers (for a snapshot that adds live tasks)."""
        c = type(self)()
        for name in ("tasks", "sessions", "spans", "marks", "events"):
            setattr(c, name, array("q", getattr(self, name)))
        c.workers = list(self.workers)
        c._worker_codes = dict(self._worker_codes)
        c.reason, c.error = self.reason.copy(), self.error.copy()
        c.task_attrs = {k: v.copy() for k, v in self.task_attrs.items()}
        c.session_attrs = {k: v.copy() for k, v in self.session_attrs.items()}
        return c
