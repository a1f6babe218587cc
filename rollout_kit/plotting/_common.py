"""Colours, axes and input helpers shared by the plotting modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .. import analysis
from .._errors import ConfigError
from ..tracing import PALETTE, phase_color, registered_phases
from ..tracing import schema as S

QUEUED_COLOR = "#cbd5e1"
IDLE_COLOR = "#e5e7eb"
RUNNING_COLOR = "#64748b"
QUEUED_LINE_COLOR = "#ea580c"  # queued tasks as a line (concurrency): far from RUNNING_COLOR
TOTAL_COLOR = "#6b21a8"
STATUS_COLORS = {"accepted": "#1f77b4", "rejected": "#d62728", "failed": "#9467bd",
                 "cancelled": "#ff7f0e", "pending": "#7f7f7f"}
MARKED_STATUSES = ("failed", "rejected", "cancelled")  # outlined in the timeline by default
_LABEL_ROWS = 50  # label rows one by one up to this many
_HATCH_ROWS = 200  # hatch the queued segments up to this many rows
F64 = np.ndarray[Any, np.dtype[np.float64]]


def color_of_phase(phase: str) -> str:
    """The registry colour of ``phase``; an unregistered one gets a stable palette colour."""
    if phase in registered_phases():
        return phase_color(phase)
    return PALETTE[sum(map(ord, phase)) % len(PALETTE)]


def axes_for(ax: Axes | None, figsize: tuple[float, float] = (8.0, 4.5)) -> Axes:
    if ax is not None:
        return ax
    _, new = plt.subplots(figsize=figsize)
    return new


def no_data(ax: Axes, title: str, why: str = "no data") -> Axes:
    ax.set_title(title)
    ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center",
            color="#6b7280", fontsize=12, gid="no-data")
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def floats(s: pd.Series[Any]) -> F64:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def tasks_frame(tasks: pd.DataFrame) -> pd.DataFrame:
    tasks = analysis.require_columns(tasks, (S.SUBMIT_TS,), "tasks")
    if S.TASK_ID not in tasks.columns:
        tasks = tasks.rename_axis(S.TASK_ID).reset_index()
    return tasks


# -- timeline --------------------------------------------------------------------------

def check_choice(name: str, value: object, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}")


# -- distributions ---------------------------------------------------------------------
