"""The store's layout: the names of the record format, the marker of an absent time and
the span flags, the strides of the flat row buffers and the rows ``commit`` takes, the
sparse attribute column, and a row buffer as a 2-D numpy array."""

from __future__ import annotations

from array import array
from collections.abc import Mapping

import numpy as np

from ..schema import LIFECYCLE_EVENTS
from .attrs import AttrValue

FORMAT = "rollout_kit.trace"
COLUMNS = "columns"  # the kind of a batch-of-columns record (trace files, schema 2)
MISSING = -(2**63)
FLAG_CLOSED_AT_FINALIZE = 1
FLAG_RAISED = 2

SessionRow = tuple[int, int, int, int, Mapping[str, AttrValue]]  # id, status, start, end, attrs
SpanRow = tuple[int, int, int, int, int]  # session index | -1, phase code, start, end, flags
EventRow = tuple[int, int, int, int]  # session index, kind code, ts, value (MISSING: none)

# strides of the flat int64 row buffers
T_ID, T_STATUS, T_WORKER, T_NSESS, T_NSPAN, T_MARKS = 0, 1, 2, 3, 4, 5
T_STRIDE = T_MARKS + len(LIFECYCLE_EVENTS)
S_STRIDE = 4  # session_id, status, start, end
P_STRIDE = 5  # session index | -1, phase code, start, end, flags
M_STRIDE = 4  # task_id, worker, event, ts
E_STRIDE = 5  # task row, session index, kind, ts, value


class Sparse:
    """One attribute column: the rows that have a value, and the values."""

    __slots__ = ("rows", "values")

    def __init__(self) -> None:
        self.rows = array("q")
        self.values: list[AttrValue] = []

    def copy(self) -> Sparse:
        c = Sparse()
        c.rows = array("q", self.rows)
        c.values = list(self.values)
        return c


def row_array(a: array[int], stride: int) -> np.ndarray:
    if len(a) == 0:
        return np.empty((0, stride), dtype=np.int64)
    return np.frombuffer(a, dtype=np.int64).reshape(-1, stride).copy()
