"""The tracer: task lifecycle marks, sessions, phase spans and attributes, kept cheaply.

Usage::

    tr = Tracer(path="traces.jsonl")
    tr.register_task(0)                      # the caller owns the id; submit mark now
    with tr.task_scope(0):                   # the executor runs a workflow in task_context(0)
        tr.mark(0, "start")
        async with tr.session() as sid:      # one generated sample
            async with tr.phase("generate"):
                ...
            tr.increment(prompt_tokens=12, completion_tokens=30)
    tr.finalize(0, "accepted")
    tr.tasks_df()

Live state (tasks not yet finalized, their sessions, open phases) lives in the tracer's
:class:`~rollout_kit.tracing._live.LiveTable` (``tracer.live``), which the scopes use too;
``finalize`` moves a task with its sessions and spans into the columnar
:class:`~rollout_kit.tracing._store.Store` and drops the live objects, so memory per finished
session is a few hundred bytes and nothing grows per finished task except the records and a
one-bit-per-id "seen" bitmap.

Error behaviour (all from :mod:`rollout_kit._errors`):

- invalid task id → ``InvalidTaskIdError``; registering a live or already finalized id
  → ``DuplicateTaskIdError``; an id never registered → ``UnknownTaskIdError``;
- unknown status or lifecycle event, non-scalar or reserved attribute → ``ConfigError``
  (raised at the call, so nothing invalid is ever stored);
- finalizing twice, a phase or annotation for an unknown/finished session, ending a phase
  that was never started or already ended → ``TraceStateError``;
- a mark (e.g. ``consume``) for an already finalized task is recorded, not an error.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextvars import Context
from pathlib import Path
from time import perf_counter_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pandas as pd

from .._errors import ConfigError, TraceSchemaError, TraceStateError, UnknownTaskIdError, truncate
from .._ids import validate_task_id
from . import _context as ctx
from . import schema as S
from ._codes import EVENT_CODES, PENDING, STATUS_CODES
from ._jsonl import append_records, parquet_path
from ._live import ENDED, NEW, OPEN, LiveSession, LiveTable
from ._scopes import PhaseScope, SessionScope, TaskScope
from ._starts import TaskStarts
from ._store import COLUMNS, FORMAT, AttrValue, IdSet, Store, check_attrs, check_counts
from ._store.steps import SAMPLE_FIELDS, STEP_FIELDS
from .dumps import TrajectoryDump

if TYPE_CHECKING:
    from ._frames.build import Traces

# The read side (``_frames``: frames, Parquet, other tools' readers) is imported where a
# method needs it, never with this module: an engine that records imports the write side only.

TASK_RESERVED = frozenset(S.TASK_COLUMNS) | {S.TASK_ID, S.SESSION_ID}
SESSION_RESERVED = frozenset({S.TASK_ID, S.SESSION_ID, S.STATUS, S.START_TS, S.END_TS,
                               S.TOTAL_S})


MAX_ERROR_CHARS = 2000
#: server metrics rows that, unwritten, make :meth:`Tracer.record_server_metrics` flush
#: (about 4 minutes of 4 servers scraped at 2 Hz)
METRICS_FLUSH_ROWS = 65536
_INT63 = 2**63


def current_tracer() -> Tracer | None:
    """The tracer of the enclosing ``task_scope``/``session``, or ``None``."""
    tr = ctx.TRACER.get()
    return tr if isinstance(tr, Tracer) else None


class Tracer:
    """Records task lifecycles, sessions and phase spans; builds DataFrames; writes JSONL.

    Args:
        path: JSONL file to write (its folder created; truncated at creation and on
            :meth:`reset`, then appended one line of columns per flush); ``None`` keeps
            records in memory only.
        flush_threshold: write to ``path`` once this many records (finished tasks, late
            marks) are pending.
        worker: name of this process/worker, stored with every task (``worker`` column).
        enabled: when false every call is a cheap no-op (``register_session`` still returns
            distinct ids).
        dump: a :class:`~rollout_kit.tracing.TrajectoryDump` (or its directory):
            every engine call inside a traced task writes its replay coordinate there;
            written when its task ends (and flushed with the traces).
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
        self._steps_cursor = (0, 0)  # RL step and step sample rows written to the file
        self._due = 0  # records committed since the last write (what triggers a flush)
        self._drained = False  # records left the store (drain_records): the file has more
        self._compacted: int | None = None  # JSONL size the Parquet form was written at
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)  # as a dump's folder
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
        from ._frames.parquet import read_info
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
        elif self.dump is not None and self.dump.pending:
            self.dump.flush()  # a task's calls are readable (load_dump, replay) once it ends

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

    def server_metrics_df(self, start: int = 0) -> pd.DataFrame:
        """The server metrics frame alone (``Traces.server_metrics``), without building
        the other frames.

        Args:
            start: the first row to return: a reader that polls (a live view) passes how
                many rows it has read so far and copies only the new ones. The rows since
                the epoch (:meth:`reset` restarts it, and the rows with it) are in the order
                they were recorded.
        """
        with self.live.lock:
            rows = self._store.server_metrics.rows(start)
        from ._frames.build import build_server_metrics
        return build_server_metrics(rows, self.epoch_ns)

    def _side_records(self) -> list[dict[str, Any] | None]:
        """The server metrics and RL step rows not yet written, as records (caller holds
        the lock)."""
        buf = self._store.server_metrics
        rec = buf.record(self.epoch_ns, self._metrics_cursor)
        self._metrics_cursor = len(buf)
        steps = self._store.steps
        step_rec = steps.rows(self._steps_cursor).record(self.epoch_ns)
        self._steps_cursor = steps.cursor()
        return [rec, step_rec]

    # -- RL steps ---------------------------------------------------------------------------
    def record_step(self, step: Mapping[str, Any],
                    samples: Sequence[Mapping[str, Any]] = ()) -> None:
        """Record one training step of an RL loop (:mod:`rollout_kit.rl`) and the results
        it consumed: a row of the steps frame (``Traces.steps``; keys
        :data:`~rollout_kit.tracing.schema.STEP_COLUMNS` and ``step``, times as
        ``perf_counter_ns()`` or ``None``) and one row per result of the step samples
        frame (``Traces.step_samples``; keys ``task_id`` and
        :data:`~rollout_kit.tracing.schema.STEP_SAMPLE_COLUMNS`). Written with the next
        flush.

        Raises:
            ConfigError: a key is missing.
        """
        if not self.enabled:
            return
        try:
            row = tuple(step[k] for k in STEP_FIELDS)
            rows = [tuple(s[k] for k in SAMPLE_FIELDS) for s in samples]
        except KeyError as exc:
            raise ConfigError(f"record_step: missing key {exc.args[0]!r}") from None
        with self.live.lock:
            self._store.steps.add(row, rows)
        if self.path is not None:
            self.flush()  # a step is rare and worth keeping at once

    def steps_df(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The steps and step samples frames (``Traces.steps``, ``Traces.step_samples``)
        alone, without building the other frames."""
        with self.live.lock:
            rows = self._store.steps.rows()
        from ._frames.build import build_steps
        return build_steps(rows, self.epoch_ns)

    # -- the live table: annotations, sessions, phases and their scopes -----------------
    def annotate_task(self, task_id: int | None = None, **attrs: AttrValue) -> None:
        """Set attributes of a live task (the current task when ``task_id`` is None).

        Raises:
            UnknownTaskIdError: the task is not live; TraceStateError: no current task.
        """
        if not self.enabled or not attrs:
            return
        check_attrs(attrs, TASK_RESERVED)
        if task_id is None:
            task_id = ctx.TASK.get() if ctx.TRACER.get() is self else None
            if task_id is None:
                raise TraceStateError("annotate_task(): no task_id given and no current task")
        live = self.live
        with live.lock:
            t = live.tasks.get(task_id)
            if t is None:
                raise live.not_live(task_id, "annotate_task")
            if t.attrs is None:
                t.attrs = {}
            t.attrs.update(attrs)

    def task_scope(self, task_id: int) -> TaskScope:
        """Context manager making ``task_id`` (and this tracer) current; restores on exit.

        Usable with ``with`` and ``async with``: phases, sessions and the module-level
        helpers inside find the task (the executor gives each workflow run a
        :meth:`task_context` instead).

        Raises:
            UnknownTaskIdError: the task is not registered (TraceStateError if finalized).
        """
        return TaskScope(self, task_id)

    def task_context(self, task_id: int) -> Context:
        """A new context in which ``task_id`` and this tracer are current (what
        :meth:`task_scope` makes current), for ``loop.create_task(coro, context=...)``.

        Nothing in it needs restoring: it ends with its asyncio task. Making it is cheaper
        than entering and leaving a task scope; the executor's
        :meth:`task_starts` copies a kept template instead (kept by the caller: kept here,
        the template would hold the tracer in a cycle).

        Raises:
            UnknownTaskIdError: the task is not registered (TraceStateError if finalized).
        """
        if self.enabled and task_id not in self.live.tasks:
            raise self.live.not_live(task_id, "task_context")
        context = Context()
        context.run(ctx.TRACER.set, self)
        context.run(ctx.TASK.set, task_id)
        return context

    def task_starts(self) -> TaskStarts:
        """The ``dispatch`` / ``start`` marks and task contexts of this tracer's tasks in
        one object, for the caller that starts tasks to keep (the executor keeps one): see
        :class:`~rollout_kit.tracing._starts.TaskStarts`."""
        return TaskStarts(self)

    # -- sessions -------------------------------------------------------------------------
    def register_session(self, task_id: int | None = None) -> int:
        """Start a session of ``task_id`` (the current task when None); return its id.

        Session ids count 0, 1, 2, … per tracer.

        Raises:
            TraceStateError: no task given and none current; UnknownTaskIdError: not live.
        """
        if not self.enabled:
            return self.live.next_session_id()
        if task_id is None:
            task_id = ctx.TASK.get() if ctx.TRACER.get() is self else None
            if task_id is None:
                raise TraceStateError("register_session(): no task_id and no current task")
        return self.live.new_session(task_id).session_id

    def end_session(self, session_id: int, status: str | None = None) -> None:
        """End a session registered with :meth:`register_session` (optionally set status).

        Raises:
            TraceStateError: unknown or finished session, or already ended.
            ConfigError: unknown status.
        """
        if not self.enabled:
            return
        code = None if status is None else STATUS_CODES.get(status)
        if status is not None and not code:
            raise ConfigError(f"unknown session status {status!r}")
        now = perf_counter_ns()
        with self.live.lock:
            s = self._session(session_id, "end_session")
            if s.end is not None:
                raise TraceStateError(f"session {session_id} already ended")
            s.end = now
            if code is not None:
                s.status = code

    def session(self, task_id: int | None = None) -> SessionScope:
        """Context manager / decorator: a new session of ``task_id`` (current task if None).

        ``with`` and ``async with`` both work; the value is the session id. It becomes the
        current session (and the task the current task) until exit, when the previous
        values are restored; an exception marks the session ``failed`` (``cancelled`` for
        ``asyncio.CancelledError``).
        """
        return SessionScope(self, task_id, strict=True)

    def _session(self, session_id: int | None, what: str) -> LiveSession:
        """The live session ``session_id`` or the current one (caller holds the lock)."""
        if session_id is None:
            session_id = ctx.SESSION.get() if ctx.TRACER.get() is self else None
            if session_id is None:
                raise TraceStateError(f"{what}(): no session_id given and no current session")
        return self.live.session(session_id, what)

    def annotate(self, session_id: int | None = None, **attrs: AttrValue) -> None:
        """Set attributes of a session (current session when None), e.g. ``server=...``.

        Values must be None, bool, int (64-bit), float or str — anything else raises
        ``ConfigError`` here, so a record can always be written.

        Raises:
            ConfigError: bad value or reserved name; TraceStateError: no such live session.
        """
        if not self.enabled or not attrs:
            return
        check_attrs(attrs, SESSION_RESERVED)
        lock = self.live.lock
        lock.acquire()
        try:
            self._session(session_id, "annotate").annotate(attrs)
        finally:
            lock.release()

    def increment(self, session_id: int | None = None, **counts: int | float) -> None:
        """Add to numeric session attributes, e.g. ``prompt_tokens=12, retries=1``.

        Raises:
            ConfigError: a non-numeric value; TraceStateError: no such live session.
        """
        if not self.enabled or not counts:
            return
        check_counts(counts, SESSION_RESERVED)
        lock = self.live.lock
        lock.acquire()
        try:
            self._session(session_id, "increment").increment(counts)
        finally:
            lock.release()

    # -- phases ---------------------------------------------------------------------------
    def phase(self, name: str, session_id: int | None = None) -> PhaseScope:
        """A span of phase ``name``: ``with``/``async with`` context manager or decorator.

        Attaches to ``session_id``, else the current session, else the current task
        (session NA); with neither it records nothing. Unregistered names are registered
        with a palette colour. An exception inside flags the span ``raised``.
        """
        return PhaseScope(self, name, session_id)

    def begin_phase(self, name: str, session_id: int | None = None) -> PhaseScope:
        """Open a span now and return its handle for :meth:`end_phase`."""
        return self.phase(name, session_id).__enter__()

    def end_phase(self, handle: PhaseScope) -> None:
        """Close a span opened by :meth:`begin_phase`.

        A span already closed by ``finalize`` is left alone.

        Raises:
            TraceStateError: the handle was never started or was already ended.
        """
        if not isinstance(handle, PhaseScope):
            raise TraceStateError(f"end_phase() needs a handle from begin_phase(), got "
                                  f"{handle!r}")
        state = handle.state
        if state == NEW:
            raise TraceStateError(f"phase {handle.name!r} was never started")
        if state == ENDED:
            raise TraceStateError(f"phase {handle.name!r} was already ended")
        if state == OPEN:
            handle.__exit__(None, None, None)

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
        from ._frames.build import build_traces
        return build_traces(snap, self.epoch_ns, self.wall_epoch)

    def tasks_df(self) -> pd.DataFrame:
        """Tasks indexed by ``task_id`` (see ``rollout_kit.tracing.schema``)."""
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
                side = self._side_records()
                self._due = 0
            recs = [r for r in (rec, *side) if r is not None]
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
                side = self._side_records()
                drained, _ = self._store.records(self.epoch_ns, 0, 0, 0, 0)
                all_metrics = self._store.server_metrics.record(self.epoch_ns, 0)
                all_steps = self._store.steps.rows().record(self.epoch_ns)
                drained.extend(r for r in (all_metrics, all_steps) if r is not None)
                self._drained = self._drained or bool(drained)
                self._store = Store()
                self._wcode = self._store.worker_code(self.worker)
                self._cursor = (0, 0, 0, 0)
                self._metrics_cursor = 0
                self._steps_cursor = (0, 0)
                self._due = 0
            recs = [r for r in (rec, *side) if r is not None]
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
        from ._frames.files import compact_trace, source_info
        from ._frames.parquet import write_snapshot
        if self.dump is not None:
            self.dump.flush()
        with self._io_lock:
            with self.live.lock:
                rec, self._cursor = self._store.columns(self.epoch_ns, *self._cursor)
                side = self._side_records()
                self._due = 0
                snap = None if self._drained else self._store.snapshot()
                header = self._header()
            recs = [r for r in (rec, *side) if r is not None]
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
