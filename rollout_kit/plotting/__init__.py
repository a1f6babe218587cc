"""Matplotlib views of the trace DataFrames (the only rollout_kit package importing matplotlib).

Every ``plot_*`` function takes a DataFrame plus ``ax=None`` (a new figure when omitted),
draws, and returns the ``Axes``; nothing calls ``plt.show()``. Numbers come from
:mod:`rollout_kit.analysis`; colours and legend labels of phases come from the phase
registry, so a phase registered with ``register_phase(name, color)`` shows up with no code
change. Empty traces, traces with only failures and frames lacking optional columns give a
labelled "no data" plot instead of a traceback.

The timeline draws ONE collection per segment kind (idle, queued, each phase): a
``PathCollection`` holding a single compound path of all that kind's rectangles, vertices
built in numpy (5 per bar), so the artist count does not grow with the number of tasks and
100 000 tasks draw to PNG in well under a second. Each collection's ``gid`` is
``"timeline:<kind>"`` for programmatic access.

Usage::

    from rollout_kit import plotting
    ax = plotting.plot_timeline(traces.spans, tasks=traces.tasks)
    fig = plotting.dashboard(traces.tasks, traces.spans, traces.sessions)
    fig = plotting.load_sweep_figure(sweep_df, run.frame)   # open-loop load sweeps
    fig = plotting.conversation_figure(crun.turns)          # TTFT by turn, vs cache hits
    ax = plotting.plot_timeline(traces.spans, tasks=traces.tasks,
                                server_metrics=traces.server_metrics)  # + server lanes
    plotting.plot_why_slow(analysis.why_slow(traces))       # the slowest tasks, part by part
    fig = plotting.rl_figure(t.steps, t.spans, t.step_samples, events=t.events)  # RL loops
"""

from __future__ import annotations

from ._charts import (
    dashboard,
    plot_concurrency,
    plot_latency_hist,
    plot_latency_scatter,
    plot_server_load,
    plot_throughput,
    save_plot,
    throughput_window,
)
from ._common import IDLE_COLOR, QUEUED_COLOR, STATUS_COLORS
from ._conversations import conversation_figure, plot_ttft_by_turn, plot_ttft_vs_cache_hit
from ._load import (
    load_sweep_figure,
    plot_achieved_rate,
    plot_goodput,
    plot_latency_vs_throughput,
    plot_send_lag,
)
from ._rl import (
    TRAINER_COLORS,
    RLTimelineLayout,
    plot_rl_timeline,
    plot_staleness_sweep,
    plot_step_split,
    rl_figure,
    rl_timeline_layout,
)
from ._server import lane_layout, plot_server_lanes, plot_why_slow, why_slow_figure
from ._timeline import plot_timeline, timeline_figure

__all__ = [
    "IDLE_COLOR",
    "QUEUED_COLOR",
    "RLTimelineLayout",
    "STATUS_COLORS",
    "TRAINER_COLORS",
    "conversation_figure",
    "dashboard",
    "lane_layout",
    "load_sweep_figure",
    "plot_achieved_rate",
    "plot_concurrency",
    "plot_goodput",
    "plot_latency_hist",
    "plot_latency_scatter",
    "plot_latency_vs_throughput",
    "plot_rl_timeline",
    "plot_send_lag",
    "plot_server_lanes",
    "plot_server_load",
    "plot_staleness_sweep",
    "plot_step_split",
    "plot_throughput",
    "plot_timeline",
    "plot_ttft_by_turn",
    "plot_ttft_vs_cache_hit",
    "plot_why_slow",
    "rl_figure",
    "rl_timeline_layout",
    "save_plot",
    "throughput_window",
    "timeline_figure",
    "why_slow_figure",
]
