"""The RL steps a tracer holds (:class:`StepsBuffer`), their copy in a snapshot
(:class:`StepRows`) and their record.

A training loop records a handful of rows per step (one per step, one per consumed
result), so rows are plain tuples: no columnar machinery is worth it at that rate.

The record (a line of a trace file, the ``rl_steps`` entry of a Parquet file's metadata)::

    {"kind": "rl_steps",
     "steps": {"step": [...], "version": [...], "start_ts": [...], ..., "error": [...]},
     "samples": {"task_id": [...], "step": [...], "version_min": [...], ...}}

Step times are nanoseconds since the header's ``epoch_ns`` (``null``: did not happen).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import schema as S

#: the kind of an RL steps record
STEPS = "rl_steps"

STEP_FIELDS = (S.STEP, *S.STEP_COLUMNS)
SAMPLE_FIELDS = (S.TASK_ID, *S.STEP_SAMPLE_COLUMNS)
_TIME_AT = frozenset(STEP_FIELDS.index(t) for t in S.STEP_TIMES)
_INT_STEP = frozenset(STEP_FIELDS.index(c) for c in (S.STEP, S.VERSION, S.SAMPLES, S.TOKENS))
_STR_STEP = frozenset(STEP_FIELDS.index(c) for c in (S.STEP_STATUS, S.ERROR))
StepRow = tuple[Any, ...]  # STEP_FIELDS, times as ns on the tracer's clock or None
SampleRow = tuple[Any, ...]  # SAMPLE_FIELDS


@dataclass
class StepRows:
    """Step and sample rows (times absolute ns on the owner's clock)."""

    steps: list[StepRow] = field(default_factory=list)
    samples: list[SampleRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)

    def shifted(self, shift_ns: int) -> StepRows:
        """The same rows, times moved by ``shift_ns``."""
        if not shift_ns:
            return self
        return StepRows([_shift(r, shift_ns) for r in self.steps], list(self.samples))

    @staticmethod
    def concat(parts: Sequence[StepRows]) -> StepRows:
        return StepRows([r for p in parts for r in p.steps],
                        [r for p in parts for r in p.samples])

    def record(self, epoch_ns: int) -> dict[str, Any] | None:
        """These rows as a record (``None``: no rows)."""
        if not self.steps and not self.samples:
            return None
        steps = [_shift(r, -epoch_ns) for r in self.steps]
        return {"kind": STEPS,
                "steps": {name: [r[i] for r in steps] for i, name in enumerate(STEP_FIELDS)},
                "samples": {name: [r[i] for r in self.samples]
                            for i, name in enumerate(SAMPLE_FIELDS)}}

    @staticmethod
    def from_record(rec: Mapping[str, Any], shift: int) -> StepRows:
        """Rows of a record, times shifted by ``shift``.

        Raises:
            ValueError, TypeError, KeyError: a malformed record.
        """
        steps = _columns(rec["steps"], STEP_FIELDS)
        samples = _columns(rec["samples"], SAMPLE_FIELDS)
        for row in steps:
            for i, v in enumerate(row):
                if i in _TIME_AT or i in _INT_STEP:
                    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                        raise TypeError(f"step {STEP_FIELDS[i]} is not an int: {v!r}")
                elif i in _STR_STEP and v is not None and not isinstance(v, str):
                    raise TypeError(f"step {STEP_FIELDS[i]} is not a string: {v!r}")
        for row in samples:
            if not all(isinstance(v, int) for v in row):
                raise TypeError(f"a step sample has a value that is not an int: {row!r}")
        return StepRows([_shift(r, shift) for r in steps],
                        [(*r[:-2], bool(r[-2]), r[-1]) for r in samples])


def _shift(row: StepRow, shift: int) -> StepRow:
    return tuple(v + shift if i in _TIME_AT and v is not None else v
                 for i, v in enumerate(row))


def _columns(table: Any, names: tuple[str, ...]) -> list[tuple[Any, ...]]:
    if not isinstance(table, Mapping):
        raise TypeError(f"expected a mapping of columns, got {type(table).__name__}")
    cols = [table[n] for n in names]
    if not all(isinstance(c, list) for c in cols):
        raise TypeError("a column is not a list")
    if len({len(c) for c in cols}) > 1:
        raise ValueError("columns of different lengths")
    return list(zip(*cols, strict=True))


class StepsBuffer:
    """The RL step rows of a store, appended by :meth:`Tracer.record_step`."""

    __slots__ = ("samples", "steps")

    def __init__(self) -> None:
        self.steps: list[StepRow] = []
        self.samples: list[SampleRow] = []

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, step: StepRow, samples: Sequence[SampleRow]) -> None:
        self.steps.append(step)
        self.samples.extend(samples)

    def rows(self, start: tuple[int, int] = (0, 0)) -> StepRows:
        """A copy of the rows from ``start`` (steps, samples) on."""
        return StepRows(self.steps[start[0]:], self.samples[start[1]:])

    def cursor(self) -> tuple[int, int]:
        return len(self.steps), len(self.samples)

    def ingest(self, rec: Mapping[str, Any], shift: int) -> int:
        """Append a record's rows, times shifted by ``shift``; how many steps."""
        rows = StepRows.from_record(rec, shift)
        self.add_rows(rows)
        return len(rows.steps)

    def add_rows(self, rows: StepRows) -> None:
        self.steps.extend(rows.steps)
        self.samples.extend(rows.samples)

    def copy(self) -> StepsBuffer:
        c = StepsBuffer()
        c.add_rows(self.rows())
        return c
