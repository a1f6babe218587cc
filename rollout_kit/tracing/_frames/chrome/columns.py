"""The frames as the Chrome layout reads them: required columns, numeric and string
columns as numpy arrays, the pseudo ids and default names both the layout and the counters
use."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...._errors import TraceSchemaError

F64 = np.ndarray[Any, np.dtype[np.float64]]
I64 = np.ndarray[Any, np.dtype[np.int64]]

NO_SESSION = -2  # pseudo session id of spans recorded outside any session
DEFAULT_PROCESS = "rollout_kit"  # the process of tasks without a worker


def require_columns(df: object, required: tuple[str, ...], what: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TraceSchemaError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    names = [n for n in df.index.names if n is not None and n not in df.columns]
    if names:
        df = df.reset_index(level=names)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceSchemaError(f"{what} frame lacks required column(s) {missing}")
    return df


def floats(s: pd.Series[Any]) -> F64:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def ints(s: pd.Series[Any], fill: int) -> I64:
    return pd.to_numeric(s, errors="coerce").fillna(fill).to_numpy(dtype=np.int64)


def strings(df: pd.DataFrame, col: str, mask: np.ndarray | None = None) -> Any:
    if col not in df.columns:
        return None
    values = df[col].astype("string").to_numpy()
    return values if mask is None else values[mask]
