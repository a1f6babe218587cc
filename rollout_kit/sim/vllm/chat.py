"""``POST /v1/chat/completions`` (basic: text messages, n, logprobs, stream) and the
simulator's chat template (vLLM 0.32 shapes)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..context import ServerContext
from ..driver import drive_all
from ..fault_effects import broken_response
from ..generation import OutputPlan
from ..http_util import ctx_of, json_response
from ..state import SimSequence
from ..streaming import SequenceStream, SSEWriter
from .errors import ApiError, error_response, overloaded, validation_error
from .outputs import (
    final_text,
    finish_reason,
    gate_and_fault,
    make_sequences,
    text_delta,
    timing,
    usage,
)
from .requests import CommonParams, body_object, get_bool, get_int, parse_common, sampling_spec

__all__ = ["chat_completions", "render_chat"]


def render_chat(messages: Any) -> str:
    """The simulator's chat template: ``<|role|>\\ncontent\\n`` per message, then the
    assistant header.

    Raises:
        ApiError: malformed messages.
    """
    if not isinstance(messages, list) or not messages:
        raise validation_error("messages", messages,
                               "missing" if messages is None else "list_type",
                               "Field required" if messages is None else
                               "Input should be a non-empty list")
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise validation_error("messages", m, "model_type",
                                   "Each message must be an object with a string role")
        content = m.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(p.get("text", "") for p in content
                           if isinstance(p, dict) and p.get("type") == "text")
        else:
            raise validation_error("messages", content, "string_type",
                                   "Input should be a valid string")
        parts.append(f"<|{m['role']}|>\n{text}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def _logprobs(ctx: ServerContext, plan: OutputPlan, start: int, end: int,
              k: int, as_ids: bool) -> dict[str, Any]:
    """The ``logprobs`` of tokens ``start:end`` (top ``k``)."""
    tok = ctx.tokenizer

    def name(t: int) -> str:
        return f"token_id:{t}" if as_ids else tok.token_text(t)

    content = []
    for i in range(start, end):
        t = plan.token_ids[i]
        content.append({
            "token": name(t), "logprob": plan.logprobs[i], "bytes": list(tok.token_bytes(t)),
            "top_logprobs": [{"token": name(a), "logprob": lp,
                              "bytes": list(tok.token_bytes(a))}
                             for a, lp in sorted(plan.top_logprobs(i, k),
                                                 key=lambda x: -x[1])[:k]]})
    return {"content": content}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``."""
    ctx = ctx_of(request)
    try:
        body = await body_object(request)
        c = parse_common(ctx, body, ("max_completion_tokens", "max_tokens"), None)
        prompt_text = render_chat(body.get("messages"))
        prompt = ctx.tokenizer.encode(prompt_text)
        want_lp = get_bool(body, "logprobs")
        top = get_int(body, "top_logprobs", 0) or 0
        if top > ctx.config.max_logprobs or top < 0:
            raise ApiError(f"Requested top_logprobs of {top}, which is greater than max "
                           f"allowed: {ctx.config.max_logprobs}", param="top_logprobs")
        spec = sampling_spec(ctx, c, len(prompt))
    except ApiError as exc:
        return error_response(ctx, exc)
    early, fault = await gate_and_fault(ctx, c.n)
    if early is not None:
        return early
    rid = f"chatcmpl-{c.request_id}" if c.request_id else f"chatcmpl-{ctx.next_id()}"
    seqs = make_sequences(ctx, rid, [prompt], [prompt_text], [spec], c.n, c.request_id,
                          request.headers.get("traceparent"))
    model = ctx.config.model_name
    if c.stream:
        return await _stream(request, ctx, c, rid, prompt, seqs, top if want_lp else None)
    if not await drive_all(ctx.engine, seqs, None):
        return error_response(ctx, overloaded())
    choices = []
    for s in seqs:
        plan = s.plan
        assert plan is not None
        reason, stop_reason = finish_reason(s)
        k = s.n_done
        text = final_text(s)
        choices.append({
            "index": s.index,
            "message": {"role": "assistant", "content": text, "refusal": None,
                        "annotations": None, "audio": None, "function_call": None,
                        "tool_calls": [], "reasoning_content": None},
            "logprobs": (_logprobs(ctx, plan, 0, k, top, c.tokens_as_ids)
                         if want_lp else None),
            "finish_reason": reason, "stop_reason": stop_reason,
            "token_ids": plan.token_ids[:k] if c.return_token_ids else None,
        })
    payload = {"id": rid, "object": "chat.completion", "created": ctx.created, "model": model,
               "choices": choices, "service_tier": None, "system_fingerprint": None,
               "usage": usage(ctx, [prompt], seqs), "prompt_logprobs": None,
               "prompt_token_ids": prompt if c.return_token_ids else None,
               "kv_transfer_params": None, "sim_timing": timing(ctx, seqs)}
    return broken_response(fault, request, payload) or json_response(payload)


async def _stream(request: web.Request, ctx: ServerContext, c: CommonParams, rid: str,
                  prompt: list[int], seqs: list[SimSequence],
                  top: int | None) -> web.StreamResponse:
    sse = SSEWriter(request, coalesce=ctx.config.zero_latency)
    await sse.prepare()
    model = ctx.config.model_name
    sent: dict[int, int] = {}

    def base(choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": ctx.created,
                "model": model, "choices": choices}

    for s in seqs:
        first: dict[str, Any] = {"index": s.index,
                                 "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}
        obj = base([first])
        if c.return_token_ids:
            obj["prompt_token_ids"] = prompt
        await sse.send(obj)

    def chunk(seq: SimSequence, k: int, prev: int, final: bool) -> dict[str, Any]:
        plan = seq.plan
        assert plan is not None
        choice: dict[str, Any] = {"index": seq.index,
                                  "delta": {"content": text_delta(seq, k, final, sent)},
                                  "logprobs": (_logprobs(ctx, plan, prev, k, top,
                                                         c.tokens_as_ids)
                                               if top is not None else None),
                                  "finish_reason": None}
        if c.return_token_ids:
            choice["token_ids"] = plan.token_ids[prev:k]
        obj = base([choice])
        if final:
            reason, stop_reason = finish_reason(seq)
            choice["finish_reason"] = reason
            choice["stop_reason"] = stop_reason
            obj["sim_timing"] = seq.timing(ctx.engine.loop.time())
        return obj

    await SequenceStream(sse, ctx.engine, seqs, chunk).run(None)
    if c.include_usage:
        await sse.send({**base([]), "usage": usage(ctx, [prompt], seqs, details=False)})
    return await sse.finish()
