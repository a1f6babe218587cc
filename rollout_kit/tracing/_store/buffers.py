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
from .metrics import MetricsBuffer
from .snapshot import AttrValues, Snapshot
from .steps import StepsBuffer

#: values a table's list holds before it moves into the array (see :class:`Buffers`)
SETTLE_AT = 8192


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

    Numbers of one row are stored side by side in one flat ``array('q')`` per table, read
    back as a 2-D numpy view. ``commit`` (once per finished task, the hot path) appends its
    rows to a short list of Python ints per table instead; the lists move into the arrays
    with one numpy conversion each when they reach :data:`SETTLE_AT` values, or when
    anything reads ``tasks`` / ``sessions`` / ``spans``: a list append is the cheapest way to
    keep a value, and one numpy conversion of a list is cheaper per value than
    ``array.fromlist`` (the tracer rows of ``bench/bench_tracer.py`` show the per-session
    cost).
    """

    def __init__(self) -> None:
        self._tasks = array("q")
        self._sessions = array("q")
        self._spans = array("q")
        self._tails: tuple[list[int], list[int], list[int]] = ([], [], [])  # not settled
        self.marks = array("q")
        self.events = array("q")  # rarely any: continuations after a server abort
        self.workers: list[str | None] = []
        self._worker_codes: dict[str | None, int] = {}  # the index of each name in workers
        self.reason = Sparse()
        self.error = Sparse()
        self.task_attrs: dict[str, Sparse] = {}
        self.session_attrs: dict[str, Sparse] = {}
        self.server_metrics = MetricsBuffer()  # samples scraped from the servers
        self.steps = StepsBuffer()  # the steps of an RL loop (rollout_kit.rl)

    def _settle(self) -> None:
        """Move the committed rows still in the lists into the arrays."""
        for buf, tail in zip((self._tasks, self._sessions, self._spans), self._tails,
                             strict=True):
            if tail:
                buf.frombytes(np.fromiter(tail, dtype=np.int64, count=len(tail)).tobytes())
                tail.clear()

    @property
    def tasks(self) -> array[int]:
        """Task rows, :data:`T_STRIDE` values each (settled first)."""
        self._settle()
        return self._tasks

    @property
    def sessions(self) -> array[int]:
        """Session rows, :data:`S_STRIDE` values each (settled first)."""
        self._settle()
        return self._sessions

    @property
    def spans(self) -> array[int]:
        """Span rows, :data:`P_STRIDE` values each (settled first)."""
        self._settle()
        return self._spans

    def __len__(self) -> int:
        return (len(self._tasks) + len(self._tails[0])) // T_STRIDE

    @property
    def n_sessions(self) -> int:
        """Number of committed sessions."""
        return (len(self._sessions) + len(self._tails[1])) // S_STRIDE

    @property
    def n_spans(self) -> int:
        """Number of committed spans."""
        return (len(self._spans) + len(self._tails[2])) // P_STRIDE

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
        tt, st, pt = self._tails
        if reason is not None or error is not None or attrs:
            row = len(self)
            if reason is not None:
                self.reason.rows.append(row)
                self.reason.values.append(reason)
            if error is not None:
                self.error.rows.append(row)
                self.error.values.append(error)
            if attrs:
                _put(self.task_attrs, row, attrs)
        tt += (task_id, status, worker, len(sessions), len(spans) // P_STRIDE)
        tt += marks
        for sid, sstatus, start, end, sattrs in sessions:
            if sattrs:
                _put(self.session_attrs, self.n_sessions, sattrs)
            st += (sid, sstatus, start, end)
        if spans:
            pt += spans
        if events:
            ev = self.events
            row = len(self) - 1
            for e in events:
                ev.fromlist([row, *e])
        if len(tt) >= SETTLE_AT or len(pt) >= SETTLE_AT:
            self._settle()

    def add_mark(self, task_id: int, worker: int, event: int, ts: int) -> None:
        """Append a mark for an already committed task."""
        self.marks.fromlist([task_id, worker, event, ts])

    def add_marks(self, task_ids: list[int], worker: int, event: int, ts: int) -> None:
        """Append one mark per task of ``task_ids``, all at ``ts`` (committed tasks)."""
        rows = [0, worker, event, ts] * len(task_ids)  # M_STRIDE values per mark
        rows[0::M_STRIDE] = task_ids
        self.marks.fromlist(rows)

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
            event_value=e[:, 4], server_metrics=self.server_metrics.rows(),
            steps=self.steps.rows(),
        )

    def copy(self) -> Self:
        """A deep copy of the buffers (for a snapshot that adds live tasks)."""
        c = type(self)()
        c._tasks = array("q", self.tasks)
        c._sessions = array("q", self.sessions)
        c._spans = array("q", self.spans)
        c.marks = array("q", self.marks)
        c.events = array("q", self.events)
        c.workers = list(self.workers)
        c._worker_codes = dict(self._worker_codes)
        c.reason, c.error = self.reason.copy(), self.error.copy()
        c.task_attrs = {k: v.copy() for k, v in self.task_attrs.items()}
        c.session_attrs = {k: v.copy() for k, v in self.session_attrs.items()}
        c.server_metrics = self.server_metrics.copy()
        c.steps = self.steps.copy()
        return c
