"""One run summarized (``summary``: latency percentiles, throughput, status counts; the
:class:`Summary` as a Series, Markdown or HTML) and several side by side (``compare``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .._errors import ConfigError
from ..tracing import schema as S
from ._common import LATENCY_STATS, PERCENTILES, floats, is_status, phase_names, require_columns


def _stats(values: np.ndarray[Any, np.dtype[np.float64]]) -> list[float]:
    v = values[~np.isnan(values)]
    if v.size == 0:
        return [0.0] + [np.nan] * (len(LATENCY_STATS) - 1)
    q = np.percentile(v, PERCENTILES)
    return [float(v.size), float(v.mean()), *map(float, q), float(v.max())]


def _stats_frame(columns: Mapping[str, np.ndarray[Any, np.dtype[np.float64]]]) -> pd.DataFrame:
    out = pd.DataFrame([_stats(v) for v in columns.values()], index=list(columns),
                       columns=list(LATENCY_STATS), dtype="float64")
    out["count"] = out["count"].astype("int64")
    out.index.name = "metric"
    return out


@dataclass(frozen=True, slots=True)
class Summary:
    """What :func:`summary` returns.

    Attributes:
        latency: one row per metric (``queue_s``, ``ttft_s``, ``<phase>_s``, ``run_s``,
            ``total_s``), columns :data:`LATENCY_STATS`.
        throughput: ``duration_s``, ``tasks_per_s``, ``accepted_per_s``,
            ``completion_tokens_per_s``, ``prompt_tokens_per_s``.
        status: task count per status (every status, zeros included).
    """

    latency: pd.DataFrame
    throughput: pd.Series[float]
    status: pd.Series[int]

    def as_series(self) -> pd.Series[float]:
        """One flat Series (``"total_s p50"``, ``"tasks_per_s"``, ``"status accepted"``…)."""
        stats = self.latency.drop(columns=["count", "mean"])
        lat = pd.Series(stats.to_numpy(dtype=np.float64).ravel(),
                        index=[f"{m} {c}" for m in stats.index for c in stats.columns])
        status = self.status.astype("float64")
        status.index = [f"status {k}" for k in status.index]
        out: pd.Series[float] = pd.concat([lat, self.throughput.astype("float64"), status])
        return out

    def to_markdown(self) -> str:
        """The summary as Markdown tables (latency, throughput, status)."""
        thr = self.throughput.to_frame("value")
        st = self.status.to_frame("tasks")
        return "\n\n".join([
            "### Latency (seconds)\n\n" + _markdown_table(self.latency),
            "### Throughput\n\n" + _markdown_table(thr),
            "### Status\n\n" + _markdown_table(st),
        ]) + "\n"

    def _repr_html_(self) -> str:
        return "".join(f"<h4>{t}</h4>{df.to_html(float_format='{:.4g}'.format)}"
                       for t, df in (("Latency (s)", self.latency),
                                     ("Throughput", self.throughput.to_frame("value")),
                                     ("Status", self.status.to_frame("tasks"))))


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        return "nan" if np.isnan(v) else f"{v:.4g}"
    return str(v)


def _markdown_table(df: pd.DataFrame) -> str:
    head = [str(df.index.name or "")] + [str(c) for c in df.columns]
    rows = [[str(i)] + [_fmt(v) for v in row]
            for i, row in zip(df.index, df.itertuples(index=False), strict=True)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def summary(tasks: pd.DataFrame, *, sessions: pd.DataFrame | None = None) -> Summary:
    """Latency percentiles, throughput and status counts of one run.

    Args:
        tasks: the tasks frame (needs ``status``, ``submit_ts``, ``end_ts``).
        sessions: the sessions frame; when given (with ``ttft_s``), TTFT percentiles are
            taken per session.

    Returns:
        A :class:`Summary`.

    Raises:
        TraceSchemaError: a required column is missing.
    """
    tasks = require_columns(tasks, (S.STATUS, S.SUBMIT_TS, S.END_TS), "tasks")
    submit, end = floats(tasks[S.SUBMIT_TS]), floats(tasks[S.END_TS])
    metrics: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
    if S.QUEUE_S in tasks.columns:
        metrics[S.QUEUE_S] = floats(tasks[S.QUEUE_S])
    elif S.DISPATCH_TS in tasks.columns:
        metrics[S.QUEUE_S] = floats(tasks[S.DISPATCH_TS]) - submit
    if sessions is not None and S.TTFT_S in sessions.columns:
        metrics[S.TTFT_S] = floats(sessions[S.TTFT_S])
    elif S.TTFT_S in tasks.columns:
        metrics[S.TTFT_S] = floats(tasks[S.TTFT_S])
    for phase in phase_names(tasks):
        v = floats(tasks[S.phase_column(phase)])
        if np.any(v > 0):  # registered phases never used have all-zero columns: skip
            metrics[S.phase_column(phase)] = v
    if S.RUN_S in tasks.columns:
        metrics[S.RUN_S] = floats(tasks[S.RUN_S])
    metrics[S.TOTAL_S] = floats(tasks[S.TOTAL_S]) if S.TOTAL_S in tasks.columns else end - submit

    finished = ~np.isnan(end)
    duration = float(np.nanmax(end) - np.nanmin(submit)) if finished.any() else 0.0
    accepted = is_status(tasks[S.STATUS], "accepted")

    def rate(x: float) -> float:
        return x / duration if duration > 0 else np.nan

    def tokens(col: str) -> float:  # NA when no task has a count (not a silent 0)
        v = floats(tasks[col]) if col in tasks.columns else np.full(1, np.nan)
        return float(np.nansum(v)) if not np.isnan(v).all() else np.nan

    thr = pd.Series({
        "duration_s": duration,
        "tasks_per_s": rate(float(finished.sum())),
        "accepted_per_s": rate(float((finished & accepted).sum())),
        "completion_tokens_per_s": rate(tokens(S.COMPLETION_TOKENS)),
        "prompt_tokens_per_s": rate(tokens(S.PROMPT_TOKENS)),
    }, dtype="float64")
    status = (tasks[S.STATUS].value_counts()  # categorical-aware, no string conversion
              .reindex(list(S.STATUSES), fill_value=0).astype("int64"))
    status.index.name = S.STATUS
    return Summary(latency=_stats_frame(metrics), throughput=thr, status=status)


def compare(runs: Mapping[str, pd.DataFrame], *,
            sessions: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Side-by-side summary of several runs: one column per run, one row per metric.

    Args:
        runs: run name → tasks frame.
        sessions: optional run name → sessions frame (for TTFT).

    Returns:
        A DataFrame indexed by metric (``"total_s p50"``, ``"tasks_per_s"``…).

    Raises:
        ConfigError: ``runs`` is empty.
        TraceSchemaError: a frame lacks required columns.
    """
    if not runs:
        raise ConfigError("compare() needs at least one run")
    sessions = sessions or {}
    cols = {name: summary(t, sessions=sessions.get(name)).as_series() for name, t in runs.items()}
    order: dict[str, None] = {}
    for col in cols.values():
        order.update(dict.fromkeys(col.index))
    out = pd.DataFrame({name: col.reindex(list(order)) for name, col in cols.items()})
    out.index.name = "metric"
    return out
