"""The server's own view of each request: OTLP spans received, joined, and traces sent out.

* :class:`OtlpReceiver`: an OTLP/HTTP trace endpoint on 127.0.0.1 (protobuf
  or JSON bodies, decoded with ``opentelemetry-proto``; no collector binary) that a server's
  exporter points at.
* :func:`join_server_spans`: the server spans joined to the sessions they
  served, through the ``traceparent`` each generate request carries — server queue,
  prefill, decode and e2e as columns, and the client's overhead on top.
* :func:`export_traces`: tasks → sessions → phases as OpenTelemetry spans
  (GenAI attributes) through the SDK's OTLP exporter, in the same traces as the server's.

Needs the ``otel`` extra (``pip install 'rollout-kit[otel]'``).
"""

from __future__ import annotations

from ._export import export_traces
from ._join import ATTRIBUTES, SERVER_COLUMNS, ServerView, join_server_spans
from ._receiver import OtlpReceiver

__all__ = [
    "ATTRIBUTES",
    "SERVER_COLUMNS",
    "OtlpReceiver",
    "ServerView",
    "export_traces",
    "join_server_spans",
]
