"""``POST /v1/chat/completions`` (messages, tools, n, logprobs, stream) in vLLM 0.32's shapes,
and SGLang's variant of the same endpoint (its field set, no ids in streamed chunks).

Prompts are rendered with the simulator's chat template (:mod:`.._chat_template`). With
``tools`` in the request, outputs are split into ``content`` and ``tool_calls`` as vLLM's
``--tool-call-parser hermes`` does; a stream then sends each call as an opening delta (id,
name, ``arguments: ""``) and argument pieces that add up to the non-streamed string. Requests
without tools take the plain path (no parsing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from .._chat_template import (
    ParsedCalls,
    TemplateError,
    parse_tool_calls,
    render,
    stream_pieces,
)
from .._context import ServerContext
from .._driver import drive_all
from .._fault_effects import broken_response
from .._generation import OutputPlan
from .._http_util import ctx_of, json_response
from .._state import SimSequence
from .._streaming import SequenceStream, SSEWriter
from .errors import ApiError, error_response, overloaded, validation_error
from .outputs import (
    cached_details,
    final_text,
    finish_reason,
    gate_and_fault,
    make_sequences,
    text_delta,
    timing,
    usage,
)
from .requests import CommonParams, body_object, get_bool, get_int, parse_common, sampling_spec

Flavour = Literal["vllm", "sglang"]


def render_chat(messages: Any, tools: Any = None, *, add_generation_prompt: bool = True,
                template: Literal["plain", "drop_think"] = "plain") -> str:
    """The simulator's chat template (:func:`.._chat_template.render`) with vLLM's 400s.

    Raises:
        ApiError: malformed messages or tools.
    """
    try:
        return render(messages, tools, add_generation_prompt=add_generation_prompt,
                      template=template)
    except TemplateError as exc:
        raise validation_error(exc.loc, exc.value, exc.kind, exc.msg) from None


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


@dataclass(slots=True)
class ChatRequest:
    """A parsed chat request: sampling values, the rendered prompt and the tool options."""

    c: CommonParams
    prompt_text: str
    prompt: list[int]
    want_lp: bool
    top: int
    parse_tools: bool  # tools offered and tool_choice is not "none": split tool calls out
    return_prompt_ids: bool


def parse_chat(ctx: ServerContext, body: dict[str, Any]) -> ChatRequest:
    """Parse and render a chat body.

    Raises:
        ApiError: an invalid field, message or tool.
    """
    c = parse_common(ctx, body, ("max_completion_tokens", "max_tokens"), None)
    tools = body.get("tools")
    add_gen = get_bool(body, "add_generation_prompt", True)
    prompt_text = render_chat(body.get("messages"), tools, add_generation_prompt=add_gen,
                              template=ctx.config.chat_template)
    prompt = ctx.tokenizer.encode(prompt_text)
    want_lp = get_bool(body, "logprobs")
    top = get_int(body, "top_logprobs", 0) or 0
    if top > ctx.config.max_logprobs or top < 0:
        raise ApiError(f"Requested top_logprobs of {top}, which is greater than max "
                       f"allowed: {ctx.config.max_logprobs}", param="top_logprobs")
    parse_tools = bool(tools) and body.get("tool_choice") != "none"
    return ChatRequest(c, prompt_text, prompt, want_lp, top, parse_tools,
                       get_bool(body, "return_prompt_token_ids"))


class _Shapes:
    """The few places where vLLM 0.32 and SGLang differ in chat bodies."""

    __slots__ = ("ctx", "flavour", "req")

    def __init__(self, ctx: ServerContext, flavour: Flavour, req: ChatRequest) -> None:
        self.ctx = ctx
        self.flavour = flavour
        self.req = req

    def call_id(self) -> str:
        nid = self.ctx.next_id()
        return f"chatcmpl-tool-{nid}" if self.flavour == "vllm" else f"call_{nid[:24]}"

    def finish(self, seq: SimSequence, called: bool) -> tuple[str, int | str | None]:
        reason, stop = finish_reason(seq)
        if called and reason == "stop":
            return "tool_calls", (stop if self.flavour == "vllm" else None)
        if self.flavour == "sglang" and reason == "stop" and stop is None:
            plan = seq.plan
            assert plan is not None
            stop = plan.matched  # SGLang names the EOS it matched
        return reason, stop

    def message(self, text: str, parsed: ParsedCalls | None) -> dict[str, Any]:
        calls: list[dict[str, Any]] = [{"id": self.call_id(), "type": "function",
                  "function": {"name": call.name, "arguments": call.arguments}}
                 for call in (parsed.calls if parsed is not None else ())]
        content = parsed.content if parsed is not None else text
        if self.flavour == "sglang":
            for i, call in enumerate(calls):
                call["index"] = i
            return {"role": "assistant", "content": content, "reasoning_content": None,
                    "tool_calls": calls or None}
        return {"role": "assistant", "content": content, "refusal": None, "annotations": None,
                "audio": None, "function_call": None, "tool_calls": calls,
                "reasoning_content": None}

    def opening_call(self, index: int, name: str) -> dict[str, Any]:
        if self.flavour == "sglang":
            return {"id": self.call_id(), "index": index, "type": "function",
                    "function": {"name": name, "arguments": ""}}
        return {"index": index, "id": self.call_id(), "type": "function",
                "function": {"name": name, "arguments": ""}}

    def call_piece(self, index: int, piece: str) -> dict[str, Any]:
        if self.flavour == "sglang":
            return {"id": None, "index": index, "type": "function",
                    "function": {"name": None, "arguments": piece}}
        return {"index": index, "function": {"arguments": piece}}

    def usage(self, seqs: list[SimSequence], *, stream: bool) -> dict[str, Any]:
        prompt = self.req.prompt
        if self.flavour == "sglang":
            p = len(prompt)  # counted once per prompt, whatever n
            done = sum(s.n_done for s in seqs)
            details = ({"cached_tokens": sum(s.cached for s in seqs)}
                       if self.ctx.config.prompt_tokens_details else None)
            return {"prompt_tokens": p, "total_tokens": p + done, "completion_tokens": done,
                    "prompt_tokens_details": details, "reasoning_tokens": 0}
        if not stream:
            return usage(self.ctx, [prompt], seqs)
        u = usage(self.ctx, [prompt], seqs, details=False)
        details = cached_details(self.ctx, seqs, stream=True)
        if details is not None:  # chunks are serialised exclude_unset: only with the flag
            u["prompt_tokens_details"] = details
        return u


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions`` (vLLM 0.32)."""
    return await serve_chat(request, "vllm")


def _sglang_error(message: str, status: int = 400) -> web.Response:
    return json_response({"object": "error", "message": message,
                          "type": "BadRequestError" if status == 400 else str(status),
                          "param": None, "code": status}, status)


#: SGLang 0.5.23's answer to a streamed chat request asking for token ids (HTTP 400)
_SGLANG_STREAMED_IDS = ("return_token_ids is not supported with streaming on "
                        "/v1/chat/completions. Please set stream=false when using "
                        "return_token_ids=true.")


async def serve_chat(request: web.Request, flavour: Flavour) -> web.StreamResponse:
    """``POST /v1/chat/completions`` in ``flavour``'s shapes."""
    ctx = ctx_of(request)
    try:
        body = await body_object(request)
        if flavour == "sglang":
            # SGLang serves any model name and spells a few fields its own way
            body = {k: v for k, v in body.items() if k != "model"}
            if body.get("rid") is not None and body.get("request_id") is None:
                body["request_id"] = body["rid"]
            if body.get("no_stop_trim") is not None:
                body["include_stop_str_in_output"] = body["no_stop_trim"]
        req = parse_chat(ctx, body)
        if flavour == "sglang":
            if req.c.stream and req.c.return_token_ids:
                raise ApiError(_SGLANG_STREAMED_IDS)
            req.c.tokens_as_ids = False  # 0.5.23 ignores it: logprob tokens are text
        spec = sampling_spec(ctx, req.c, len(req.prompt))
    except ApiError as exc:
        if flavour == "sglang":
            return _sglang_error(str(exc), exc.status)
        return error_response(ctx, exc)
    c = req.c
    early, fault = await gate_and_fault(ctx, c.n)
    if early is not None:
        return early
    if flavour == "vllm":
        rid = f"chatcmpl-{c.request_id}" if c.request_id else f"chatcmpl-{ctx.next_id()}"
    else:
        rid = c.request_id or ctx.next_id()
    seqs = make_sequences(ctx, rid, [req.prompt], [req.prompt_text], [spec], c.n,
                          c.request_id, request.headers.get("traceparent"))
    shapes = _Shapes(ctx, flavour, req)
    if c.stream:
        return await _stream(request, ctx, shapes, rid, seqs)
    if not await drive_all(ctx.engine, seqs, None):
        if flavour == "sglang":
            return _sglang_error("The request queue is full.", 503)
        return error_response(ctx, overloaded())
    choices = []
    top = req.top
    for s in seqs:
        plan = s.plan
        assert plan is not None
        k = s.n_done
        text = final_text(s)
        parsed = parse_tool_calls(text) if req.parse_tools else None
        reason, stop_reason = shapes.finish(s, parsed is not None)
        lp = _logprobs(ctx, plan, 0, k, top, c.tokens_as_ids) if req.want_lp else None
        if flavour == "sglang":
            choice: dict[str, Any] = {"index": s.index, "message": shapes.message(text, parsed),
                                      "logprobs": lp, "finish_reason": reason,
                                      "matched_stop": stop_reason}
            if req.return_prompt_ids or c.return_token_ids:
                choice["prompt_token_ids"] = req.prompt
            if c.return_token_ids:  # SGLang 0.5.23's name, per choice
                choice["response_token_ids"] = plan.token_ids[:k]
            choices.append(choice)
            continue
        choices.append({
            "index": s.index, "message": shapes.message(text, parsed), "logprobs": lp,
            "finish_reason": reason, "stop_reason": stop_reason,
            "token_ids": plan.token_ids[:k] if c.return_token_ids else None,
        })
    model = ctx.config.model_name
    payload: dict[str, Any]
    if flavour == "sglang":
        payload = {"id": rid, "object": "chat.completion", "created": ctx.created,
                   "model": model, "choices": choices,
                   "usage": shapes.usage(seqs, stream=False),
                   "metadata": {"weight_version": ctx.engine.weight_label},
                   "sim_timing": timing(ctx, seqs)}
    else:
        payload = {"id": rid, "object": "chat.completion", "created": ctx.created,
                   "model": model, "choices": choices, "service_tier": None,
                   "system_fingerprint": None, "usage": shapes.usage(seqs, stream=False),
                   "prompt_logprobs": None,
                   "prompt_token_ids": req.prompt if c.return_token_ids else None,
                   "kv_transfer_params": None, "sim_timing": timing(ctx, seqs)}
    return broken_response(fault, request, payload) or json_response(payload)


async def _stream(request: web.Request, ctx: ServerContext, shapes: _Shapes, rid: str,
                  seqs: list[SimSequence]) -> web.StreamResponse:
    sse = SSEWriter(request, coalesce=ctx.config.zero_latency)
    await sse.prepare()
    req = shapes.req
    c = req.c
    top = req.top if req.want_lp else None
    sglang = shapes.flavour == "sglang"
    ids_in_chunks = c.return_token_ids and not sglang  # SGLang streams no ids in chat
    model = ctx.config.model_name
    sent: dict[int, int] = {}
    parsed: dict[int, ParsedCalls | None] = {}

    def base(choices: list[dict[str, Any]]) -> dict[str, Any]:
        obj = {"id": rid, "object": "chat.completion.chunk", "created": ctx.created,
               "model": model, "choices": choices}
        if sglang:
            obj["usage"] = None
        return obj

    def delta(fields: dict[str, Any]) -> dict[str, Any]:
        if not sglang:
            return fields
        return {"role": fields.get("role"), "content": fields.get("content"),
                "reasoning_content": None, "tool_calls": fields.get("tool_calls")}

    for s in seqs:
        first: dict[str, Any] = {"index": s.index,
                                 "delta": delta({"role": "assistant", "content": ""}),
                                 "logprobs": None, "finish_reason": None}
        if sglang:
            first["matched_stop"] = None
        obj = base([first])
        if ids_in_chunks:
            obj["prompt_token_ids"] = req.prompt
        await sse.send(obj)
        if req.parse_tools:
            assert s.plan is not None
            parsed[s.index] = parse_tool_calls(s.plan.text)

    def tool_delta(seq: SimSequence, k: int, final: bool, p: ParsedCalls) -> dict[str, Any]:
        plan = seq.plan
        assert plan is not None
        text = plan.text if (final and seq.aborted is None) else plan.text_at(k)
        lo = sent.get(seq.index, 0)
        sent[seq.index] = len(text)
        content, calls = stream_pieces(p, text, lo, len(text))
        fields: dict[str, Any] = {}
        if content:
            fields["content"] = content
        entries: list[dict[str, Any]] = []
        for i, call, opening, piece in calls:
            if opening:
                entries.append(shapes.opening_call(i, call.name))
            if piece:
                entries.append(shapes.call_piece(i, piece))
        if entries:
            fields["tool_calls"] = entries
        return fields

    def chunk(seq: SimSequence, k: int, prev: int, final: bool) -> dict[str, Any]:
        plan = seq.plan
        assert plan is not None
        p = parsed.get(seq.index)
        fields = (tool_delta(seq, k, final, p) if p is not None
                  else {"content": text_delta(seq, k, final, sent)})
        choice: dict[str, Any] = {"index": seq.index, "delta": delta(fields),
                                  "logprobs": (_logprobs(ctx, plan, prev, k, top,
                                                         c.tokens_as_ids)
                                               if top is not None else None),
                                  "finish_reason": None}
        if sglang:
            choice["matched_stop"] = None
        if ids_in_chunks:
            choice["token_ids"] = plan.token_ids[prev:k]
        obj = base([choice])
        if final:
            reason, stop_reason = shapes.finish(seq, p is not None)
            choice["finish_reason"] = reason
            choice["matched_stop" if sglang else "stop_reason"] = stop_reason
            obj["sim_timing"] = seq.timing(ctx.engine.loop.time())
        return obj

    await SequenceStream(sse, ctx.engine, seqs, chunk).run(None)
    if c.include_usage:
        await sse.send({**base([]), "usage": shapes.usage(seqs, stream=True)})
    return await sse.finish()


def tokenize_messages(ctx: ServerContext, body: dict[str, Any]) -> list[int]:
    """The prompt ids ``/tokenize`` gives for ``{"messages", "tools"?,
    "add_generation_prompt"?}``: the ids the chat endpoint renders.

    Raises:
        ApiError: malformed messages or tools.
    """
    add_gen = get_bool(body, "add_generation_prompt", True)
    text = render_chat(body.get("messages"), body.get("tools"), add_generation_prompt=add_gen,
                       template=ctx.config.chat_template)
    return ctx.tokenizer.encode(text)
