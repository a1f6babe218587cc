"""A small trace's header and column batch, and the edit of one field of it, for the tests
that feed malformed batches to the readers (``test_batch_errors``, ``test_store_ingest``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollout_kit.tracing import Tracer, annotate, session_event

Record = dict[str, Any]


def traced_batch(path: Path, *, events: bool = False) -> tuple[Record, Record]:
    """Trace two tasks of one session and one span each with a session attribute into
    ``path``; with ``events`` also a session event per task and a late mark of task 0.
    Returns the file's header and its one column batch."""
    tr = Tracer(path=path, parquet=False)
    for tid in range(2):
        tr.register_task(tid)
        with tr.task_scope(tid), tr.session():
            annotate(server=f"h:{tid}")
            with tr.phase("generate"):
                if events:
                    session_event("continue", version=tid)
        tr.finalize(tid, "accepted")
    if events:
        tr.mark(0, "consume")
    tr.close()
    header, columns = (json.loads(line) for line in path.read_text().splitlines())
    return header, columns


def set_at(path: str, value: Any) -> Callable[[Record], None]:
    """An edit that sets the field at dotted ``path`` of a record to ``value``."""
    keys = path.split(".")

    def change(rec: Record) -> None:
        node = rec
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return change
