"""SGLang-flavoured routes (native ``/generate`` and the control endpoints), 0.5.23 shapes.

Streaming chunks carry cumulative ``text``, ``output_ids`` and logprobs (0.5.23 default);
``SimConfig.sglang_incremental_streaming`` switches to deltas. Every final object carries
``meta_info.e2e_latency`` and the extension ``meta_info.sim_timing``
(``queue_s``, ``prefill_s``, ``decode_s``, ``first_token_s``, ``e2e_s``, ``cached_tokens``).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import orjson
from aiohttp import web

from .context import ServerContext
from .driver import drive_all
from .faults import Fault
from .generation import SamplingSpec
from .http_util import (
    CTX_KEY,
    BadBody,
    SSEWriter,
    json_response,
    read_json,
    reset_connection,
    retry_after_headers,
)
from .metrics import render_sglang
from .state import ABORT_WAITING, PauseMode, SimSequence

__all__ = ["add_sglang_routes"]

_SAMPLING_KEYS = (
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "min_new_tokens", "stop", "stop_token_ids",
    "stop_regex", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
    "no_stop_trim", "n", "json_schema", "regex", "ebnf", "structural_tag", "logit_bias",
    "stream_interval", "custom_params", "sampling_seed", "beam_width", "watermark", "choice",
    "max_thinking_tokens",
)
_SAMPLING_SET = frozenset(_SAMPLING_KEYS)
_FLUSH_TEXT = ("Cache flushed.\nPlease check backend logs for more details. (When there are "
               "running or waiting requests, the operation will not be performed.)\n")


class _Invalid(Exception):
    """A ``ValueError``-style rejection: 400 ``{"error": {"message"}}`` (SSE event if stream)."""


class _Contract(Exception):
    """A 0.5.23 contract-gate rejection: 400 ``{"error": "<string>"}``."""


def _ctx(request: web.Request) -> ServerContext:
    ctx: ServerContext = request.app[CTX_KEY]
    return ctx


def _flat_error(message: str, status: int, type_: str) -> web.Response:
    return json_response({"object": "error", "message": message, "type": type_,
                          "param": None, "code": status}, status)


def _is_int(x: object) -> bool:
    return type(x) is int


def _is_num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _type_name(x: object) -> str:
    return {bool: "boolean", int: "integer", float: "floating point", str: "string",
            list: "sequence", dict: "map", type(None): "null"}.get(type(x), "value")


def _invalid_type(field: str, value: object, expected: str) -> _Contract:
    return _Contract(f"invalid type: {_type_name(value)} `{str(value)[:40]}`, expected "
                     f"{expected} at field `{field}`")


def _sampling(ctx: ServerContext, sp: Any) -> tuple[SamplingSpec, int]:
    if sp is None:
        sp = {}
    if not isinstance(sp, dict):
        raise _invalid_type("sampling_params", sp, "a map")
    for key in sp:
        if key not in _SAMPLING_SET:
            raise _Contract(f"unknown field `{key}`, expected one of "
                            + ", ".join(f"`{k}`" for k in _SAMPLING_KEYS))
    cfg = ctx.config

    def num(name: str, default: float) -> float:
        v = sp.get(name)
        if v is None:
            return default
        if not _is_num(v) or type(v) is bool:
            raise _invalid_type(f"sampling_params.{name}", v, "a number")
        return float(v)

    def integer(name: str, default: int) -> int:
        v = sp.get(name)
        if v is None:
            return default
        if not _is_int(v):
            raise _invalid_type(f"sampling_params.{name}", v, "an integer")
        return int(v)

    max_new = integer("max_new_tokens", cfg.default_max_new_tokens)
    temperature = num("temperature", 1.0)
    top_p = num("top_p", 1.0)
    top_k = integer("top_k", -1)
    min_p = num("min_p", 0.0)
    freq = num("frequency_penalty", 0.0)
    pres = num("presence_penalty", 0.0)
    rep = num("repetition_penalty", 1.0)
    min_new = integer("min_new_tokens", 0)
    n = integer("n", 1)
    seed_v = sp.get("sampling_seed")
    if seed_v is not None and not _is_int(seed_v):
        raise _invalid_type("sampling_params.sampling_seed", seed_v, "an integer")
    stop = sp.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(s for s in stop if s)
    else:
        raise _invalid_type("sampling_params.stop", stop, "a string or a sequence of strings")
    stop_ids = sp.get("stop_token_ids")
    if stop_ids is None:
        stop_ids = []
    if not isinstance(stop_ids, list) or not all(_is_int(i) for i in stop_ids):
        raise _invalid_type("sampling_params.stop_token_ids", stop_ids,
                            "a sequence of integers")
    for flag in ("ignore_eos", "no_stop_trim", "skip_special_tokens"):
        v = sp.get(flag)
        if v is not None and type(v) is not bool:
            raise _invalid_type(f"sampling_params.{flag}", v, "a boolean")
    # SamplingParams.verify() messages
    if temperature < 0.0:
        raise _Invalid(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise _Invalid(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise _Invalid(f"min_p must be in [0, 1], got {min_p}.")
    if top_k < 1 and top_k != -1:
        raise _Invalid(f"top_k must be -1 (disable), or at least 1, got {top_k}.")
    if not -2.0 <= freq <= 2.0:
        raise _Invalid(f"frequency_penalty must be in [-2, 2], got {freq}.")
    if not -2.0 <= pres <= 2.0:
        raise _Invalid(f"presence_penalty must be in [-2, 2], got {pres}.")
    if not 0.0 <= rep <= 2.0:
        raise _Invalid(f"repetition_penalty must be in [0, 2], got {rep}.")
    if max_new < 0:
        raise _Invalid(f"max_new_tokens must be at least 0, got {max_new}.")
    if not 0 <= min_new <= max_new:
        raise _Invalid(f"min_new_tokens must be in [0, max_new_tokens], got {min_new}.")
    if n < 1:
        raise _Invalid(f"n must be at least 1, got {n}.")
    spec = SamplingSpec(max_tokens=max_new, temperature=temperature, stop=stops,
                        stop_token_ids=frozenset(stop_ids),
                        ignore_eos=bool(sp.get("ignore_eos", False)), min_tokens=min_new,
                        seed=seed_v, keep_stop=bool(sp.get("no_stop_trim", False)))
    return spec, n


class _GenRequest:
    """A parsed ``/generate`` body."""

    __slots__ = (
        "batch",
        "client_rids",
        "logprob",
        "logprob_start",
        "n",
        "prompt_texts",
        "prompts",
        "return_prompt_ids",
        "rids",
        "specs",
        "stream",
        "text_in_logprobs",
        "top_k_lp",
    )

    def __init__(self) -> None:
        self.batch = False
        self.prompts: list[list[int]] = []
        self.prompt_texts: list[str | None] = []
        self.specs: list[SamplingSpec] = []
        self.n = 1
        self.rids: list[str] = []
        self.client_rids: list[str | None] = []
        self.logprob = False
        self.logprob_start = -1
        self.top_k_lp = 0
        self.text_in_logprobs = False
        self.stream = False
        self.return_prompt_ids = False


def _first(v: Any) -> Any:
    if isinstance(v, list):
        return v[0] if v else None
    return v


def _parse(ctx: ServerContext, body: Any) -> _GenRequest:
    if not isinstance(body, dict):
        raise _invalid_type("body", body, "a map")
    req = _GenRequest()
    tok = ctx.tokenizer
    text = body.get("text")
    ids = body.get("input_ids")
    stream = body.get("stream", False)
    if type(stream) is not bool:
        raise _invalid_type("stream", stream, "a boolean")
    req.stream = stream
    if text is not None:
        if isinstance(text, str):
            req.prompts = [tok.encode(text)]
            req.prompt_texts = [text]
        elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            req.batch = True
            req.prompts = [tok.encode(t) for t in text]
            req.prompt_texts = list(text)
        else:
            raise _invalid_type("text", text, "a string or a sequence of strings")
    elif ids is not None:
        if not isinstance(ids, list):
            raise _invalid_type("input_ids", ids, "a sequence of integers")
        if not ids:
            raise _Invalid("input_ids cannot be empty.")
        if all(_is_int(i) for i in ids):
            req.prompts = [ids]
        elif all(isinstance(row, list) and all(_is_int(i) for i in row) for row in ids):
            req.batch = True
            req.prompts = ids
            if any(not row for row in ids):
                raise _Invalid("input_ids cannot be empty.")
        else:
            raise _invalid_type("input_ids", ids, "a sequence of integers")
        if any(i < 0 for row in req.prompts for i in row):
            raise _Invalid("input_ids must be non-negative token ids.")
        req.prompt_texts = [None] * len(req.prompts)
    else:
        raise _Invalid("Either text, input_ids or input_embeds should be provided.")
    nprompts = len(req.prompts)
    sp = body.get("sampling_params")
    if isinstance(sp, list):
        if len(sp) != nprompts:
            raise _Invalid("The length of sampling_params should be equal to the batch size.")
        parsed = [_sampling(ctx, s) for s in sp]
    else:
        parsed = [_sampling(ctx, sp)] * nprompts
    req.specs = [p[0] for p in parsed]
    req.n = parsed[0][1]
    if any(p[1] != req.n for p in parsed):
        raise _Invalid("The parallel sample size n must be the same for every prompt.")
    for key, expected in (("return_logprob", bool), ("return_text_in_logprobs", bool),
                          ("logprob_start_len", int), ("top_logprobs_num", int),
                          ("return_prompt_token_ids", bool)):
        v = _first(body.get(key))
        if v is not None and type(v) is not expected:
            raise _invalid_type(key, v, "a boolean" if expected is bool else "an integer")
    req.logprob = bool(_first(body.get("return_logprob")))
    ls = _first(body.get("logprob_start_len"))
    req.logprob_start = -1 if ls is None else int(ls)
    req.top_k_lp = int(_first(body.get("top_logprobs_num")) or 0)
    req.text_in_logprobs = bool(_first(body.get("return_text_in_logprobs")))
    req.return_prompt_ids = bool(_first(body.get("return_prompt_token_ids")))
    rid = body.get("rid")
    if rid is None:
        req.rids = [ctx.next_id() for _ in range(nprompts)]
        req.client_rids = [None] * nprompts
    elif isinstance(rid, str):
        req.rids = [rid] if nprompts == 1 else [f"{rid}_{i}" for i in range(nprompts)]
        req.client_rids = list(req.rids)
    elif isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        if len(rid) != nprompts:
            raise _Invalid("The rid should be a list with the same length as the batch.")
        if len(set(rid)) != len(rid):
            raise _Invalid(f"Duplicate request ids in the batch: {rid}")
        req.rids = list(rid)
        req.client_rids = list(rid)
    else:
        raise _invalid_type("rid", rid, "a string or a sequence of strings")
    ctxlen = ctx.config.context_length
    for prompt, spec in zip(req.prompts, req.specs, strict=True):
        plen = len(prompt)
        if plen >= ctxlen:
            raise _Invalid(f"The input ({plen} tokens) is longer than the model's context "
                           f"length ({ctxlen} tokens).")
        if plen + spec.max_tokens > ctxlen:
            raise _Invalid(
                "Requested token count exceeds the model's maximum context length of "
                f"{ctxlen} tokens. You requested a total of {plen + spec.max_tokens} tokens: "
                f"{plen} tokens from the input messages and {spec.max_tokens} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit.")
    return req


def _finish_reason(seq: SimSequence) -> dict[str, Any]:
    if seq.aborted is not None:
        return {"type": "abort", "message": seq.aborted, "status_code": None,
                "err_type": None}
    plan = seq.plan
    assert plan is not None
    if plan.finish == "length":
        return {"type": "length", "length": seq.max_tokens}
    return {"type": "stop", "matched": plan.matched}


class _Formatter:
    """Builds SGLang objects for the sequences of one request."""

    __slots__ = ("ctx", "incremental", "req", "sent")

    def __init__(self, ctx: ServerContext, req: _GenRequest) -> None:
        self.ctx = ctx
        self.req = req
        self.incremental = ctx.config.sglang_incremental_streaming
        self.sent: dict[int, int] = {}

    def obj(self, seq: SimSequence, k: int, *, final: bool, start: int = 0) -> dict[str, Any]:
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
        if final:
            now = self.ctx.engine.loop.time()
            meta["e2e_latency"] = now - seq.arrival
            meta["sim_timing"] = seq.timing(now)
        out: dict[str, Any] = {"text": text, "output_ids": ids[start:k], "meta_info": meta}
        if waiting_abort:
            meta["prompt_tokens"] = seq.prompt_tokens
        if req.return_prompt_ids:
            out["prompt_token_ids"] = list(seq.prompt_ids)
        return out


def _sequences(ctx: ServerContext, req: _GenRequest) -> list[SimSequence]:
    engine = ctx.engine
    seqs: list[SimSequence] = []
    for i, (prompt, spec) in enumerate(zip(req.prompts, req.specs, strict=True)):
        for j in range(req.n):
            rid = req.rids[i] if req.n == 1 else f"{req.rids[i]}_{j}"
            seqs.append(engine.new_sequence(rid, prompt, spec, index=len(seqs),
                                            sample_index=j, client_rid=req.client_rids[i],
                                            prompt_text=req.prompt_texts[i]))
    return seqs


def _fault_response(ctx: ServerContext, fault: Fault) -> web.Response:
    status = fault.status
    if status == 500:
        return web.Response(text="Internal Server Error", status=500)
    message = {429: "Too many requests (simulated fault).",
               503: "Service unavailable (simulated fault)."}.get(
        status, f"Simulated server error {status}.")
    resp = _flat_error(message, status, str(status))
    resp.headers.update(retry_after_headers(status, ctx.faults) or {})
    return resp


async def generate(request: web.Request) -> web.StreamResponse:
    """``POST /generate``."""
    ctx = _ctx(request)
    try:
        body = await read_json(request)
    except BadBody as exc:
        return _flat_error(str(exc), 400, "Bad Request")
    stream = isinstance(body, dict) and body.get("stream") is True
    try:
        req = _parse(ctx, body)
    except _Contract as exc:
        return json_response({"error": str(exc)}, 400)
    except _Invalid as exc:
        if stream:
            return await _stream_error(request, str(exc))
        return json_response({"error": {"message": str(exc)}}, 400)
    engine = ctx.engine
    await engine.gate(may_reject=False)
    fault = ctx.faults.draw() if ctx.faults.active else None
    if fault is not None:
        if fault.kind == "error":
            return _fault_response(ctx, fault)
        if fault.kind == "hang":
            await engine.hang()
            return _flat_error("Server is shutting down.", 503, "503")
        if fault.kind == "slow_first_byte":
            await asyncio.sleep(ctx.faults.slow_first_byte_s)
    seqs = _sequences(ctx, req)
    if engine.capacity_left() < len(seqs):
        message = "The request queue is full."
        if stream:
            return await _stream_error(request, message, code=503)
        return _flat_error(message, 503, "503")
    if fault is not None and fault.kind == "abort":
        for s in seqs:
            assert s.plan is not None
            s.abort_after = len(s.plan) // 2
    fmt = _Formatter(ctx, req)
    if req.stream:
        return await _stream(request, ctx, req, seqs, fmt, fault)
    if not await drive_all(engine, seqs, None):
        return _flat_error("The request queue is full.", 503, "503")
    objs = [fmt.obj(s, s.n_done, final=True) for s in seqs]
    payload: Any = objs if (req.batch or req.n > 1) else objs[0]
    if fault is not None:
        if fault.kind == "reset":
            reset_connection(request)
            return web.Response(status=500)
        if fault.kind in ("malformed", "truncate"):
            raw = orjson.dumps(payload)
            return web.Response(body=raw[:max(1, len(raw) // 2)], status=200,
                                content_type="application/json")
    return json_response(payload)


async def _stream_error(request: web.Request, message: str, code: int = 400) -> web.StreamResponse:
    sse = SSEWriter(request)
    await sse.prepare()
    await sse.send({"error": {"message": message, "type": "invalid_request_error"
                              if code == 400 else "service_unavailable", "code": code,
                              "retryable": code != 400}})
    return await sse.finish()


async def _stream(request: web.Request, ctx: ServerContext, req: _GenRequest,
                  seqs: list[SimSequence], fmt: _Formatter,
                  fault: Fault | None) -> web.StreamResponse:
    sse = SSEWriter(request)
    await sse.prepare()
    batch = req.batch or req.n > 1
    incremental = fmt.incremental
    kind = fault.kind if fault is not None else None
    total_planned = sum(len(s.plan) for s in seqs if s.plan is not None)
    cut_after = max(1, total_planned // 2) if kind in ("reset", "truncate") else -1
    state = {"emitted": 0, "stopped": 0}
    last: dict[int, int] = {}

    async def emit(seq: SimSequence, k: int) -> None:
        if state["stopped"]:
            return
        plan = seq.plan
        assert plan is not None
        prev = last.get(seq.index, 0)
        final = k >= len(plan) and seq.aborted is None
        o = fmt.obj(seq, k, final=final, start=prev if incremental else 0)
        if batch:
            o["index"] = seq.index
        last[seq.index] = k
        if kind == "malformed" and state["emitted"] == 0:
            await sse.send_raw(b'data: {"text": "' + orjson.dumps(o)[:20] + b"\n\n")
        else:
            await sse.send(o)
        state["emitted"] += k - prev
        if 0 < cut_after <= state["emitted"]:
            state["stopped"] = 1
            if kind == "reset":
                reset_connection(request)
            for s in seqs:
                ctx.engine.abort(s.rid, exact=True)

    ok = await drive_all(ctx.engine, seqs, emit)
    if state["stopped"]:
        if kind == "reset":
            return sse.response
        return await sse.finish(done=False)
    if not ok:
        await sse.send({"error": {"message": "The request queue is full.",
                                  "type": "service_unavailable", "code": 503,
                                  "retryable": True}})
        return await sse.finish()
    for seq in seqs:
        plan = seq.plan
        assert plan is not None
        if seq.aborted is not None or seq.n_done < len(plan) or seq.n_done == 0:
            start = last.get(seq.index, 0) if incremental else 0
            o = fmt.obj(seq, seq.n_done, final=True, start=min(start, seq.n_done))
            if batch:
                o["index"] = seq.index
            await sse.send(o)
    return await sse.finish()


# -- control endpoints ---------------------------------------------------------------------


async def health(_: web.Request) -> web.Response:
    """``GET /health`` and ``/health_generate``: 200 with an empty body."""
    return web.Response(status=200)


async def model_info(request: web.Request) -> web.Response:
    """``GET /get_model_info`` and ``/model_info``."""
    ctx = _ctx(request)
    name = ctx.config.model_name
    return json_response({
        "model_path": name, "tokenizer_path": name, "is_generation": True,
        "preferred_sampling_params": None, "weight_version": ctx.engine.weight_label,
        "served_model_name": name, "model_type": "sim", "architectures": ["SimForCausalLM"],
        "has_image_understanding": False, "has_audio_understanding": False,
    })


async def server_info(request: web.Request) -> web.Response:
    """``GET /get_server_info`` and ``/server_info``: server args + scheduler state."""
    ctx = _ctx(request)
    cfg = ctx.config
    engine = ctx.engine
    return json_response({
        "model_path": cfg.model_name, "tokenizer_path": cfg.model_name,
        "served_model_name": cfg.model_name, "host": ctx.host, "port": ctx.port,
        "tp_size": 1, "dp_size": 1, "context_length": cfg.context_length,
        "max_running_requests": cfg.max_num_seqs, "max_queued_requests": cfg.max_waiting,
        "page_size": cfg.block_size, "random_seed": cfg.seed, "enable_metrics": True,
        "status": "ready", "max_total_num_tokens": cfg.context_length * cfg.max_num_seqs,
        "max_req_input_len": cfg.context_length - 1,
        "internal_states": [{
            "last_gen_throughput": _throughput(ctx),
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity":
                             cfg.context_length * cfg.max_num_seqs},
            "load": engine.running + engine.num_waiting,
        }],
        "version": cfg.sglang_version,
    })


def _throughput(ctx: ServerContext) -> float:
    engine = ctx.engine
    up = engine.loop.time() - engine.started_at
    return engine.metrics.generation_tokens / up if up > 0 else 0.0


async def flush_cache(request: web.Request) -> web.Response:
    """``POST|GET /flush_cache``: plain-text answer (400 while requests run)."""
    ctx = _ctx(request)
    if ctx.engine.running or ctx.engine.num_waiting:
        return web.Response(text="Cache not flushed. Please check backend logs for more "
                                 "details. (When there are running or waiting requests, the "
                                 "operation will not be performed.)\n", status=400)
    ctx.engine.cache.clear()
    return web.Response(text=_FLUSH_TEXT)


async def _optional_json(request: web.Request) -> dict[str, Any] | None:
    if not request.can_read_body:
        return {}
    try:
        body = await read_json(request)
    except BadBody:
        return None
    return body if isinstance(body, dict) else None


async def abort_request(request: web.Request) -> web.Response:
    """``POST /abort_request``: ``{"rid": prefix}`` or ``{"abort_all": true}``."""
    ctx = _ctx(request)
    body = await _optional_json(request)
    if body is None:
        return _flat_error("Invalid JSON body.", 400, "Bad Request")
    if body.get("abort_all"):
        ctx.engine.abort(None)
    else:
        rid = body.get("rid")
        if isinstance(rid, str) and rid:
            ctx.engine.abort(rid)
    return web.Response(status=200)


async def pause_generation(request: web.Request) -> web.Response:
    """``POST /pause_generation``: ``{"mode": "abort"|"retract"|"in_place"}`` (abort)."""
    ctx = _ctx(request)
    body = await _optional_json(request)
    if body is None:
        return _flat_error("Invalid JSON body.", 400, "Bad Request")
    mode = body.get("mode", "abort") or "abort"
    modes: dict[str, PauseMode] = {"abort": "abort", "retract": "keep", "in_place": "keep"}
    if mode not in modes:
        return json_response({"error": {"message": f"Invalid mode: {mode!r}. Expected one of "
                                                   "'abort', 'retract', 'in_place'."}}, 400)
    await ctx.engine.pause(modes[mode])
    return json_response({"message": "Generation paused successfully.", "status": "ok"})


async def continue_generation(request: web.Request) -> web.Response:
    """``POST /continue_generation``."""
    _ctx(request).engine.resume()
    return json_response({"message": "Generation continued successfully.", "status": "ok"})


async def update_weights_from_disk(request: web.Request) -> web.Response:
    """``POST /update_weights_from_disk``: bumps the weight version."""
    ctx = _ctx(request)
    body = await _optional_json(request)
    if body is None:
        return _flat_error("Invalid JSON body.", 400, "Bad Request")
    path = body.get("model_path")
    if not isinstance(path, str) or not path:
        return _flat_error("1 validation error: model_path Field required", 400, "Bad Request")
    version = body.get("weight_version")
    if version is not None and not isinstance(version, str):
        return _flat_error("1 validation error: weight_version Input should be a valid string",
                           400, "Bad Request")
    engine = ctx.engine
    if body.get("abort_all_requests"):
        engine.abort(None)
    if ctx.config.weight_update_s > 0 and not ctx.config.zero_latency:
        await asyncio.sleep(ctx.config.weight_update_s * ctx.config.time_scale)
    engine.weight_version += 1
    engine.weight_label = version if version is not None else str(engine.weight_version)
    return json_response({"success": True, "message": "Succeeded to update model weights.",
                          "num_paused_requests": 0})


async def update_weight_version(request: web.Request) -> web.Response:
    """``POST /update_weight_version``: ``{"new_version": "v5"}``."""
    ctx = _ctx(request)
    body = await _optional_json(request)
    new = None if body is None else body.get("new_version")
    if not isinstance(new, str) or not new:
        return json_response({"success": False, "message": "new_version must be a string"},
                             400)
    if body and body.get("abort_all_requests", True):
        ctx.engine.abort(None)
    ctx.engine.weight_version += 1
    ctx.engine.weight_label = new
    return json_response({"success": True, "message": f"Weight version updated to {new}",
                          "new_version": new})


async def get_weight_version(request: web.Request) -> web.Response:
    """``GET /get_weight_version``."""
    return json_response({"weight_version": _ctx(request).engine.weight_label})


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``."""
    ctx = _ctx(request)
    name = ctx.config.model_name
    return json_response({"object": "list", "data": [{
        "id": name, "object": "model", "created": ctx.created, "owned_by": "sglang",
        "root": name, "parent": None, "max_model_len": ctx.config.context_length}]})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text with ``sglang:*`` names."""
    ctx = _ctx(request)
    engine = ctx.engine
    cfg = ctx.config
    used = sum(s.prompt_tokens + s.n_done for s in engine.live if s.state == "running")
    cap = cfg.context_length * cfg.max_num_seqs
    text = render_sglang(engine.metrics, model=cfg.model_name, running=engine.running,
                         waiting=engine.num_waiting, paused=1 if engine.frozen else 0,
                         token_usage=used / cap, used_tokens=used,
                         gen_throughput=_throughput(ctx))
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type": "text/plain; version=0.0.4"})


def add_sglang_routes(app: web.Application) -> None:
    """Register every SGLang-flavoured route on ``app``."""
    r = app.router
    r.add_post("/generate", generate)
    r.add_put("/generate", generate)
    for path in ("/health", "/health_generate", "/ping"):
        r.add_get(path, health)
    r.add_get("/get_model_info", model_info)
    r.add_get("/model_info", model_info)
    r.add_get("/get_server_info", server_info)
    r.add_get("/server_info", server_info)
    r.add_post("/flush_cache", flush_cache)
    r.add_get("/flush_cache", flush_cache)
    r.add_post("/abort_request", abort_request)
    r.add_post("/pause_generation", pause_generation)
    r.add_post("/continue_generation", continue_generation)
    r.add_post("/update_weights_from_disk", update_weights_from_disk)
    r.add_post("/update_weight_version", update_weight_version)
    r.add_get("/get_weight_version", get_weight_version)
    r.add_get("/v1/models", models)
    r.add_get("/metrics", metrics)
