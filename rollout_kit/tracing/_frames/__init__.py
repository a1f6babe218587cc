"""The read side of tracing: records become frames, and frames and files go both ways.

- ``build``: :class:`~rollout_kit.tracing.Traces` from a store snapshot (what
  :meth:`Tracer.frames() <rollout_kit.tracing.Tracer.frames>` returns);
- ``parquet``: the trace's Parquet form, written and read;
- ``files``: :func:`~rollout_kit.tracing.load_traces` and
  :func:`~rollout_kit.tracing.compact_trace` over JSONL and Parquet files;
- ``readers``: other tools' result files (vLLM bench, aiperf, guidellm, AReaL) as frames;
- ``chrome``: the Chrome / Perfetto export of the frames;
- ``dumps``: trajectory dumps read back.

Nothing here records; the tracer imports these modules only inside the methods that use them.
"""
