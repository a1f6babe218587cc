"""The :class:`Snapshot`: an immutable numpy copy of a store, what the frame builders, the
Parquet writer and reader take."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .attrs import AttrValue
from .metrics import MetricRows
from .steps import StepRows

# the values of one sparse attribute column in a snapshot: a list, or (read from Parquet) a
# numpy array of one type — int64, float64, bool — or a Categorical of str
AttrValues = list[AttrValue] | np.ndarray | pd.Categorical


@dataclass
class Snapshot:
    """An immutable numpy copy of a :class:`Store`, the input of the frame builders."""

    task_id: np.ndarray
    status: np.ndarray
    worker: np.ndarray
    workers: list[str | None]
    marks: list[np.ndarray]
    reason: list[str | None]
    error: list[str | None]
    n_sessions: np.ndarray
    n_spans: np.ndarray
    task_attrs: dict[str, tuple[np.ndarray, AttrValues]]
    session_id: np.ndarray
    session_status: np.ndarray
    session_start: np.ndarray
    session_end: np.ndarray
    session_attrs: dict[str, tuple[np.ndarray, AttrValues]]
    span_session: np.ndarray
    span_phase: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    span_flags: np.ndarray
    mark_task: np.ndarray
    mark_worker: np.ndarray
    mark_event: np.ndarray
    mark_ts: np.ndarray
    # session events (rare: continuations after a server abort): the task's row, the
    # session's index within the task, kind code, ts, value (MISSING: none)
    event_task: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_session: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_kind: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_ts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    event_value: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    extra: dict[str, Any] = field(default_factory=dict)
    # samples scraped from the servers' /metrics (:mod:`.metrics`)
    server_metrics: MetricRows = field(default_factory=MetricRows)
    # the steps of an RL loop (:mod:`.steps`)
    steps: StepRows = field(default_factory=StepRows)
