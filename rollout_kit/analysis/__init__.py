"""Pure pandas/numpy analysis of the trace DataFrames (never imports matplotlib).

Every function takes the ``tasks`` / ``sessions`` / ``spans`` frames built by
``rollout_kit.tracing`` (column names from ``rollout_kit.tracing.schema``), checks the
columns it needs (a missing one raises :class:`~rollout_kit.TraceSchemaError`
naming it) and returns a DataFrame. Empty input gives an empty but well-formed result.

Times in results are seconds since the first submit (tasks) or the first span start
(spans) unless ``t0`` is given, so they line up with the plots of ``rollout_kit.plotting``.

Usage::

    from rollout_kit import analysis
    s = analysis.summary(traces.tasks, sessions=traces.sessions)
    s.latency            # p50/p90/p99/max per metric
    analysis.compare({"baseline": a.tasks, "new": b.tasks})
    analysis.rl_steps(traces.steps, traces.step_samples, tasks=traces.tasks)  # RL loops

"""

from ._agents import drift_table, group_tail, slowest_split, turns
from ._common import LATENCY_STATS, PERCENTILES, is_spans, phase_names, require_columns
from ._groups import by_phase, by_server, slowest
from ._over_time import concurrency, throughput
from ._rl import RL_STEP_COLUMNS, rl_steps, rl_summary
from ._server import SEGMENT_COLUMNS, SERIES_COLUMNS, server_segments, server_series
from ._slow import WHY_COLUMNS, why_slow
from ._summaries import Summary, compare, summary

__all__ = [
    "LATENCY_STATS",
    "PERCENTILES",
    "RL_STEP_COLUMNS",
    "SEGMENT_COLUMNS",
    "SERIES_COLUMNS",
    "WHY_COLUMNS",
    "Summary",
    "by_phase",
    "by_server",
    "compare",
    "concurrency",
    "drift_table",
    "group_tail",
    "is_spans",
    "phase_names",
    "require_columns",
    "rl_steps",
    "rl_summary",
    "server_segments",
    "server_series",
    "slowest",
    "slowest_split",
    "summary",
    "throughput",
    "turns",
    "why_slow",
]
