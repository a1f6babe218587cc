"""Tracing: task lifecycles, sessions and phase spans → pandas DataFrames and JSONL.

- :class:`Tracer` records; :meth:`Tracer.frames` gives :class:`Traces` (tasks, sessions,
  spans DataFrames); :func:`load_traces` reads JSONL files back into the same frames, and
  other tools' result files too (:func:`read_vllm_bench`, :func:`read_aiperf`,
  :func:`read_guidellm`, :func:`read_areal_sessions_trace`).
- Module-level helpers (:func:`trace_phase`, :func:`trace_session`, :func:`annotate`, …) act
  on the current tracer/task/session carried in ``contextvars``.
- Phases are a registry (:func:`register_phase`); the frames' column names live in
  :mod:`~rollout_kit.tracing.schema`, the server metrics' series in
  :mod:`~rollout_kit.tracing.server_metrics`, the dump record in
  :mod:`~rollout_kit.tracing.dumps`.
- AReaL's ``perf_tracer`` calls inside a workflow are recorded as that task's sessions and
  phases (:func:`bridge_areal_perf_tracer`, installed on its own when AReaL is imported).
- :func:`reanchor` prepares a task record traced in another process for :meth:`Tracer.ingest`.

The package is split by direction. Its top level is the write side — the tracer, its live
table and scopes, the store of columns, the JSONL log, the dump writer — and ``_frames`` is
the read side: frames built from the store, Parquet, :func:`load_traces`, other tools'
readers and the Chrome/Perfetto export. The tracer reaches the read side only inside the
methods that need it (``frames()``, ``compact()``), so an engine that records loads none
of it. Every name is loaded on first use from the list in ``__init__.pyi``.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
