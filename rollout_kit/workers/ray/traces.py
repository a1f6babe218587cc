"""Merge a Ray worker's trace record of one task into the controller's tracer.

A worker's record carries times relative to the worker tracer's epoch and a header whose
``wall_epoch`` anchors them; the controller's tracer re-anchors a segment through that
header on :meth:`~rollout_kit.tracing.Tracer.ingest`. :func:`reanchor` corrects the anchor
by the worker's measured clock offset and puts the controller's own lifecycle marks
(``submit``, ``dispatch`` as the controller saw them) into the record, so one task is one
row on the controller's time axis. Marks are addressed by name, never by position.

(A public re-anchor function is planned for :mod:`rollout_kit.tracing`; this module is the
stand-in until it lands.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...tracing.schema import LIFECYCLE_EVENTS, SCHEMA_VERSION
from ...tracing.store import FORMAT

if TYPE_CHECKING:
    from ...tracing import Tracer

__all__ = ["CONSUME", "DISPATCH", "END", "START", "SUBMIT", "controller_record", "reanchor"]

#: positions of the lifecycle marks in a task record's ``marks`` list
SUBMIT, DISPATCH, START, END, CONSUME = (LIFECYCLE_EVENTS.index(e) for e in
                                         ("submit", "dispatch", "start", "end", "consume"))
_POS = {e: i for i, e in enumerate(LIFECYCLE_EVENTS)}


def _header(wall_epoch: float, worker: str | None) -> dict[str, Any]:
    return {"kind": "header", "format": FORMAT, "schema": SCHEMA_VERSION,
            "wall_epoch": wall_epoch, "worker": worker}


def reanchor(header: Mapping[str, Any], record: Mapping[str, Any], tracer: Tracer, *,
             offset_s: float, marks: Mapping[str, int | None]) -> list[dict[str, Any]]:
    """``[header, record]`` of a worker's task, ready for ``tracer.ingest``.

    Args:
        header: the worker tracer's header record.
        record: the worker's ``task`` record of the task.
        tracer: the controller's tracer (its ``epoch_ns`` / ``wall_epoch``).
        offset_s: the worker's wall clock minus the controller's, in seconds.
        marks: lifecycle events recorded by the controller (``perf_counter_ns`` values of
            its clock), which replace the worker's; ``consume`` is always cleared (the
            result's owner marks it when the result is taken).
    """
    head = dict(header)
    head["wall_epoch"] = float(head["wall_epoch"]) - offset_s
    # the ingest places record time t at tracer.epoch_ns + shift + t
    shift = round((head["wall_epoch"] - tracer.wall_epoch) * 1e9)
    rec = dict(record)
    out = list(rec["marks"])
    for event, ts in marks.items():
        if ts is not None:
            out[_POS[event]] = ts - tracer.epoch_ns - shift
    out[CONSUME] = None
    rec["marks"] = out
    return [head, rec]


def controller_record(tracer: Tracer, task_id: int, worker: str, *, status: str,
                      reason: str | None, error: str | None,
                      marks: Mapping[str, int | None]) -> list[dict[str, Any]]:
    """``[header, record]`` of a task that ended without a worker record (cancelled while
    queued, failed in the call): only the controller's marks, on its own clock."""
    out: list[int | None] = [None] * len(LIFECYCLE_EVENTS)
    for event, ts in marks.items():
        if ts is not None:
            out[_POS[event]] = ts - tracer.epoch_ns
    rec = {"kind": "task", "task_id": task_id, "worker": worker, "status": status,
           "reason": reason, "error": error, "marks": out, "attrs": {}, "sessions": [],
           "spans": []}
    return [_header(tracer.wall_epoch, worker), rec]
