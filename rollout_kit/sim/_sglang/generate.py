"""SGLang's ``/generate`` (0.5.23 shapes): the objects it returns, plain and streamed.

Streaming chunks carry cumulative ``text``, ``output_ids`` and logprobs (0.5.23 default);
``SimConfig.sglang_incremental_streaming`` switches to deltas. ``meta_info`` holds the
server's own view of the request as 0.5.23 reports it: on every object ``num_retractions``
(0: the simulator never retracts), ``forward_entry_time`` and ``prefill_finished_time`` once
known (Unix seconds), ``queue_time`` once admitted and ``response_sent_to_client_ts``; on the
final one also ``e2e_latency``, ``request_received_ts``, ``first_token_latency`` (once a
token came), ``api_server_dispatch_finish_ts``, ``request_finished_ts``,
``decode_throughput`` and ``weight_versions``, plus the extension ``sim_timing``
(``queue_s``, ``prefill_s``, ``decode_s``, ``first_token_s``, ``e2e_s``, ``cached_tokens``).
Loop times become Unix seconds through the offset between the two clocks at the answer.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from .._context import ServerContext
from .._driver import drive_all
from .._fault_effects import broken_response, draw_fault, mark_aborts, retry_after_headers
from .._faults import Fault
from .._http_util import BadBody, ctx_of, json_response, read_json
from .._state import ABORT_WAITING, SimSequence
from .._streaming import SequenceStream, SSEWriter
from .requests import Contract, GenRequest, Invalid, parse_generate

_QUEUE_FULL_EVENT = {"error": {"message": "The request queue is full.",
                               "type": "service_unavailable", "code": 503, "retryable": True}}


def flat_error(message: str, status: int, type_: str) -> web.Response:
    """SGLang's flat error body (``{"object": "error", "message", "type", "param", "code"}``)."""
    return json_response({"object": "error", "message": message, "type": type_,
                          "param": None, "code": status}, status)


def _finish_reason(seq: SimSequence) -> dict[str, Any]:
    """``meta_info.finish_reason`` of an ended sequence."""
    if seq.aborted is not None:
        return {"type": "abort", "message": seq.aborted, "status_code": None,
                "err_type": None}
    plan = seq.plan
    assert plan is not None
    if plan.finish == "length":
        return {"type": "length", "length": seq.max_tokens}
    return {"type": "stop", "matched": plan.matched}


def _server_view(meta: dict[str, Any], seq: SimSequence, now: float, *, final: bool,
                 label: str) -> None:
    """Add SGLang 0.5.23's per-request stamps and durations of ``seq`` at loop time ``now``."""
    wall = time.time() - now  # loop time → Unix seconds
    admitted = seq.aborted != ABORT_WAITING and seq.state in ("running", "done")
    got = seq.n_done > 0
    meta["num_retractions"] = 0
    if admitted:
        meta["forward_entry_time"] = wall + seq.admit_t
        if got:
            meta["prefill_finished_time"] = wall + seq.first_t
        meta["queue_time"] = seq.admit_t - seq.arrival
    if final:
        k = seq.n_done
        meta["weight_versions"] = [{"version": label, "start": 0, "end": k}] if k else []
        meta["e2e_latency"] = now - seq.arrival
        meta["request_received_ts"] = wall + seq.arrival
        if got:
            meta["first_token_latency"] = seq.first_t - seq.arrival
        meta["api_server_dispatch_finish_ts"] = wall + seq.arrival
        meta["request_finished_ts"] = wall + now
        if k > 1 and now > seq.first_t:
            meta["decode_throughput"] = (k - 1) / (now - seq.first_t)
    meta["response_sent_to_client_ts"] = wall + now


class _Formatter:
    """Builds SGLang objects for the sequences of one request."""

    __slots__ = ("batch", "ctx", "incremental", "req")

    def __init__(self, ctx: ServerContext, req: GenRequest) -> None:
        self.ctx = ctx
        self.req = req
        self.incremental = ctx.config.sglang_incremental_streaming
        self.batch = req.batch or req.n > 1

    def obj(self, seq: SimSequence, k: int, *, final: bool, start: int = 0) -> dict[str, Any]:
        """The object of ``seq`` with ``k`` tokens done (from token ``start`` on)."""
        plan = seq.plan
        assert plan is not None
        req = self.req
        waiting_abort = seq.aborted == ABORT_WAITING
        ids = plan.token_ids
        tok = self.ctx.tokenizer
        if final and seq.aborted is None:
            text = plan.text if k == len(plan) else plan.text_at(k)
        else:
            text = plan.text_at(k)
        if start:
            text = text[len(plan.text_at(start)):]
        meta: dict[str, Any] = {
            "id": seq.rid,
            "finish_reason": _finish_reason(seq) if final else None,
            "prompt_tokens": seq.prompt_tokens,
            "weight_version": self.ctx.engine.weight_label,
            "completion_tokens": k,
            "cached_tokens": seq.cached,
        }
        if req.logprob:
            if req.text_in_logprobs:
                meta["output_token_logprobs"] = [
                    [plan.logprobs[i], ids[i], tok.token_text(ids[i])] for i in range(start, k)]
            else:
                meta["output_token_logprobs"] = [
                    [plan.logprobs[i], ids[i], None] for i in range(start, k)]
            p = seq.prompt_ids
            s0 = len(p) - 1 if req.logprob_start < 0 else min(req.logprob_start, len(p) - 1)
            meta["input_token_logprobs"] = [
                [None if j == s0 else -(1.0 + (p[j] % 7) * 0.3), p[j], None]
                for j in range(s0, len(p))]
            if req.top_k_lp > 0:
                kk = req.top_k_lp
                meta["output_top_logprobs"] = [
                    [[lp, t, None] for t, lp in sorted(plan.top_logprobs(i, kk),
                                                        key=lambda x: -x[1])[:kk]]
                    for i in range(start, k)]
                meta["input_top_logprobs"] = [None] * len(meta["input_token_logprobs"])
        now = self.ctx.engine.loop.time()
        _server_view(meta, seq, now, final=final, label=self.ctx.engine.weight_label)
        if final:
            meta["sim_timing"] = seq.timing(now)
        out: dict[str, Any] = {"text": text, "output_ids": ids[start:k], "meta_info": meta}
        if waiting_abort:
            meta["prompt_tokens"] = seq.prompt_tokens
        if req.return_prompt_ids:
            out["prompt_token_ids"] = list(seq.prompt_ids)
        return out


    def chunk(self, seq: SimSequence, k: int, prev: int, final: bool) -> dict[str, Any]:
        """One stream event (cumulative, or from ``prev`` on when incremental)."""
        o = self.obj(seq, k, final=final, start=min(prev, k) if self.incremental else 0)
        if self.batch:
            o["index"] = seq.index
        return o


def _sequences(ctx: ServerContext, req: GenRequest,
               trace_parent: str | None) -> list[SimSequence]:
    """``n`` sequences per prompt, ids ``<rid>`` (or ``<rid>_<j>`` when ``n > 1``)."""
    engine = ctx.engine
    seqs: list[SimSequence] = []
    for i, (prompt, spec) in enumerate(zip(req.prompts, req.specs, strict=True)):
        for j in range(req.n):
            rid = req.rids[i] if req.n == 1 else f"{req.rids[i]}_{j}"
            seqs.append(engine.new_sequence(rid, prompt, spec, index=len(seqs),
                                            sample_index=j, client_rid=req.client_rids[i],
                                            prompt_text=req.prompt_texts[i],
                                            trace_parent=trace_parent))
    return seqs


def _fault_response(ctx: ServerContext, fault: Fault) -> web.Response:
    """The answer of an ``error`` fault."""
    status = fault.status
    if status == 500:
        return web.Response(text="Internal Server Error", status=500)
    message = {429: "Too many requests (simulated fault).",
               503: "Service unavailable (simulated fault)."}.get(
        status, f"Simulated server error {status}.")
    resp = flat_error(message, status, str(status))
    resp.headers.update(retry_after_headers(status, ctx.faults) or {})
    return resp


async def generate(request: web.Request) -> web.StreamResponse:
    """``POST /generate``."""
    ctx = ctx_of(request)
    try:
        body = await read_json(request)
    except BadBody as exc:
        return flat_error(str(exc), 400, "Bad Request")
    stream = isinstance(body, dict) and body.get("stream") is True
    try:
        req = parse_generate(ctx, body)
    except Contract as exc:
        return json_response({"error": str(exc)}, 400)
    except Invalid as exc:
        if stream:
            return await _stream_error(request, str(exc))
        return json_response({"error": {"message": str(exc)}}, 400)
    engine = ctx.engine
    await engine.gate(may_reject=False)
    fault = await draw_fault(ctx) if ctx.faults.active else None
    if fault is not None:
        if fault.kind == "error":
            return _fault_response(ctx, fault)
        if fault.kind == "hang":
            return flat_error("Server is shutting down.", 503, "503")
    seqs = _sequences(ctx, req, request.headers.get("traceparent"))
    if engine.capacity_left() < len(seqs):
        message = "The request queue is full."
        if stream:
            return await _stream_error(request, message, code=503)
        return flat_error(message, 503, "503")
    mark_aborts(fault, seqs)
    fmt = _Formatter(ctx, req)
    if req.stream:
        sse = SSEWriter(request, coalesce=ctx.config.zero_latency)
        await sse.prepare()
        ended = await SequenceStream(
            sse, engine, seqs, fmt.chunk, fault,
            garble=lambda raw: b'data: {"text": "' + raw[:20] + b"\n\n",
        ).run(lambda: _QUEUE_FULL_EVENT)
        return ended if ended is not None else await sse.finish()
    if not await drive_all(engine, seqs, None):
        return flat_error("The request queue is full.", 503, "503")
    objs = [fmt.obj(s, s.n_done, final=True) for s in seqs]
    payload: Any = objs if fmt.batch else objs[0]
    return broken_response(fault, request, payload) or json_response(payload)


async def _stream_error(request: web.Request, message: str,
                        code: int = 400) -> web.StreamResponse:
    sse = SSEWriter(request)
    await sse.prepare()
    await sse.send({"error": {"message": message, "type": "invalid_request_error"
                              if code == 400 else "service_unavailable", "code": code,
                              "retryable": code != 400}})
    return await sse.finish()
