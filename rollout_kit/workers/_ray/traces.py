"""The controller's side of a Ray task's trace, for merging the worker's record.

A worker records each task with its own tracer and ships the record back with the result;
:func:`~rollout_kit.tracing.reanchor` puts it on the controller's time axis, taking the
``submit`` and ``dispatch`` marks from the controller's own record of the task, which
:func:`controller_record` builds from the ``perf_counter_ns`` stamps the handle took (marks
addressed by their :mod:`~rollout_kit.tracing._codes`, never by position). A task that ended
without a worker record (cancelled while queued, failed in the call) is ingested as that
controller record alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...tracing._codes import N_MARKS
from ...tracing._schema import SCHEMA_VERSION
from ...tracing._store import FORMAT

if TYPE_CHECKING:
    from ...tracing import Tracer


def controller_record(tracer: Tracer, task_id: int, worker: str, *, status: str,
                      reason: str | None, error: str | None,
                      marks: Mapping[int, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(header, task record)`` of a task as the controller saw it, on ``tracer``'s clock.

    Args:
        tracer: the controller's tracer (its ``epoch_ns`` / ``wall_epoch`` anchor).
        task_id, worker, status, reason, error: the record's fields.
        marks: ``perf_counter_ns`` stamps by mark code (:mod:`rollout_kit.tracing._codes`).
    """
    out: list[int | None] = [None] * N_MARKS
    for code, ts in marks.items():
        out[code] = ts - tracer.epoch_ns
    header = {"kind": "header", "format": FORMAT, "schema": SCHEMA_VERSION,
              "wall_epoch": tracer.wall_epoch, "worker": worker}
    record = {"kind": "task", "task_id": task_id, "worker": worker, "status": status,
              "reason": reason, "error": error, "marks": out, "attrs": {}, "sessions": [],
              "spans": []}
    return header, record
