"""Traces recorded in another process: put them on this process's time axis.

:func:`controller_record` is the submitting side's own record of such a task, built from the
``perf_counter_ns`` stamps it took (marks named as in ``schema.LIFECYCLE_EVENTS``); a task
that ended without a worker record (cancelled while queued, failed in the call) is ingested
as that record alone.

A worker process records a task with its own tracer and ships the records
(:meth:`Tracer.drain_records` format: a header, then task records) back; the receiving
tracer :meth:`~rollout_kit.tracing._tracer.Tracer.ingest` s them, re-anchoring times through
the header's ``wall_epoch``. :func:`reanchor` prepares such records first: it corrects the
header for the worker's clock offset and, for a task the receiving side submitted and
dispatched itself, replaces those marks by the ones it saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import TraceSchemaError
from ._codes import CONSUME, DISPATCH, EVENT_CODES, N_MARKS, SUBMIT
from ._store import FORMAT
from .schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from ._tracer import Tracer


def controller_record(tracer: Tracer, task_id: int, worker: str, *, status: str,
                      reason: str | None, error: str | None,
                      marks: Mapping[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(header, task record)`` of a task as the submitting side saw it, on ``tracer``'s
    clock: pass it as :func:`reanchor`'s ``local``, or alone to ``Tracer.ingest``.

    Args:
        tracer: the submitting side's tracer (its ``epoch_ns`` / ``wall_epoch`` anchor).
        task_id, worker, status, reason, error: the record's fields.
        marks: ``perf_counter_ns`` stamps by lifecycle event (``"submit"``, ``"dispatch"``,
            ``"start"``, ``"end"``).
    """
    out: list[int | None] = [None] * N_MARKS
    for event, ts in marks.items():
        out[EVENT_CODES[event]] = ts - tracer.epoch_ns
    header = {"kind": "header", "format": FORMAT, "schema": SCHEMA_VERSION,
              "wall_epoch": tracer.wall_epoch, "worker": worker}
    record = {"kind": "task", "task_id": task_id, "worker": worker, "status": status,
              "reason": reason, "error": error, "marks": out, "attrs": {}, "sessions": [],
              "spans": []}
    return header, record


def reanchor(header: Mapping[str, Any], record: Mapping[str, Any], *,
             clock_offset_s: float = 0.0,
             local: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
             local_marks: Iterable[int] = (SUBMIT, DISPATCH),
             drop_marks: Iterable[int] = (CONSUME,)) -> list[dict[str, Any]]:
    """``[header, record]`` of a task traced in another process, ready for ``ingest``.

    Args:
        header: the remote tracer's header record (its clock anchor).
        record: the remote task record (``kind == "task"``); not modified.
        clock_offset_s: how far the remote wall clock runs ahead of this one (seconds);
            the returned header's ``wall_epoch`` is moved back by it.
        local: ``(header, task record)`` of the same task as recorded here, e.g. drained
            from the tracer that submitted and dispatched it; its ``local_marks`` replace
            the remote ones, converted to the remote header's time axis (a missing local
            mark keeps the remote value).
        local_marks: mark codes (:mod:`~rollout_kit.tracing._codes`) taken from ``local``.
        drop_marks: mark codes cleared in the result (default: ``CONSUME``, which the
            consuming side records itself).

    Returns:
        New dicts: the corrected header and the task record with the merged marks; pass
        them to :meth:`Tracer.ingest`.

    Raises:
        TraceSchemaError: a header without ``wall_epoch`` or a record without ``marks``.
    """
    try:
        head = dict(header)
        head["wall_epoch"] = float(head["wall_epoch"]) - clock_offset_s
        rec = dict(record)
        marks = list(rec["marks"])
        if local is not None:
            lhead, lrec = local
            # a time t relative to the local epoch is t + shift relative to the remote one
            shift = round((float(lhead["wall_epoch"]) - head["wall_epoch"]) * 1e9)
            lmarks = lrec["marks"]
            for code in local_marks:
                if lmarks[code] is not None:
                    marks[code] = int(lmarks[code]) + shift
        for code in drop_marks:
            marks[code] = None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TraceSchemaError(f"reanchor(): malformed header or task record: {exc!r}") from exc
    rec["marks"] = marks
    return [head, rec]
