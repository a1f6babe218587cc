"""The simulator's OpenTelemetry spans: one ``llm_request`` span per finished sequence.

With ``SimConfig.otlp_traces_endpoint`` set, each finished (or aborted) sequence becomes a
SERVER span named ``llm_request`` with the attribute names vLLM 0.32 uses
(``gen_ai.latency.time_in_queue``, ``…time_to_first_token``, ``…e2e``,
``…time_in_model_prefill`` / ``_decode`` / ``_inference``, ``gen_ai.usage.prompt_tokens`` /
``completion_tokens``, ``gen_ai.request.id``, ``gen_ai.request.max_tokens`` /
``temperature`` / ``top_p`` / ``n``), a child of the request's W3C ``traceparent`` when it
had one (else the root of a new trace, as vLLM does). Spans are sent in batches (every
``flush_interval`` seconds or ``max_batch`` spans) as OTLP/HTTP protobuf, as vLLM's
``http/protobuf`` exporter does; a failed export is counted and the batch dropped, as real
exporters do. Needs ``opentelemetry-proto`` (the ``otel`` extra).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from ._state import SimSequence

_SERVER = 2  # Span.SpanKind.SPAN_KIND_SERVER


def parse_traceparent(value: str | None) -> tuple[bytes, bytes] | None:
    """``(trace_id, parent_span_id)`` of a valid W3C ``traceparent``, else ``None``."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace, span = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
    except ValueError:
        return None
    if trace == bytes(16) or span == bytes(8):
        return None
    return trace, span


class SpanExporter:
    """Batches ``llm_request`` spans and posts them to an OTLP/HTTP endpoint.

    Args:
        endpoint: the ``/v1/traces`` URL.
        service: the resource's ``service.name``.
        model: ``gen_ai.response.model``.

    Attributes:
        sent: spans delivered; failed: spans dropped after a failed export.
    """

    def __init__(self, endpoint: str, *, service: str, model: str,
                 flush_interval: float = 0.05, max_batch: int = 256) -> None:
        from opentelemetry.proto.trace.v1 import trace_pb2  # the otel extra

        self._pb = trace_pb2
        self.endpoint = endpoint
        self.service = service
        self.model = model
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self.sent = 0
        self.failed = 0
        self._batch: list[trace_pb2.Span] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._closing = False

    def start(self) -> None:
        """Start the background sender on the running loop."""
        self._http = aiohttp.ClientSession()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, seq: SimSequence, finish: str, now: float) -> None:
        """Queue the span of a sequence that ended at loop time ``now``."""
        pb = self._pb
        wall = time.time() - now  # loop time → wall clock
        t = seq.timing(now)
        attrs: dict[str, float | int | str] = {
            "gen_ai.latency.time_to_first_token": t["first_token_s"],
            "gen_ai.latency.e2e": t["e2e_s"],
            "gen_ai.latency.time_in_queue": t["queue_s"],
            "gen_ai.usage.prompt_tokens": seq.prompt_tokens,
            "gen_ai.usage.completion_tokens": seq.n_done,
            "gen_ai.latency.time_in_model_prefill": t["prefill_s"],
            "gen_ai.latency.time_in_model_decode": t["decode_s"],
            "gen_ai.latency.time_in_model_inference": t["prefill_s"] + t["decode_s"],
            "gen_ai.request.id": seq.rid,
            "gen_ai.request.max_tokens": seq.max_tokens,
            "gen_ai.request.temperature": seq.spec.temperature,
            "gen_ai.request.n": 1,
            "gen_ai.response.model": self.model,
            "rollout_kit.sim.finish_reason": finish,
        }
        parent = parse_traceparent(seq.trace_parent)
        span = pb.Span(
            trace_id=parent[0] if parent else os.urandom(16), span_id=os.urandom(8),
            parent_span_id=parent[1] if parent else b"", name="llm_request", kind=_SERVER,
            start_time_unix_nano=int((wall + seq.arrival) * 1e9),
            end_time_unix_nano=int((wall + now) * 1e9))
        for key, value in attrs.items():
            kv = span.attributes.add()
            kv.key = key
            if isinstance(value, str):
                kv.value.string_value = value
            elif isinstance(value, int):
                kv.value.int_value = value
            else:
                kv.value.double_value = float(value)
        self._batch.append(span)
        if len(self._batch) >= self.max_batch:
            self._wake.set()

    def _body(self, spans: list[object]) -> bytes:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", self.service
        rs.scope_spans.add().spans.extend(spans)
        body: bytes = req.SerializeToString()
        return body

    async def _send(self) -> None:
        spans, self._batch = self._batch, []
        if not spans or self._http is None:
            return
        try:
            async with self._http.post(self.endpoint, data=self._body(list(spans)),
                                       headers={"Content-Type": "application/x-protobuf"},
                                       timeout=aiohttp.ClientTimeout(total=10)) as resp:
                ok = resp.status < 300
        except (TimeoutError, aiohttp.ClientError, OSError):
            ok = False
        if ok:
            self.sent += len(spans)
        else:
            self.failed += len(spans)

    async def _run(self) -> None:
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), self.flush_interval)
            except TimeoutError:
                pass
            self._wake.clear()
            await self._send()

    async def close(self) -> None:
        """Send what is queued and stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        await self._send()
        if self._http is not None:
            await self._http.close()
