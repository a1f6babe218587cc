"""A mark for a task that arrived by ``ingest`` (e.g. ``consume`` by the result's owner)."""

from __future__ import annotations

import pytest

from rollout_kit import UnknownTaskIdError
from rollout_kit.tracing import Tracer


def test_consume_mark_of_an_ingested_task_is_merged_into_its_row() -> None:
    worker = Tracer(worker="ray0")
    worker.register_task(7)
    worker.finalize(7, "accepted")
    main = Tracer()
    assert main.ingest(worker.drain_records()) == 1
    main.mark(7, "consume")
    row = main.tasks_df().loc[7]
    assert row["worker"] == "ray0" and row["consume_ts"] >= row["end_ts"]
    with pytest.raises(UnknownTaskIdError):
        main.mark(8, "consume")
    main.reset()  # a reset forgets ingested ids like finalized ones
    with pytest.raises(UnknownTaskIdError):
        main.mark(7, "consume")
