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

The package: :mod:`.attrs` (attribute values and their checks), :mod:`.idset` (the
finished-ids bitmap), :mod:`.snapshot` (the numpy copy the frames are built from),
:mod:`.layout` (the format's names, the row strides, the sparse column), :mod:`.buffers`
(the rows and their writing), :mod:`.metrics` (the server metrics rows) and :mod:`.store`
(:class:`Store`: the buffers with their rows out as records and records back in).
"""

from .attrs import AttrValue, check_attrs, check_counts
from .idset import IdSet
from .layout import (
    COLUMNS,
    FLAG_CLOSED_AT_FINALIZE,
    FLAG_RAISED,
    FORMAT,
    MISSING,
    EventRow,
    SessionRow,
    SpanRow,
)
from .snapshot import AttrValues, Snapshot
from .store import Store

__all__ = [
    "COLUMNS",
    "FLAG_CLOSED_AT_FINALIZE",
    "FLAG_RAISED",
    "FORMAT",
    "MISSING",
    "AttrValue",
    "AttrValues",
    "EventRow",
    "IdSet",
    "SessionRow",
    "Snapshot",
    "SpanRow",
    "Store",
    "check_attrs",
    "check_counts",
]
