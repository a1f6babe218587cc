"""Traces out as OpenTelemetry: one trace per task, sessions and phases as its spans.

:func:`export_traces` sends a :class:`~rollout_kit.tracing.Traces` through the SDK's
OTLP/HTTP exporter to any OTLP backend (or this package's :class:`~._receiver.OtlpReceiver`):

* a ``rollout_kit.task`` span per task (submit → end), attributes ``rollout_kit.task_id``,
  ``rollout_kit.status`` / ``reason`` / ``worker``;
* a ``rollout_kit.session`` span per session (its child), with the GenAI semantic-convention
  attributes ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
  ``gen_ai.response.finish_reasons``, ``server.address`` / ``server.port``;
* a span per phase (``generate``, ``reward``, …) under its session (or the task).

The ids are those the requests' ``traceparent`` headers carried — trace id from the
tracer's ``trace_prefix`` and the task id, session span id from the session id — so a
server's own request spans (vLLM ``--otlp-traces-endpoint``) land in the same trace, under
the session that sent them. The SDK is told the ids through a small ``IdGenerator``: it has
no other way to take span ids from outside.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanKind, set_span_in_context

from .._errors import ConfigError
from ..tracing import TASK_SPAN_ID, session_span_id

if TYPE_CHECKING:
    import pandas as pd

    from ..tracing import Traces


class _GivenIds(IdGenerator):
    """Hands the SDK the ids chosen here (random ones for spans nobody links to)."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def set(self, trace_id: int, span_id: int) -> None:
        self.trace_id, self.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        span, self.span_id = self.span_id, 0
        return span or int.from_bytes(os.urandom(8), "big") | 1


def _ns(wall_epoch: float, ts: Any) -> int | None:
    if ts is None or (isinstance(ts, float) and math.isnan(ts)):
        return None
    return int((wall_epoch + float(ts)) * 1e9)


def _scalars(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes OTel takes (no None / NaN)."""
    return {k: v for k, v in attrs.items()
            if v is not None and not (isinstance(v, float) and math.isnan(v))}


def _server(address: Any) -> dict[str, Any]:
    if not isinstance(address, str) or ":" not in address:
        return {}
    host, _, port = address.rpartition(":")
    return {"server.address": host, "server.port": int(port) if port.isdigit() else None}


def _rows(df: pd.DataFrame) -> Iterator[tuple[Any, dict[str, Any]]]:
    for key, row in zip(df.index, df.to_dict("records"), strict=True):
        yield key, {str(k): v for k, v in row.items()}


def export_traces(traces: Traces, endpoint: str, *, trace_prefix: str,
                  service_name: str = "rollout_kit", model: str | None = None,
                  timeout: float = 30.0) -> int:
    """Export ``traces`` as OTLP spans to ``endpoint`` (``…/v1/traces``); the span count.

    Args:
        traces: the frames (``Tracer.frames()`` or :func:`~rollout_kit.tracing.load_traces`).
        endpoint: an OTLP/HTTP traces URL.
        trace_prefix: the tracer's ``trace_prefix`` (the ids its requests carried).
        service_name: the resource's ``service.name``.
        model: ``gen_ai.request.model`` of every session (the sessions frame's ``model``
            column wins where there is one).
        timeout: seconds allowed for the export.

    Raises:
        ConfigError: a bad prefix, or the export did not finish within ``timeout``.
    """
    if not (isinstance(trace_prefix, str) and len(trace_prefix) == 16):
        raise ConfigError(f"trace_prefix must be 16 hex digits, got {trace_prefix!r}")
    ids = _GivenIds()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                              id_generator=ids)
    total = len(traces.tasks) + len(traces.sessions) + len(traces.spans)
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=timeout),
                                   max_queue_size=max(2048, total), max_export_batch_size=512)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("rollout_kit")
    epoch = traces.wall_epoch
    base = int(trace_prefix, 16) << 64
    n = 0
    contexts: dict[tuple[int, int | None], Any] = {}
    for tid, task in _rows(traces.tasks):
        start, end = _ns(epoch, task.get("submit_ts")), _ns(epoch, task.get("end_ts"))
        if start is None:
            continue
        ids.set(base | (int(tid) & 0xFFFFFFFFFFFFFFFF), TASK_SPAN_ID)
        span = tracer.start_span("rollout_kit.task", start_time=start, kind=SpanKind.INTERNAL,
                                 attributes=_scalars({
                                     "rollout_kit.task_id": int(tid),
                                     "rollout_kit.status": task.get("status"),
                                     "rollout_kit.reason": task.get("reason"),
                                     "rollout_kit.worker": task.get("worker")}))
        span.end(end_time=end or start)
        contexts[(int(tid), None)] = span.get_span_context()
        n += 1
    for (tid, sid), sess in _rows(traces.sessions):
        parent = contexts.get((int(tid), None))
        start = _ns(epoch, sess.get("start_ts"))
        if parent is None or start is None:
            continue
        ids.set(0, session_span_id(int(sid)))
        attrs = {"rollout_kit.task_id": int(tid), "rollout_kit.session_id": int(sid),
                 "gen_ai.request.model": sess.get("model") or model,
                 "gen_ai.usage.input_tokens": sess.get("prompt_tokens"),
                 "gen_ai.usage.output_tokens": sess.get("completion_tokens"),
                 "gen_ai.response.finish_reasons": (
                     [sess["stop_reason"]] if isinstance(sess.get("stop_reason"), str)
                     else None),
                 "rollout_kit.status": sess.get("status"), **_server(sess.get("server"))}
        span = tracer.start_span("rollout_kit.session", start_time=start,
                                 context=set_span_in_context(NonRecordingSpan(parent)),
                                 kind=SpanKind.CLIENT, attributes=_scalars(attrs))
        span.end(end_time=_ns(epoch, sess.get("end_ts")) or start)
        contexts[(int(tid), int(sid))] = span.get_span_context()
        n += 1
    for _, ph in _rows(traces.spans):
        tid, sid = int(ph["task_id"]), ph.get("session_id")
        key = (tid, None if sid is None or (isinstance(sid, float) and math.isnan(sid))
               else int(sid))
        parent = contexts.get(key) or contexts.get((tid, None))
        start = _ns(epoch, ph.get("start"))
        if parent is None or start is None:
            continue
        span = tracer.start_span(str(ph["phase"]), start_time=start,
                                 context=set_span_in_context(NonRecordingSpan(parent)),
                                 attributes=_scalars({"rollout_kit.task_id": tid,
                                                      "rollout_kit.phase": ph["phase"]}))
        span.end(end_time=_ns(epoch, ph.get("end")) or start)
        n += 1
    done = processor.force_flush(int(timeout * 1000))
    provider.shutdown()
    if not done:
        raise ConfigError(f"the OTLP export to {endpoint} did not finish within {timeout} s")
    return n


