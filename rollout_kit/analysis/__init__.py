"""Pure pandas/numpy analysis of the trace DataFrames (never imports matplotlib).

Every function takes the ``tasks`` / ``sessions`` / ``spans`` frames built by
``rollout_kit.tracing`` (column names from :mod:`rollout_kit.tracing.schema`), checks the
columns it needs (a missing one raises :class:`~rollout_kit.errors.TraceSchemaError`
naming it) and returns a DataFrame. Empty input gives an empty but well-formed result.

Times in results are seconds since the first submit (tasks) or the first span start
(spans) unless ``t0`` is given, so they line up with the plots of ``rollout_kit.plotting``.

Usage::

    from rollout_kit import analysis
    s = analysis.summary(traces.tasks, sessions=traces.sessions)
    s.latency            # p50/p90/p99/max per metric
    analysis.compare({"baseline": a.tasks, "new": b.tasks})

The package: :mod:`.summaries` (``summary``, ``compare``), :mod:`.over_time`
(``throughput``, ``concurrency``), :mod:`.groups` (``by_server``, ``by_phase``,
``slowest``), :mod:`.agents` (``turns``, ``drift_table``, ``group_tail``,
``slowest_split``: the per-turn views of agent rollouts) and :mod:`.server`
(``server_series``: the servers' state over time, from the scraped metrics), with
:mod:`.slow` (``why_slow``: a task's time part by part beside the server's state) above
them, over :mod:`.common` (the column checks, the phase names, the percentiles).
"""

from .agents import drift_table, group_tail, slowest_split, turns
from .common import LATENCY_STATS, PERCENTILES, is_spans, phase_names, require_columns
from .groups import by_phase, by_server, slowest
from .over_time import concurrency, throughput
from .server import SERIES_COLUMNS, server_series
from .slow import WHY_COLUMNS, why_slow
from .summaries import Summary, compare, summary

__all__ = [
    "LATENCY_STATS",
    "PERCENTILES",
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
    "server_series",
    "slowest",
    "slowest_split",
    "summary",
    "throughput",
    "turns",
    "why_slow",
]
