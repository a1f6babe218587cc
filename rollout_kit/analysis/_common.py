"""What the analyses share: the column checks of their input frames, the phases of a frame,
numeric and status columns as numpy arrays, and the percentiles of the latency tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from .._errors import TraceSchemaError
from ..tracing import registered_phases
from ..tracing import schema as S

PERCENTILES = (50, 90, 99)
LATENCY_STATS = ("count", "mean", "p50", "p90", "p99", "max")
"""Columns of :attr:`Summary.latency` (and of the per-group latency tables)."""

# ``*_s`` columns that are not phase totals.
_NON_PHASE_SECONDS = frozenset({S.QUEUE_S, S.RUN_S, S.TOTAL_S, S.TTFT_S, S.ITL_S})


def require_columns(df: object, columns: Iterable[str], what: str) -> pd.DataFrame:
    """Check that ``df`` is a DataFrame holding ``columns`` (index names count too).

    Args:
        df: the object to check.
        columns: the required column names.
        what: what the frame is, for the message (``"tasks"``, ``"spans"``…).

    Returns:
        ``df`` with any named index levels among ``columns`` turned into columns.

    Raises:
        TraceSchemaError: ``df`` is not a DataFrame or lacks some of ``columns``.
    """
    if not isinstance(df, pd.DataFrame):
        raise TraceSchemaError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    cols = list(columns)
    index_names = [n for n in df.index.names if n is not None]
    missing = [c for c in cols if c not in df.columns and c not in index_names]
    if missing:
        raise TraceSchemaError(
            f"{what} frame lacks required column(s) {missing}; has {list(df.columns)[:20]}")
    if any(c in index_names and c not in df.columns for c in cols):
        return df.reset_index(level=[c for c in cols if c in index_names and c not in df.columns])
    return df


def is_spans(df: pd.DataFrame) -> bool:
    """Whether ``df`` looks like a spans frame (has a ``phase`` column) rather than tasks."""
    return S.PHASE in df.columns


def _is_session_seconds(col: str, cols: set[str]) -> bool:
    """Whether ``col`` is the ``<phase>_session_s`` companion of a ``<phase>_s`` column."""
    if not col.endswith(S.PHASE_SESSION_SUFFIX):
        return False
    phase = col[: -len(S.PHASE_SESSION_SUFFIX)]
    return S.phase_column(phase) in cols or phase in registered_phases()


def phase_names(df: pd.DataFrame) -> list[str]:
    """Phases present in a frame: from ``phase`` values (spans) or ``<phase>_s`` columns.

    The summed ``<phase>_session_s`` columns of a tasks frame are not phases of their own.
    Registered phases come first in registry order, then any other phase found.
    """
    order = registered_phases()
    if is_spans(df):
        found = [str(p) for p in pd.unique(df[S.PHASE].dropna())]
    else:
        cols = {c for c in df.columns if isinstance(c, str)}
        found = [c[:-2] for c in df.columns
                 if isinstance(c, str) and c.endswith("_s") and c not in _NON_PHASE_SECONDS
                 and not _is_session_seconds(c, cols)]
    known = [p for p in order if p in found]
    return known + sorted(p for p in found if p not in order)


def floats(s: pd.Series[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def is_status(status: pd.Series[Any], value: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return (status == value).to_numpy(dtype=bool, na_value=False)
