"""vLLM-flavoured routes (OpenAI-compatible ``/v1/completions`` etc.), 0.32-era shapes.

Bodies are serialised like vLLM 0.10.2/0.32: every declared field present, nulls included
(the usage-only stream chunk drops nulls, as vLLM does). Errors are nested
``{"error": {"message", "type", "param", "code"}}`` (``SimConfig.flat_errors`` gives the
≤0.10.0 flat shape). Unknown top-level fields are ignored. Every final body (final chunk
when streaming) carries the extension ``sim_timing`` at top level.
"""

from __future__ import annotations

import asyncio
import math
import re
import zlib
from typing import Any

import orjson
from aiohttp import web

from .context import ServerContext
from .driver import drive_all
from .faults import Fault
from .generation import OutputPlan, SamplingSpec
from .http_util import (
    CTX_KEY,
    BadBody,
    SSEWriter,
    json_response,
    read_json,
    reset_connection,
    retry_after_headers,
)
from .metrics import render_vllm
from .state import PauseMode, SimSequence

__all__ = ["add_vllm_routes"]

_STATUS_TYPES = {400: "BadRequestError", 404: "NotFoundError", 408: "RequestTimeoutError",
                 429: "TooManyRequestsError", 500: "InternalServerError",
                 502: "BadGatewayError", 503: "ServiceUnavailableError",
                 504: "GatewayTimeoutError"}
_PAUSED_MESSAGE = "Generation is paused. Please retry after it resumes."


class _ApiError(Exception):
    def __init__(self, message: str, status: int = 400, type_: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_ or _STATUS_TYPES.get(status, "BadRequestError")
        self.param = param


def _ctx(request: web.Request) -> ServerContext:
    ctx: ServerContext = request.app[CTX_KEY]
    return ctx


def _error(ctx: ServerContext, exc: _ApiError,
           headers: dict[str, str] | None = None) -> web.Response:
    err = {"message": str(exc), "type": exc.type, "param": exc.param, "code": exc.status}
    body = {"object": "error", **err} if ctx.config.flat_errors else {"error": err}
    return json_response(body, exc.status, headers)


def _error_event(ctx: ServerContext, exc: _ApiError) -> dict[str, Any]:
    err = {"message": str(exc), "type": exc.type, "param": exc.param, "code": exc.status}
    return {"object": "error", **err} if ctx.config.flat_errors else {"error": err}


_NO_VALUE: Any = object()


def _param_error(message: str, param: str, value: Any = _NO_VALUE) -> _ApiError:
    """A 400 about one parameter, worded like vLLM 0.32's ``VLLMValidationError``:
    ``"<message> (parameter=P, value=V)"`` (``value`` left out when not given)."""
    tail = f"parameter={param}" if value is _NO_VALUE else f"parameter={param}, value={value}"
    return _ApiError(f"{message} ({tail})", 400, param=param)


def _shown(value: Any) -> str:
    """How pydantic shows an input in vLLM's validation messages."""
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    return str(value)[:40]


def _validation(field: str, value: Any, kind: str, msg: str) -> _ApiError:
    """A request-validation 400 as vLLM 0.32 words it: type ``"Bad Request"``, ``param`` the
    dotted location (``body.max_tokens``), pydantic's error line in the message."""
    loc = f"body.{field}" if field != "body" else "body"
    return _ApiError(f"1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', "
                     f"'msg': '{msg}', 'input': {_shown(value)!r}}}", 400, "Bad Request",
                     param=loc)


def _body_error(exc: BadBody) -> _ApiError:
    """An empty or non-JSON body, as vLLM 0.32 reports it (``param`` ``body`` / ``body.POS``)."""
    text = str(exc)
    if text.startswith("Request body is empty"):
        return _validation("body", None, "missing", "Field required")
    pos = re.search(r"\(char (\d+)\)", text)
    return _validation(pos.group(1) if pos else "body", {}, "json_invalid", "JSON decode error")


_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _get_int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if type(v) is int:
        return v
    if type(v) is float:
        if v.is_integer():
            return int(v)
        raise _validation(name, v, "int_from_float",
                          "Input should be a valid integer, got a number with a fractional part")
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            raise _validation(name, v, "int_parsing", "Input should be a valid integer, "
                              "unable to parse string as an integer") from None
    raise _validation(name, v, "int_type", "Input should be a valid integer")


def _get_float(body: dict[str, Any], name: str, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if (type(v) is int or type(v) is float) and math.isfinite(v):
        return float(v)
    if isinstance(v, str):
        try:
            f = float(v.strip())
        except ValueError:
            f = math.nan
        if math.isfinite(f):
            return f
        raise _validation(name, v, "float_parsing",
                          "Input should be a valid number, unable to parse string as a number")
    raise _validation(name, v, "float_type", "Input should be a valid number")


def _get_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if type(v) is bool:
        return v
    if type(v) is int and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise _validation(name, v, "bool_parsing",
                      "Input should be a valid boolean, unable to interpret input")


class _Common:
    """Sampling values shared by completions and chat."""

    __slots__ = (
        "continuous_usage",
        "include_usage",
        "max_tokens",
        "n",
        "request_id",
        "return_token_ids",
        "spec_kw",
        "stream",
        "tokens_as_ids",
    )

    def __init__(self) -> None:
        self.n = 1
        self.stream = False
        self.include_usage = False
        self.continuous_usage = False
        self.return_token_ids = False
        self.tokens_as_ids = False
        self.max_tokens: int | None = None
        self.request_id: str | None = None
        self.spec_kw: dict[str, Any] = {}


def _common(ctx: ServerContext, body: dict[str, Any], max_key: tuple[str, ...],
            default_max: int | None) -> _Common:
    c = _Common()
    model = body.get("model")
    if model is not None and model != ctx.config.model_name:
        raise _ApiError(f"The model `{model}` does not exist. Valid aliases: "
                        f"{ctx.config.model_name}.", 404, "NotFoundError", "model")
    c.stream = _get_bool(body, "stream")
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise _validation("stream_options", so, "model_type",
                              "Input should be a valid dictionary")
        if not c.stream:
            raise _param_error("Stream options can only be defined when `stream=True`.",
                               "stream_options")
        c.include_usage = bool(so.get("include_usage"))
        c.continuous_usage = bool(so.get("continuous_usage_stats"))
    max_tokens: int | None = None
    for key in max_key:
        max_tokens = _get_int(body, key, None)
        if max_tokens is not None:
            break
    c.max_tokens = default_max if max_tokens is None else max_tokens
    temperature = _get_float(body, "temperature", 1.0)
    top_p = _get_float(body, "top_p", 1.0)
    top_k = _get_int(body, "top_k", 0)
    min_p = _get_float(body, "min_p", 0.0)
    rep = _get_float(body, "repetition_penalty", 1.0)
    pres = _get_float(body, "presence_penalty", 0.0)
    freq = _get_float(body, "frequency_penalty", 0.0)
    n = _get_int(body, "n", 1)
    min_tokens = _get_int(body, "min_tokens", 0)
    seed = _get_int(body, "seed", None)
    assert n is not None and top_k is not None and min_tokens is not None
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(s for s in stop if s)
    else:
        raise _validation("stop", stop, "list_type", "Input should be a valid list")
    stop_ids = body.get("stop_token_ids")
    if stop_ids is None:
        stop_ids = []
    if not isinstance(stop_ids, list):
        raise _validation("stop_token_ids", stop_ids, "list_type",
                          "Input should be a valid list")
    for k, i in enumerate(stop_ids):
        if type(i) is not int:
            raise _validation(f"stop_token_ids.{k}", i, "int_parsing", "Input should be a "
                              "valid integer, unable to parse string as an integer")
    ignore_eos = _get_bool(body, "ignore_eos")
    keep_stop = _get_bool(body, "include_stop_str_in_output")
    c.return_token_ids = _get_bool(body, "return_token_ids")
    c.tokens_as_ids = _get_bool(body, "return_tokens_as_token_ids")
    rid = body.get("request_id")
    c.request_id = rid if isinstance(rid, str) and rid else None
    # SamplingParams._verify_args
    if n < 1:
        raise _ApiError(f"n must be at least 1, got {n}.")
    if not -2.0 <= pres <= 2.0:
        raise _ApiError(f"presence_penalty must be in [-2, 2], got {pres}.")
    if not -2.0 <= freq <= 2.0:
        raise _ApiError(f"frequency_penalty must be in [-2, 2], got {freq}.")
    if rep <= 0.0:
        raise _ApiError(f"repetition_penalty must be greater than zero, got {rep}.")
    if temperature < 0.0:
        raise _param_error(f"temperature must be non-negative, got {temperature}.",
                           "temperature", temperature)
    if not 0.0 < top_p <= 1.0:
        raise _param_error(f"top_p must be in (0, 1], got {top_p}.", "top_p", top_p)
    if top_k < -1:
        raise _ApiError(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    if not 0.0 <= min_p <= 1.0:
        raise _ApiError(f"min_p must be in [0, 1], got {min_p}.")
    if c.max_tokens is not None and c.max_tokens < 1:
        raise _param_error(f"max_tokens must be at least 1, got {c.max_tokens}.",
                           "max_tokens", c.max_tokens)
    if min_tokens < 0:
        raise _ApiError(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if c.max_tokens is not None and min_tokens > c.max_tokens:
        raise _ApiError(f"min_tokens must be less than or equal to max_tokens={c.max_tokens}, "
                        f"got {min_tokens}.")
    c.n = n
    c.spec_kw = {"temperature": temperature, "stop": stops,
                 "stop_token_ids": frozenset(stop_ids), "ignore_eos": ignore_eos,
                 "min_tokens": min_tokens, "seed": seed, "keep_stop": keep_stop}
    return c


def _spec_for(ctx: ServerContext, c: _Common, prompt_len: int) -> SamplingSpec:
    ctxlen = ctx.config.context_length
    if prompt_len >= ctxlen:
        raise _ApiError(f"This model's maximum context length is {ctxlen} tokens. However, "
                        f"your prompt contains {prompt_len} input tokens, which exceeds this "
                        "limit even without any output tokens. Please reduce the length of the "
                        "input prompt. (parameter=input_tokens, value={prompt_len})".format(
                            prompt_len=prompt_len), 400, param="input_tokens")
    room = ctxlen - prompt_len
    max_tokens = room if c.max_tokens is None else c.max_tokens
    if max_tokens > room:
        if ctx.config.max_tokens_policy == "reject":
            raise _ApiError(f"'max_tokens' or 'max_completion_tokens' is too large: "
                            f"{max_tokens}. This model's maximum context length is {ctxlen} "
                            f"tokens and your request has {prompt_len} input tokens "
                            f"({max_tokens} > {ctxlen} - {prompt_len}).")
        if max_tokens > ctxlen:
            raise _param_error(f"max_tokens={max_tokens} cannot be greater than "
                               f"max_model_len={ctxlen}. Please request fewer output tokens.",
                               "max_tokens", max_tokens)
        max_tokens = room
    return SamplingSpec(max_tokens=max_tokens, **c.spec_kw)


def _prompts(ctx: ServerContext, body: dict[str, Any]) -> tuple[list[list[int]],
                                                                  list[str | None]]:
    p = body.get("prompt")
    tok = ctx.tokenizer
    empty = _param_error("Either prompt or prompt_embeds must be provided and non-empty.",
                         "prompt")
    if p is None:
        raise empty
    if isinstance(p, str):
        if not p:
            raise empty
        return [tok.encode(p)], [p]
    if isinstance(p, list):
        if not p:  # 0.32 gets past validation and fails in the prompt renderer
            raise _ApiError("You must pass at least one prompt")
        if all(type(i) is int for i in p):
            for k, i in enumerate(p):
                if i < 0:
                    raise _validation(f"prompt.{k}", i, "greater_than_equal",
                                      "Input should be greater than or equal to 0")
            return [p], [None]
        if all(isinstance(s, str) for s in p):
            if any(not s for s in p):
                raise empty
            return [tok.encode(s) for s in p], list(p)
        if all(isinstance(r, list) and r and all(type(i) is int and i >= 0 for i in r)
               for r in p):
            return [list(r) for r in p], [None] * len(p)
    raise _validation("prompt", p, "string_type",
                      "Input should be a valid string, list of ints or list of strings")


def _overloaded() -> _ApiError:
    return _ApiError("The server is overloaded: the waiting queue is full.", 429)


def _final_text(seq: SimSequence) -> str:
    """The text a finished (or aborted) sequence produced."""
    plan = seq.plan
    assert plan is not None
    k = seq.n_done
    return plan.text if (k == len(plan) and seq.aborted is None) else plan.text_at(k)


def _finish(seq: SimSequence) -> tuple[str, int | str | None]:
    if seq.aborted is not None:
        return "abort", None
    plan = seq.plan
    assert plan is not None
    if plan.finish == "length":
        return "length", None
    if plan.finish == "eos":
        return "stop", None
    return "stop", plan.matched


def _completion_logprobs(ctx: ServerContext, plan: OutputPlan, start: int, end: int, k: int,
                         as_ids: bool, offset: int) -> tuple[dict[str, Any], int]:
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


def _fault_error(ctx: ServerContext, fault: Fault) -> web.Response:
    status = fault.status
    return _error(ctx, _ApiError(f"Simulated server fault ({status}).", status),
                  retry_after_headers(status, ctx.faults))


async def _gate_and_fault(ctx: ServerContext,
                          n_seqs: int) -> tuple[web.Response | None, Fault | None]:
    engine = ctx.engine
    if not await engine.gate(may_reject=True):
        return _error(ctx, _ApiError(_PAUSED_MESSAGE, 503, "ServiceUnavailableError")), None
    fault = ctx.faults.draw() if ctx.faults.active else None
    if fault is not None:
        if fault.kind == "error":
            return _fault_error(ctx, fault), None
        if fault.kind == "hang":
            await engine.hang()
            return _error(ctx, _ApiError("Server is shutting down.", 503)), None
        if fault.kind == "slow_first_byte":
            await asyncio.sleep(ctx.faults.slow_first_byte_s)
    if engine.capacity_left() < n_seqs:
        return _error(ctx, _overloaded(), {"Retry-After": "1"}), None
    return None, fault


def _broken(fault: Fault | None, request: web.Request, payload: Any) -> web.Response | None:
    if fault is None:
        return None
    if fault.kind == "reset":
        reset_connection(request)
        return web.Response(status=500)
    if fault.kind in ("malformed", "truncate"):
        raw = orjson.dumps(payload)
        return web.Response(body=raw[:max(1, len(raw) // 2)], status=200,
                            content_type="application/json")
    return None


def _timing(ctx: ServerContext, seqs: list[SimSequence]) -> dict[str, float | int]:
    now = ctx.engine.loop.time()
    ts = [s.timing(now) for s in seqs]
    out: dict[str, float | int] = {
        key: max(t[key] for t in ts) for key in ("queue_s", "prefill_s", "decode_s", "e2e_s")}
    firsts = [t["first_token_s"] for t in ts if t["first_token_s"] > 0]
    out["first_token_s"] = min(firsts) if firsts else 0.0
    out["cached_tokens"] = sum(int(t["cached_tokens"]) for t in ts)
    return out


def _usage(ctx: ServerContext, prompts: list[list[int]], seqs: list[SimSequence],
           *, details: bool = True) -> dict[str, Any]:
    p = sum(len(x) for x in prompts)
    c = sum(s.n_done for s in seqs)
    u: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}
    if details:
        u["prompt_tokens_details"] = (
            {"cached_tokens": sum(s.cached for s in seqs)}
            if ctx.config.prompt_tokens_details else None)
        u["completion_tokens_details"] = None
    return u


def _completion_id(ctx: ServerContext) -> str:
    """``cmpl-`` and 16 hex digits like 0.32 (random per server, then a counter)."""
    nid = ctx.next_id()
    return f"cmpl-{nid[:8]}{nid[-8:]}"


def _fingerprint(ctx: ServerContext) -> str:
    """``system_fingerprint``: ``vllm-<version>-<8 hex>`` like 0.32 (stable per model)."""
    digest = zlib.crc32(f"{ctx.config.vllm_version}/{ctx.config.model_name}".encode())
    return f"vllm-{ctx.config.vllm_version}-{digest:08x}"


def _make_seqs(ctx: ServerContext, rid: str, prompts: list[list[int]],
               texts: list[str | None], specs: list[SamplingSpec], n: int,
               client_rid: str | None) -> list[SimSequence]:
    seqs = []
    engine = ctx.engine
    for i, (prompt, spec) in enumerate(zip(prompts, specs, strict=True)):
        for j in range(n):
            idx = i * n + j
            seqs.append(engine.new_sequence(f"{rid}-{idx}", prompt, spec, index=idx,
                                            sample_index=j, client_rid=client_rid,
                                            prompt_text=texts[i]))
    return seqs


async def _body_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or the error vLLM gives for it."""
    try:
        body = await read_json(request)
    except BadBody as exc:
        raise _body_error(exc) from None
    if not isinstance(body, dict):
        raise _validation("body", body, "model_attributes_type",
                          "Input should be a valid dictionary or object to extract fields from")
    return body


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``."""
    ctx = _ctx(request)
    try:
        body = await _body_object(request)
        c = _common(ctx, body, ("max_tokens",), ctx.config.default_max_tokens)
        prompts, texts = _prompts(ctx, body)
        lp = _get_int(body, "logprobs", None)
        if lp is not None:
            if lp == -1:
                lp = ctx.config.max_logprobs
            if lp < 0:
                raise _param_error("`logprobs` must be a positive value or -1.", "logprobs",
                                   lp)
            if lp > ctx.config.max_logprobs:
                raise _param_error(f"Requested sample logprobs of {lp}, which is greater than "
                                   f"max allowed: {ctx.config.max_logprobs}", "logprobs", lp)
        echo = _get_bool(body, "echo")
        specs = [_spec_for(ctx, c, len(p)) for p in prompts]
    except _ApiError as exc:
        return _error(ctx, exc)
    early, fault = await _gate_and_fault(ctx, len(prompts) * c.n)
    if early is not None:
        return early
    rid = f"cmpl-{c.request_id}" if c.request_id else _completion_id(ctx)
    seqs = _make_seqs(ctx, rid, prompts, texts, specs, c.n, c.request_id)
    if fault is not None and fault.kind == "abort":
        for s in seqs:
            assert s.plan is not None
            s.abort_after = len(s.plan) // 2
    model = ctx.config.model_name
    if c.stream:
        return await _stream_completions(request, ctx, c, rid, prompts, seqs, lp, fault)
    if not await drive_all(ctx.engine, seqs, None):
        return _error(ctx, _overloaded())
    choices = []
    for s in seqs:
        plan = s.plan
        assert plan is not None
        reason, stop_reason = _finish(s)
        k = s.n_done
        text = _final_text(s)
        if echo:
            text = ctx.tokenizer.decode(s.prompt_ids) + text
        logprobs = None
        if lp is not None:
            logprobs, _ = _completion_logprobs(ctx, plan, 0, k, lp, c.tokens_as_ids, 0)
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
               "system_fingerprint": _fingerprint(ctx), "usage": _usage(ctx, prompts, seqs),
               "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
               "sim_timing": _timing(ctx, seqs)}
    return _broken(fault, request, payload) or json_response(payload)


async def _stream_completions(request: web.Request, ctx: ServerContext, c: _Common, rid: str,
                              prompts: list[list[int]], seqs: list[SimSequence],
                              lp: int | None, fault: Fault | None) -> web.StreamResponse:
    sse = SSEWriter(request)
    await sse.prepare()
    model = ctx.config.model_name
    kind = fault.kind if fault is not None else None
    planned = sum(len(s.plan) for s in seqs if s.plan is not None)
    cut_after = max(1, planned // 2) if kind in ("reset", "truncate") else -1
    last: dict[int, int] = {}
    text_sent: dict[int, int] = {}
    offsets: dict[int, int] = {}
    counters = {"emitted": 0, "stopped": 0, "chunks": 0}

    def chunk(seq: SimSequence, k: int, final: bool) -> dict[str, Any]:
        plan = seq.plan
        assert plan is not None
        prev = last.get(seq.index, 0)
        text = plan.text if (final and seq.aborted is None) else plan.text_at(k)
        sent = text_sent.get(seq.index, 0)
        delta = text[sent:]
        text_sent[seq.index] = len(text)
        logprobs = None
        if lp is not None:
            logprobs, offsets[seq.index] = _completion_logprobs(
                ctx, plan, prev, k, lp, c.tokens_as_ids, offsets.get(seq.index, 0))
        reason, stop_reason = _finish(seq) if final else (None, None)
        last[seq.index] = k
        choice = {"index": seq.index, "text": delta, "logprobs": logprobs,
                  "finish_reason": reason, "stop_reason": stop_reason,
                  "prompt_token_ids": (list(seq.prompt_ids)
                                       if c.return_token_ids and prev == 0 and
                                       seq.index not in offsets_first else None),
                  "token_ids": plan.token_ids[prev:k] if c.return_token_ids else None}
        offsets_first.add(seq.index)
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
                obj["system_fingerprint"] = _fingerprint(ctx)
            obj["sim_timing"] = seq.timing(ctx.engine.loop.time())
        return obj

    offsets_first: set[int] = set()

    async def emit(seq: SimSequence, k: int) -> None:
        if counters["stopped"]:
            return
        plan = seq.plan
        assert plan is not None
        prev = last.get(seq.index, 0)
        final = k >= len(plan) and seq.aborted is None
        obj = chunk(seq, k, final)
        if kind == "malformed" and counters["chunks"] == 0:
            await sse.send_raw(b"data: " + orjson.dumps(obj)[:25] + b"\n\n")
        else:
            await sse.send(obj)
        counters["chunks"] += 1
        counters["emitted"] += k - prev
        if 0 < cut_after <= counters["emitted"]:
            counters["stopped"] = 1
            if kind == "reset":
                reset_connection(request)
            for s in seqs:
                ctx.engine.abort(s.rid, exact=True)

    ok = await drive_all(ctx.engine, seqs, emit)
    if counters["stopped"]:
        if kind == "reset":
            return sse.response
        return await sse.finish(done=False)
    if not ok:
        await sse.send(_error_event(ctx, _overloaded()))
        return await sse.finish()
    for seq in seqs:
        plan = seq.plan
        assert plan is not None
        if seq.aborted is not None or seq.n_done < len(plan) or len(plan) == 0:
            await sse.send(chunk(seq, seq.n_done, True))
    if c.include_usage:
        usage = _usage(ctx, prompts, seqs, details=ctx.config.prompt_tokens_details)
        await sse.send({"id": rid, "object": "text_completion", "created": ctx.created,
                        "model": model, "choices": [], "usage": usage,
                        "system_fingerprint": _fingerprint(ctx),
                        "sim_timing": _timing(ctx, seqs)})
    return await sse.finish()


# -- chat --------------------------------------------------------------------------------------


def render_chat(messages: Any) -> str:
    """The simulator's chat template: ``<|role|>\\ncontent\\n`` per message, then the
    assistant header.

    Raises:
        _ApiError: malformed messages.
    """
    if not isinstance(messages, list) or not messages:
        raise _validation("messages", messages, "missing" if messages is None else "list_type",
                          "Field required" if messages is None else
                          "Input should be a non-empty list")
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _validation("messages", m, "model_type",
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
            raise _validation("messages", content, "string_type",
                              "Input should be a valid string")
        parts.append(f"<|{m['role']}|>\n{text}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def _chat_logprobs(ctx: ServerContext, plan: OutputPlan, start: int, end: int,
                   k: int, as_ids: bool) -> dict[str, Any]:
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
    """``POST /v1/chat/completions`` (basic: text messages, n, logprobs, stream)."""
    ctx = _ctx(request)
    try:
        body = await _body_object(request)
        c = _common(ctx, body, ("max_completion_tokens", "max_tokens"), None)
        prompt_text = render_chat(body.get("messages"))
        prompt = ctx.tokenizer.encode(prompt_text)
        want_lp = _get_bool(body, "logprobs")
        top = _get_int(body, "top_logprobs", 0) or 0
        if top > ctx.config.max_logprobs or top < 0:
            raise _ApiError(f"Requested top_logprobs of {top}, which is greater than max "
                            f"allowed: {ctx.config.max_logprobs}", param="top_logprobs")
        spec = _spec_for(ctx, c, len(prompt))
    except _ApiError as exc:
        return _error(ctx, exc)
    early, fault = await _gate_and_fault(ctx, c.n)
    if early is not None:
        return early
    rid = f"chatcmpl-{c.request_id}" if c.request_id else f"chatcmpl-{ctx.next_id()}"
    seqs = _make_seqs(ctx, rid, [prompt], [prompt_text], [spec], c.n, c.request_id)
    model = ctx.config.model_name
    if c.stream:
        return await _stream_chat(request, ctx, c, rid, prompt, seqs,
                                  top if want_lp else None)
    if not await drive_all(ctx.engine, seqs, None):
        return _error(ctx, _overloaded())
    choices = []
    for s in seqs:
        plan = s.plan
        assert plan is not None
        reason, stop_reason = _finish(s)
        k = s.n_done
        text = _final_text(s)
        choices.append({
            "index": s.index,
            "message": {"role": "assistant", "content": text, "refusal": None,
                        "annotations": None, "audio": None, "function_call": None,
                        "tool_calls": [], "reasoning_content": None},
            "logprobs": (_chat_logprobs(ctx, plan, 0, k, top, c.tokens_as_ids)
                         if want_lp else None),
            "finish_reason": reason, "stop_reason": stop_reason,
            "token_ids": plan.token_ids[:k] if c.return_token_ids else None,
        })
    payload = {"id": rid, "object": "chat.completion", "created": ctx.created, "model": model,
               "choices": choices, "service_tier": None, "system_fingerprint": None,
               "usage": _usage(ctx, [prompt], seqs), "prompt_logprobs": None,
               "prompt_token_ids": prompt if c.return_token_ids else None,
               "kv_transfer_params": None, "sim_timing": _timing(ctx, seqs)}
    return _broken(fault, request, payload) or json_response(payload)


async def _stream_chat(request: web.Request, ctx: ServerContext, c: _Common, rid: str,
                       prompt: list[int], seqs: list[SimSequence],
                       top: int | None) -> web.StreamResponse:
    sse = SSEWriter(request)
    await sse.prepare()
    model = ctx.config.model_name
    last: dict[int, int] = {}
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

    async def emit(seq: SimSequence, k: int, *, force_final: bool = False) -> None:
        plan = seq.plan
        assert plan is not None
        prev = last.get(seq.index, 0)
        final = force_final or (k >= len(plan) and seq.aborted is None)
        text = plan.text if (final and seq.aborted is None) else plan.text_at(k)
        delta = text[sent.get(seq.index, 0):]
        sent[seq.index] = len(text)
        last[seq.index] = k
        choice: dict[str, Any] = {"index": seq.index, "delta": {"content": delta},
                                  "logprobs": (_chat_logprobs(ctx, plan, prev, k, top,
                                                              c.tokens_as_ids)
                                               if top is not None else None),
                                  "finish_reason": None}
        if c.return_token_ids:
            choice["token_ids"] = plan.token_ids[prev:k]
        obj = base([choice])
        if final:
            reason, stop_reason = _finish(seq)
            choice["finish_reason"] = reason
            choice["stop_reason"] = stop_reason
            obj["sim_timing"] = seq.timing(ctx.engine.loop.time())
        await sse.send(obj)

    await drive_all(ctx.engine, seqs, emit)
    for seq in seqs:
        plan = seq.plan
        assert plan is not None
        if seq.aborted is not None or seq.n_done < len(plan) or len(plan) == 0:
            await emit(seq, seq.n_done, force_final=True)
    if c.include_usage:
        await sse.send({**base([]), "usage": _usage(ctx, [prompt], seqs, details=False)})
    return await sse.finish()


# -- operational and dev-mode routes -----------------------------------------------------------


async def health(_: web.Request) -> web.Response:
    """``GET /health`` (and ``/ping``): 200 with an empty body."""
    return web.Response(status=200)


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``."""
    ctx = _ctx(request)
    name = ctx.config.model_name
    return json_response({"object": "list", "data": [{
        "id": name, "object": "model", "created": ctx.created, "owned_by": "vllm",
        "root": name, "parent": None, "max_model_len": ctx.config.context_length,
        "permission": [{
            "id": f"modelperm-{ctx.port:x}", "object": "model_permission",
            "created": ctx.created, "allow_create_engine": False, "allow_sampling": True,
            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
            "allow_fine_tuning": False, "organization": "*", "group": None,
            "is_blocking": False}]}]})


async def version(request: web.Request) -> web.Response:
    """``GET /version``."""
    return json_response({"version": _ctx(request).config.vllm_version})


async def load(request: web.Request) -> web.Response:
    """``GET /load``: in-flight sequences."""
    e = _ctx(request).engine
    return json_response({"server_load": e.running + e.num_waiting})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text with ``vllm:*`` names."""
    ctx = _ctx(request)
    e = ctx.engine
    cfg = ctx.config
    used = sum(s.prompt_tokens + s.n_done for s in e.live if s.state == "running")
    text = render_vllm(e.metrics, model=cfg.model_name, running=e.running,
                       waiting=e.num_waiting,
                       kv_usage=used / (cfg.context_length * cfg.max_num_seqs))
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


async def _body_or_empty(request: web.Request) -> Any:
    if not request.can_read_body:
        return {}
    try:
        return await read_json(request)
    except BadBody:
        return None


async def tokenize(request: web.Request) -> web.Response:
    """``POST /tokenize``: ``{"prompt": ...}`` → ``{"count", "max_model_len", "tokens"}``."""
    ctx = _ctx(request)
    body = await _body_or_empty(request)
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(prompt, str):
        return _error(ctx, _validation("prompt", prompt, "missing", "Field required"))
    ids = ctx.tokenizer.encode(prompt)
    return json_response({"count": len(ids), "max_model_len": ctx.config.context_length,
                          "tokens": ids, "token_strs": None})


async def detokenize(request: web.Request) -> web.Response:
    """``POST /detokenize``: ``{"tokens": [...]}`` → ``{"prompt"}``."""
    ctx = _ctx(request)
    body = await _body_or_empty(request)
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        return _error(ctx, _validation("tokens", tokens, "missing", "Field required"))
    return json_response({"prompt": ctx.tokenizer.decode(tokens)})


async def pause(request: web.Request) -> web.Response:
    """``POST /pause?mode=abort|wait|keep`` (dev mode)."""
    ctx = _ctx(request)
    mode = request.query.get("mode")
    if mode is None:
        legacy = request.query.get("wait_for_inflight_requests", "false").lower()
        mode = "wait" if legacy in ("1", "true") else "abort"
    if mode not in ("abort", "wait", "keep"):  # a FastAPI query-parameter validation error
        expected = "'abort', 'wait' or 'keep'"
        return _error(ctx, _ApiError(
            f"1 validation error:\n  {{'type': 'literal_error', 'loc': 'query.mode', "
            f"'msg': \"Input should be {expected}\", 'input': {mode[:40]!r}, "
            f"'ctx': {{'expected': \"{expected}\"}}}}", 400, "Bad Request", "query.mode"))
    modes: dict[str, PauseMode] = {"abort": "abort", "wait": "wait", "keep": "keep"}
    await ctx.engine.pause(modes[mode])
    return json_response({"status": "paused"})


async def resume(request: web.Request) -> web.Response:
    """``POST /resume`` (dev mode)."""
    _ctx(request).engine.resume()
    return json_response({"status": "resumed"})


async def is_paused(request: web.Request) -> web.Response:
    """``GET /is_paused`` (dev mode)."""
    return json_response({"is_paused": _ctx(request).engine.paused})


async def abort_requests(request: web.Request) -> web.Response:
    """``POST /abort_requests`` ``{"request_ids": [...]}`` (empty or missing = all)."""
    ctx = _ctx(request)
    body = await _body_or_empty(request)
    if body is None or not isinstance(body, dict):
        return json_response({"error": "Invalid JSON body."}, 400)
    ids = body.get("request_ids")
    if ids is not None and (not isinstance(ids, list)
                            or not all(isinstance(i, str) for i in ids)):
        return json_response({"error": "request_ids must be a list of strings."}, 400)
    if not ids:
        n = ctx.engine.abort(None)
    else:
        n = sum(ctx.engine.abort(i) for i in ids)
    return json_response({"status": "aborted", "aborted": n})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """``POST /reset_prefix_cache`` (dev mode)."""
    _ctx(request).engine.cache.clear()
    return json_response({"success": True})


async def update_weight_version(request: web.Request) -> web.Response:
    """``POST /update_weight_version`` ``{"new_version": "v5"}`` (0.33 dev mode)."""
    ctx = _ctx(request)
    body = await _body_or_empty(request)
    new = body.get("new_version") if isinstance(body, dict) else None
    if not isinstance(new, str) or not new:
        return json_response({"error": "new_version must be a non-empty string."}, 400)
    ctx.engine.weight_version += 1
    ctx.engine.weight_label = new
    return json_response({"success": True, "new_version": new})


async def weight_info(request: web.Request) -> web.Response:
    """``GET /weight_info``."""
    return json_response({"weight_version": _ctx(request).engine.weight_label})


def add_vllm_routes(app: web.Application) -> None:
    """Register every vLLM-flavoured route on ``app``."""
    r = app.router
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/health", health)
    r.add_get("/ping", health)
    r.add_post("/ping", health)
    r.add_get("/v1/models", models)
    r.add_get("/version", version)
    r.add_get("/load", load)
    r.add_get("/metrics", metrics)
    r.add_post("/tokenize", tokenize)
    r.add_post("/detokenize", detokenize)
    r.add_post("/pause", pause)
    r.add_post("/resume", resume)
    r.add_get("/is_paused", is_paused)
    r.add_post("/abort_requests", abort_requests)
    r.add_post("/reset_prefix_cache", reset_prefix_cache)
    r.add_post("/update_weight_version", update_weight_version)
    r.add_get("/weight_info", weight_info)
