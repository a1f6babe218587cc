"""OTLP trace export requests (protobuf or JSON) decoded into plain span rows.

One row per span: ``trace_id`` / ``span_id`` / ``parent_span_id`` (lower-case hex, parent
``None`` for a root), ``name``, ``kind`` (``SERVER``, ``CLIENT``, …), ``start_wall`` /
``end_wall`` (Unix seconds), ``service`` (the resource's ``service.name``) and ``attributes``
(a dict of plain Python values: str, bool, int, float, lists and dicts of them).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

SPAN_FIELDS = ("trace_id", "span_id", "parent_span_id", "name", "kind", "start_wall",
               "end_wall", "service", "attributes")


class SpanDecodeError(ValueError):
    """A request body that is not an OTLP ``ExportTraceServiceRequest``."""


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return None if which is None else getattr(v, which)


def _kind(span: Span) -> str:
    name: str = Span.SpanKind.Name(span.kind)
    return name.removeprefix("SPAN_KIND_")


def span_rows(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """The spans of one export request as rows (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    for rs in request.resource_spans:
        service = next((_value(a.value) for a in rs.resource.attributes
                        if a.key == "service.name"), None)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                rows.append({
                    "trace_id": sp.trace_id.hex(), "span_id": sp.span_id.hex(),
                    "parent_span_id": sp.parent_span_id.hex() or None, "name": sp.name,
                    "kind": _kind(sp), "start_wall": sp.start_time_unix_nano / 1e9,
                    "end_wall": sp.end_time_unix_nano / 1e9, "service": service,
                    "attributes": {a.key: _value(a.value) for a in sp.attributes},
                })
    return rows


def decode_export_request(body: bytes, content_type: str) -> list[dict[str, Any]]:
    """Decode an OTLP/HTTP trace export body (``application/x-protobuf`` or ``/json``).

    Raises:
        SpanDecodeError: the body is not an export request of that content type.
    """
    request = ExportTraceServiceRequest()
    try:
        if content_type.startswith("application/json"):
            json_format.Parse(body, request)
        else:
            request.ParseFromString(body)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
        kind = content_type or "no content type"
        raise SpanDecodeError(f"not an OTLP trace export request ({kind}): {exc}") from None
    return span_rows(request)
