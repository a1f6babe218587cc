"""Tracing: task lifecycles, sessions and phase spans → pandas DataFrames and JSONL.

- :class:`Tracer` records; :meth:`Tracer.frames` gives :class:`Traces` (tasks, sessions,
  spans DataFrames); :func:`load_traces` reads JSONL files back into the same frames, and
  other tools' result files too (:func:`read_vllm_bench`, :func:`read_aiperf`,
  :func:`read_guidellm`, :func:`read_areal_sessions_trace`).
- Module-level helpers (:func:`trace_phase`, :func:`trace_session`, :func:`annotate`, …) act
  on the current tracer/task/session carried in ``contextvars``.
- Phases are a registry (:func:`register_phase`); the frames' column names live in
  ``schema`` (``from rollout_kit.tracing import schema``; below).
- AReaL's ``perf_tracer`` calls inside a workflow are recorded as that task's sessions and
  phases (:func:`bridge_areal_perf_tracer`, installed on its own when AReaL is imported).
- :func:`reanchor` prepares a task record traced in another process for :meth:`Tracer.ingest`.

"""

from __future__ import annotations

from . import _schema as schema
from ._areal import bridge_areal_perf_tracer, unbridge_areal_perf_tracer
from ._chrome import to_chrome_trace
from ._context import current_session_id, current_task_id
from ._dumps import TrajectoryDump, load_dump, read_areal_dump
from ._frames import Traces
from ._helpers import (
    annotate,
    atrace_phase,
    dump_call,
    increment,
    session_event,
    trace_phase,
    trace_session,
    traceparent,
)
from ._imports import read_aiperf, read_areal_sessions_trace, read_guidellm, read_vllm_bench
from ._jsonl import TornTraceWarning
from ._persist import StaleParquetWarning, compact_trace, load_traces
from ._phases import phase_color, register_phase, registered_phases
from ._remote import reanchor
from ._tracer import Tracer, current_tracer

__all__ = [
    "StaleParquetWarning",
    "TornTraceWarning",
    "Tracer",
    "Traces",
    "TrajectoryDump",
    "annotate",
    "atrace_phase",
    "bridge_areal_perf_tracer",
    "compact_trace",
    "current_session_id",
    "current_task_id",
    "current_tracer",
    "dump_call",
    "increment",
    "load_dump",
    "load_traces",
    "phase_color",
    "read_aiperf",
    "read_areal_dump",
    "read_areal_sessions_trace",
    "read_guidellm",
    "read_vllm_bench",
    "reanchor",
    "register_phase",
    "registered_phases",
    "schema",
    "session_event",
    "trace_phase",
    "to_chrome_trace",
    "trace_session",
    "traceparent",
    "unbridge_areal_perf_tracer",
]
