"""``POST /v1/completions``, plain and streamed (vLLM 0.32 shapes).

Bodies are serialised like vLLM 0.10.2/0.32: every declared field present, nulls included
(the usage-only stream chunk drops nulls, as vLLM does). Every final body (final chunk when
streaming) carries the extension ``sim_timing`` at top level.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .._context import ServerContext
from .._driver import drive_all
from .._fault_effects import broken_response, mark_aborts
from .._faults import Fault
from .._generation import OutputPlan
from .._http_util import ctx_of, json_response
from .._state import SimSequence
from .._streaming import SequenceStream, SSEWriter
from .errors import ApiError, error_event, error_response, overloaded, param_error
from .outputs import (
    cached_details,
    final_text,
    fingerprint,
    finish_reason,
    gate_and_fault,
    make_sequences,
    text_delta,
    timing,
    usage,
)
from .requests import (
    CommonParams,
    body_object,
    get_bool,
    get_int,
    parse_common,
    parse_prompts,
    sampling_spec,
)


def _completion_id(ctx: ServerContext) -> str:
    """``cmpl-`` and 16 hex digits like 0.32 (random per server, then a counter)."""
    nid = ctx.next_id()
    return f"cmpl-{nid[:8]}{nid[-8:]}"


def _logprobs(ctx: ServerContext, plan: OutputPlan, start: int, end: int, k: int,
              as_ids: bool, offset: int) -> tuple[dict[str, Any], int]:
    """The ``logprobs`` of tokens ``start:end`` (top ``k``); text offsets from ``offset``.

    Returns:
        The object and the offset after its last token.
    """
    tok = ctx.tokenizer

    def name(t: int) -> str:
        return f"token_id:{t}" if as_ids else tok.token_text(t)

    offsets: list[int] = []
    tokens: list[str] = []
    top: list[dict[str, float]] = []
    ids = plan.token_ids
    for i in range(start, end):
        s = name(ids[i])
        offsets.append(offset)
        offset += len(s)
        tokens.append(s)
        top.append({name(t): lp for t, lp in plan.top_logprobs(i, k)})
    return ({"text_offset": offsets, "token_logprobs": plan.logprobs[start:end],
             "tokens": tokens, "top_logprobs": top}, offset)


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``."""
    ctx = ctx_of(request)
    try:
        body = await body_object(request)
        c = parse_common(ctx, body, ("max_tokens",), ctx.config.default_max_tokens)
        prompts, texts = parse_prompts(ctx, body)
        lp = get_int(body, "logprobs", None)
        if lp is not None:
            if lp == -1:
                lp = ctx.config.max_logprobs
            if lp < 0:
                raise param_error("`logprobs` must be a positive value or -1.", "logprobs",
                                  lp)
            if lp > ctx.config.max_logprobs:
                raise param_error(f"Requested sample logprobs of {lp}, which is greater than "
                                  f"max allowed: {ctx.config.max_logprobs}", "logprobs", lp)
        echo = get_bool(body, "echo")
        specs = [sampling_spec(ctx, c, len(p)) for p in prompts]
    except ApiError as exc:
        return error_response(ctx, exc)
    early, fault = await gate_and_fault(ctx, len(prompts) * c.n)
    if early is not None:
        return early
    rid = f"cmpl-{c.request_id}" if c.request_id else _completion_id(ctx)
    seqs = make_sequences(ctx, rid, prompts, texts, specs, c.n, c.request_id,
                          request.headers.get("traceparent"))
    mark_aborts(fault, seqs)
    model = ctx.config.model_name
    if c.stream:
        return await _stream(request, ctx, c, rid, prompts, seqs, lp, fault)
    if not await drive_all(ctx.engine, seqs, None):
        return error_response(ctx, overloaded())
    choices = []
    for s in seqs:
        plan = s.plan
        assert plan is not None
        reason, stop_reason = finish_reason(s)
        k = s.n_done
        text = final_text(s)
        if echo:
            text = ctx.tokenizer.decode(s.prompt_ids) + text
        logprobs = None
        if lp is not None:
            logprobs, _ = _logprobs(ctx, plan, 0, k, lp, c.tokens_as_ids, 0)
        choices.append({
            "index": s.index, "text": text, "logprobs": logprobs, "finish_reason": reason,
            "stop_reason": stop_reason,
            "token_ids": plan.token_ids[:k] if c.return_token_ids else None,
            "prompt_logprobs": None,
            "prompt_token_ids": list(s.prompt_ids) if c.return_token_ids else None,
            "routed_experts": None,
        })
    payload = {"id": rid, "object": "text_completion", "created": ctx.created, "model": model,
               "choices": choices, "service_tier": None,
               "system_fingerprint": fingerprint(ctx), "usage": usage(ctx, prompts, seqs),
               "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
               "sim_timing": timing(ctx, seqs)}
    return broken_response(fault, request, payload) or json_response(payload)


async def _stream(request: web.Request, ctx: ServerContext, c: CommonParams, rid: str,
                  prompts: list[list[int]], seqs: list[SimSequence],
                  lp: int | None, fault: Fault | None) -> web.StreamResponse:
    sse = SSEWriter(request, coalesce=ctx.config.zero_latency)
    await sse.prepare()
    model = ctx.config.model_name
    text_sent: dict[int, int] = {}
    offsets: dict[int, int] = {}
    started: set[int] = set()

    def chunk(seq: SimSequence, k: int, prev: int, final: bool) -> dict[str, Any]:
        plan = seq.plan
        assert plan is not None
        delta = text_delta(seq, k, final, text_sent)
        logprobs = None
        if lp is not None:
            logprobs, offsets[seq.index] = _logprobs(
                ctx, plan, prev, k, lp, c.tokens_as_ids, offsets.get(seq.index, 0))
        reason, stop_reason = finish_reason(seq) if final else (None, None)
        choice = {"index": seq.index, "text": delta, "logprobs": logprobs,
                  "finish_reason": reason, "stop_reason": stop_reason,
                  "prompt_token_ids": (list(seq.prompt_ids)
                                       if c.return_token_ids and prev == 0 and
                                       seq.index not in started else None),
                  "token_ids": plan.token_ids[prev:k] if c.return_token_ids else None}
        started.add(seq.index)
        # 0.32 leaves ``usage`` out of delta chunks (unless continuous_usage_stats) and puts
        # ``system_fingerprint`` on the last chunk before [DONE]: the usage chunk if asked for,
        # else the finishing chunk
        obj: dict[str, Any] = {"id": rid, "object": "text_completion", "created": ctx.created,
                               "model": model, "choices": [choice]}
        if c.continuous_usage:
            obj["usage"] = {"prompt_tokens": seq.prompt_tokens, "completion_tokens": k,
                            "total_tokens": seq.prompt_tokens + k}
        if final:
            if not c.include_usage:
                obj["system_fingerprint"] = fingerprint(ctx)
            obj["sim_timing"] = seq.timing(ctx.engine.loop.time())
        return obj

    stream = SequenceStream(sse, ctx.engine, seqs, chunk, fault,
                            garble=lambda raw: b"data: " + raw[:25] + b"\n\n")
    ended = await stream.run(lambda: error_event(ctx, overloaded()))
    if ended is not None:
        return ended
    if c.include_usage:
        u = usage(ctx, prompts, seqs, details=False)
        details = cached_details(ctx, seqs, stream=True)
        if details is not None:  # the usage chunk drops nulls
            u["prompt_tokens_details"] = details
        await sse.send({"id": rid, "object": "text_completion", "created": ctx.created,
                        "model": model, "choices": [],
                        "usage": u,
                        "system_fingerprint": fingerprint(ctx),
                        "sim_timing": timing(ctx, seqs)})
    return await sse.finish()
