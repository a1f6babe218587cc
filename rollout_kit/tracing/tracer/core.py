"""The :class:`Tracer`: its epoch, its columnar store and what commits into it (a task's
registration, lifecycle marks and finalization), the frames built from it, and the trace
file (flushing, draining, ingesting, compacting); the calls on the live table alone are
:class:`~.live_calls.LiveCalls`."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from time import perf_counter_ns
from types import TracebackType
from typing import Any

import pandas as pd

from ...errors import ConfigError, TraceSchemaError, UnknownTaskIdError, truncate
from ...ids import validate_task_id
from .. import context as ctx
from .. import schema as S
from ..codes import EVENT_CODES, PENDING, STATUS_CODES
from ..dumps import TrajectoryDump
from ..frames import Traces, build_server_metrics, build_traces
from ..live import LiveTable
from ..parquet import read_info, write_snapshot
from ..persist import append_records, compact_trace, parquet_path, source_info
from ..store import COLUMNS, FORMAT, AttrValue, IdSet, Store, check_attrs
from .live_calls import TASK_RESERVED, LiveCalls

__all__ = ["MAX_ERROR_CHARS", "Tracer", "current_tracer"]

MAX_ERROR_CHARS = 2000
#: server metrics rows that, unwritten, make :meth:`Tracer.record_server_metrics` flush
#: (about 4 minutes of 4 servers scraped at 2 Hz)
METRICS_FLUSH_ROWS = 65536
_INT63 = 2**63


def current_tracer() -> Tracer | None:
    """The tracer of the enclosing ``task_scope``/``session``, or ``None``."""
    tr = ctx.TRACER.get()
    return tr if isinstance(tr, Tracer) else None


class Tracer(LiveCalls):
    """Records task lifecycles, sessions and phase spans; builds DataFrames; writes JSONL.

    Args:
        path: JSONL file to write (truncated at creation and on :meth:`reset`, then appended
            one line of columns per flush: :mod:`rollout_kit.tracing.store`); ``None`` keeps
            records in memory only.
        flush_threshold: write to ``path`` once this many records (finished tasks, late
            marks) are pending.
        worker: name of this process/worker, stored with every task (``worker`` column).
        enabled: when false every call is a cheap no-op (``register_session`` still returns
            distinct ids).
        dump: a :class:`~rollout_kit.tracing.dumps.TrajectoryDump` (or its directory):
            every engine call inside a traced task writes its replay coordinate there;
            flushed with the traces.
        parquet: with a ``path``, :meth:`close` also compacts the trace to Parquet next to
            it (``X.jsonl`` → ``X.parquet``, :attr:`parquet_path`), which ``load_traces``
            reads several times faster than the JSONL; the JSONL stays, the crash-safe
            log. Default on; ``False`` writes the JSONL only.

    Attributes:
        epoch_ns: ``perf_counter_ns()`` at creation / last reset; frame times are seconds
            since this instant.
        wall_epoch: ``time.time()`` at the same instant.
        parquet_path: where :meth:`close` writes the Parquet form (``None``: no path, or
            ``parquet=False``).
    """

    def __init__(self, *, path: str | os.PathLike[str] | None = None,
                 flush_threshold: int = 1024, worker: str | None = None,
                 enabled: bool = True,
                 dump: TrajectoryDump | str | os.PathLike[str] | None = None,
                 parquet: bool = True) -> None:
        if isinstance(flush_threshold, bool) or not isinstance(flush_threshold, int) \
                or flush_threshold < 1:
            raise ConfigError(f"flush_threshold must be an int >= 1, got {flush_threshold!r}")
        if worker is not None and not isinstance(worker, str):
            raise ConfigError(f"worker must be a str or None, got {worker!r}")
        self.path = Path(path) if path is not None else None
        if self.path is not None and self.path.suffix == ".parquet":
            raise ConfigError(f"path {os.fspath(self.path)!r} is the JSONL log (e.g. "
                              "trace.jsonl); its Parquet form is written next to it on close()")
        self.parquet_path = parquet_path(self.path) if self.path is not None and parquet \
            else None
        self.flush_threshold = flush_threshold
        self.worker = worker
        self.enabled = bool(enabled)
        self.dump = dump if isinstance(dump, TrajectoryDump | None) else TrajectoryDump(
            dump, worker=worker)
        self.live = LiveTable()
        #: the high 64 bits (hex) of this tracer's W3C trace ids: a task's trace id is this
        #: prefix and the task id (:func:`~rollout_kit.tracing.traceparent`)
        self.trace_prefix = os.urandom(8).hex()
        self._io_lock = threading.Lock()
        self._start_epoch()

    def _start_epoch(self) -> None:
        self.wall_epoch = time.time()
        self.epoch_ns = perf_counter_ns()
        self._store = Store()
        self._wcode = self._store.worker_code(self.worker)
        self.live.restart()
        self._ingested = IdSet()  # ids of ingested task records: later marks are merged
        self._cursor = (0, 0, 0, 0)
        self._metrics_cursor = 0  # server metrics rows written to the file
        self._due = 0  # records committed since the last write (what triggers a flush)
        self._drained = False  # records left the store (drain_records): the file has more
        self._compacted: int | None = None  # JSONL size the Parquet form was written at
        if self.path is not None:
            try:
                append_records(self.path, [self._header()], truncate=True)
            except OSError as exc:
                raise ConfigError(f"cannot write the trace file {os.fspath(self.path)!r}: "
                                  f"{exc.strerror or exc}") from exc
            self._remove_stale_parquet()

    def _remove_stale_parquet(self) -> None:
        """Delete a Parquet form compacted from an earlier life of the (truncated) JSONL."""
        pq, path = self.parquet_path, self.path
        if pq is None or path is None or not pq.is_file():
            return
        try:
            source = read_info(pq).source
        except TraceSchemaError:
            return  # not a trace of ours: leave it
        if source is not None and source.get("name") == path.name:
            pq.unlink(missing_ok=True)

    def trace_clock(self) -> float:
        """Now on this tracer's time axis (seconds): ``wall_epoch`` plus the
        ``perf_counter`` time since the epoch.

        Two processes' axes differ by the error of their wall-clock anchors and by any slew
        of the wall clock between their epochs (NTP can slew it by milliseconds a second);
        comparing these clocks, not ``time.time()``, measures both.
        """
        return self.wall_epoch + (perf_counter_ns() - self.epoch_ns) / 1e9

    def _header(self) -> dict[str, Any]:
        return {"kind": "header", "format": FORMAT, "schema": S.SCHEMA_VERSION,
                "wall_epoch": self.wall_epoch, "epoch_ns": self.epoch_ns,
                "worker": self.worker, "pid": os.getpid()}

    # -- tasks ----------------------------------------------------------------------------
    def register_task(self, task_id: int, *, worker: str | None = None,
                      **attrs: AttrValue) -> None:
        """Record a task id given by the caller (never creates one) and its submit mark.

        ``worker`` names the worker that runs the task (its ``worker`` column); default: the
        tracer's own ``worker``. In-process workers sharing one tracer pass their names.

        Raises:
            InvalidTaskIdError: ``task_id`` is not a non-negative 63-bit int.
            DuplicateTaskIdError: the id is live or was already finalized here.
            ConfigError: an attribute is not a JSON scalar or has a reserved name.
        """
        if not self.enabled:
            return
        if type(task_id) is not int or task_id < 0 or task_id >= _INT63:
            task_id = validate_task_id(task_id)
        if attrs:
            check_attrs(attrs, TASK_RESERVED)
        now = perf_counter_ns()
        live = self.live
        lock = live.lock
        lock.acquire()  # not ``with``: on the per-session path the statement costs ~3×
        try:
            wcode = self._wcode if worker is None else self._store.worker_code(worker)
            live.add_task(task_id, now, wcode, attrs)
        finally:
            lock.release()

    def mark(self, task_id: int, event: str, ts_ns: int | None = None) -> None:
        """Record lifecycle ``event`` (submit, dispatch, start, end, consume) of a task.

        ``ts_ns`` is a ``perf_counter_ns()`` value (default: now). Marking a finalized task
        (typically ``consume``) is recorded and merged into its row.

        Raises:
            ConfigError: unknown event; UnknownTaskIdError: the task was never registered.
        """
        self._mark((task_id,), event, ts_ns, "mark")

    def mark_all(self, task_ids: Iterable[int], event: str, ts_ns: int | None = None) -> None:
        """Record lifecycle ``event`` of every task in ``task_ids`` at one instant: what
        :meth:`mark` does for each, under one lock (the controller marks ``consume`` of the
        results one ``wait`` returns this way).

        All or nothing: an id that was never registered raises before any is marked.

        Raises:
            ConfigError: unknown event; UnknownTaskIdError: a task was never registered.
        """
        self._mark(list(task_ids), event, ts_ns, "mark_all")

    def _mark(self, ids: Sequence[int], event: str, ts_ns: int | None, what: str) -> None:
        if not self.enabled:
            return
        code = EVENT_CODES.get(event)
        if code is None:
            raise ConfigError(f"unknown lifecycle event {event!r}; use one of "
                              f"{S.LIFECYCLE_EVENTS}")
        if ts_ns is None:
            ts_ns = perf_counter_ns()
        elif isinstance(ts_ns, bool) or not isinstance(ts_ns, int):
            raise ConfigError(f"ts_ns must be an int from perf_counter_ns(), got {ts_ns!r}")
        live = self.live
        with live.lock:
            tasks = live.tasks
            marks = []  # of the live tasks, set once every id is known
            late = []  # finalized (typically: consume): recorded and merged into the row
            for task_id in ids:
                t = tasks.get(task_id)
                if t is not None:
                    marks.append(t.marks)
                    continue
                tid = validate_task_id(task_id)
                if tid not in live.done and tid not in self._ingested:
                    raise UnknownTaskIdError(f"{what}({event!r}): task_id {task_id} was "
                                             "never registered in this tracer")
                late.append(tid)
            for m in marks:
                m[code] = ts_ns
            if not late:
                return
            self._store.add_marks(late, self._wcode, code, ts_ns)
            self._due += len(late)
            flush = self._due >= self.flush_threshold and self.path is not None
        if flush:
            self.flush()

    def finalize(self, task_id: int, status: str, reason: str | None = None,
                 error: BaseException | str | None = None) -> None:
        """Close a task: set its status, close what is still open, commit its records.

        Sets the ``end`` mark if it is missing; phases still open are closed now and flagged
        ``closed_at_finalize``; sessions still open end now; a session without a status of
        its own takes the task's. The live state of the task is released.

        Raises:
            ConfigError: ``status`` is not one of accepted, rejected, failed, cancelled.
            TraceStateError: the task was already finalized.
            UnknownTaskIdError: the task was never registered.
        """
        if not self.enabled:
            return
        code = STATUS_CODES.get(status, PENDING)
        if code == PENDING:
            raise ConfigError(f"unknown final status {status!r}; use one of "
                              f"{sorted(S.TERMINAL_STATUSES)}")
        if reason is not None and not isinstance(reason, str):
            reason = str(reason)
        err: str | None = None
        if isinstance(error, BaseException):
            err = truncate(f"{type(error).__name__}: {error}", MAX_ERROR_CHARS)
        elif error is not None:
            err = truncate(str(error), MAX_ERROR_CHARS)
        now = perf_counter_ns()
        live = self.live
        lock = live.lock
        lock.acquire()
        try:
            live.finish_task(task_id, self._store, code, reason, err, now)
            self._due += 1
            flush = self._due >= self.flush_threshold and self.path is not None
        finally:
            lock.release()
        if flush:
            self.flush()

    # -- server metrics ---------------------------------------------------------------------
    def record_server_metrics(self, server: str, samples: Iterable[tuple[str, str, float]],
                              ts_ns: int | None = None) -> int:
        """Record one scrape of ``server``'s ``/metrics``: ``(metric, labels, value)``
        samples (labels as a compact ``k=v,k=v`` string) taken at ``ts_ns``
        (``perf_counter_ns()``, default now). They become rows of the server metrics frame
        (``Traces.server_metrics``) and are written with the next flush.

        Returns:
            The number of rows added (0 when the tracer is disabled).
        """
        if not self.enabled:
            return 0
        if ts_ns is None:
            ts_ns = perf_counter_ns()
        with self.live.lock:
            buf = self._store.server_metrics
            n = buf.add(server, ts_ns, samples)
            flush = (self.path is not None
                     and len(buf) - self._metrics_cursor >= METRICS_FLUSH_ROWS)
        if flush:  # a long run with few finished tasks: its metrics still reach the file
            self.flush()
        return n

    def server_metrics_df(self) -> pd.DataFrame:
        """The server metrics frame alone (``Traces.server_metrics``), without building
        the other frames."""
        with self.live.lock:
            rows = self._store.server_metrics.rows()
        return build_server_metrics(rows, self.epoch_ns)

    def _metrics_record(self) -> dict[str, Any] | None:
        """The server metrics rows not yet written, as a record (caller holds the lock)."""
        buf = self._store.server_metrics
        rec = buf.record(self.epoch_ns, self._metrics_cursor)
        self._metrics_cursor = len(buf)
        return rec

    # -- frames ---------------------------------------------------------------------------
    def frames(self) -> Traces:
        """All three DataFrames; live (unfinalized) tasks appear with status ``pending``."""
        with self.live.lock:
            store = self._store
            if self.live.tasks:
                store = store.copy()
                for t in self.live.tasks.values():
                    t.commit(store, PENDING, None, None, None)
            snap = store.snapshot()
        return build_traces(snap, self.epoch_ns, self.wall_epoch)

    def tasks_df(self) -> pd.DataFrame:
        """Tasks indexed by ``task_id`` (see :mod:`rollout_kit.tracing.schema`)."""
        return self.frames().tasks

    def sessions_df(self) -> pd.DataFrame:
        """Sessions indexed by ``(task_id, session_id)``."""
        return self.frames().sessions

    def spans_df(self) -> pd.DataFrame:
        """Phase spans in tidy form, one row per span."""
        return self.frames().spans

    # -- persistence and lifecycle ----------------------------------------------------------
    def _pending_records(self) -> int:
        return (len(self._store) - self._cursor[0]) + (self._store.n_marks - self._cursor[3])

    def flush(self) -> None:
        """Append every record not yet written to ``path`` as one line of columns (no-op
        without a path or with nothing new), and the trajectory dump's pending records.

        When it returns the line is in the file (one ``write``): a process killed after
        that loses none of it; one killed during it leaves a torn last line, which readers
        skip with a warning (that batch is lost, no earlier one).
        """
        if self.dump is not None:
            self.dump.flush()
        if self.path is None:
            return
        with self._io_lock:
            with self.live.lock:
                rec, self._cursor = self._store.columns(self.epoch_ns, *self._cursor)
                metrics = self._metrics_record()
                self._due = 0
            recs = [r for r in (rec, metrics) if r is not None]
            if recs:
                append_records(self.path, recs)

    def drain_records(self) -> list[dict[str, Any]]:
        """Return every finished record (header first) and drop them from this tracer.

        For shipping traces out of a worker process in batches: the receiving tracer
        :meth:`ingest` s them. Records are first flushed to ``path`` if one is set. Live
        tasks stay here until they are finalized.
        """
        with self._io_lock:
            with self.live.lock:
                rec, _cursor = self._store.columns(self.epoch_ns, *self._cursor)
                metrics = self._metrics_record()
                drained, _ = self._store.records(self.epoch_ns, 0, 0, 0, 0)
                all_metrics = self._store.server_metrics.record(self.epoch_ns, 0)
                if all_metrics is not None:
                    drained.append(all_metrics)
                self._drained = self._drained or bool(drained)
                self._store = Store()
                self._wcode = self._store.worker_code(self.worker)
                self._cursor = (0, 0, 0, 0)
                self._metrics_cursor = 0
                self._due = 0
            recs = [r for r in (rec, metrics) if r is not None]
            if recs and self.path is not None:
                append_records(self.path, recs)
        return [self._header(), *drained] if drained else []

    def ingest(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Merge records from :meth:`drain_records` (or a trace file) of another tracer.

        Times are re-anchored through the records' wall-clock anchor; each task keeps its
        ``worker``. Ingested task ids are not checked against this tracer's ids (in SPMD
        mode ``(worker, task_id)`` is the unique key); a later :meth:`mark` of an ingested
        id (e.g. ``consume`` by the result's owner) is recorded like one of a finalized
        task.

        Returns:
            The number of task records ingested.

        Raises:
            TraceSchemaError: malformed records or no header first.
        """
        recs = list(records)
        with self.live.lock:
            n = self._store.ingest(recs, self.epoch_ns, self.wall_epoch)
            for rec in recs:
                kind = rec.get("kind")
                if kind == "task":
                    self._ingested.add(int(rec["task_id"]))
                elif kind == COLUMNS:  # read back from a trace file
                    for tid in rec["tasks"]["task_id"]:
                        self._ingested.add(int(tid))
            self._due = self._pending_records()
            flush = self._due >= self.flush_threshold and self.path is not None
        if flush:
            self.flush()
        return n

    def reset(self) -> None:
        """Forget every finished record and restart the epoch (file truncated, new header).

        Safe at any time, e.g. when a notebook cell is re-run: tasks still live stay live
        and are recorded when finalized; finished task ids may be registered again.
        """
        with self._io_lock, self.live.lock:
            self._start_epoch()

    def compact(self) -> Path | None:
        """Flush, then write the Parquet form of the JSONL to :attr:`parquet_path`.

        From the columns in memory (no JSONL parsing) unless records were drained, then from
        the file. Nothing is rewritten when the JSONL has not grown since the last time.
        Live tasks are in neither form until they are finalized.

        Returns:
            The Parquet path, or ``None`` (no path, ``parquet=False`` or a disabled tracer).
        """
        if self.path is None or self.parquet_path is None or not self.enabled:
            self.flush()
            return None
        if self.dump is not None:
            self.dump.flush()
        with self._io_lock:
            with self.live.lock:
                rec, self._cursor = self._store.columns(self.epoch_ns, *self._cursor)
                metrics = self._metrics_record()
                self._due = 0
                snap = None if self._drained else self._store.snapshot()
                header = self._header()
            recs = [r for r in (rec, metrics) if r is not None]
            if recs:
                append_records(self.path, recs)
            size = self.path.stat().st_size
            if size != self._compacted or not self.parquet_path.is_file():
                if snap is None:
                    compact_trace(self.path, self.parquet_path)
                else:
                    write_snapshot(self.parquet_path, snap, self.epoch_ns, self.wall_epoch,
                                   {"headers": [header],
                                    "source": source_info(self.path, size)})
                self._compacted = size
        return self.parquet_path

    def close(self) -> None:
        """Flush pending records and, unless ``parquet=False``, compact them to Parquet
        (:meth:`compact`). The tracer stays usable (later records are appended; the next
        ``close`` compacts again)."""
        self.compact()

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def stats(self) -> dict[str, int]:
        """Counts: live tasks/sessions, finished tasks/sessions/spans, unwritten records."""
        with self.live.lock:
            return {
                "live_tasks": len(self.live.tasks), "live_sessions": len(self.live.sessions),
                "tasks": len(self._store), "sessions": self._store.n_sessions,
                "spans": self._store.n_spans,
                "unwritten": self._pending_records() if self.path is not None else 0,
            }

    def __len__(self) -> int:
        """Number of tasks, finished and live."""
        return len(self._store) + len(self.live.tasks)

    def __repr__(self) -> str:
        path = os.fspath(self.path) if self.path else None
        return (f"Tracer(worker={self.worker!r}, tasks={len(self._store)}, "
                f"live={len(self.live.tasks)}, path={path!r})")
