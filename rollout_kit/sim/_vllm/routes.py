"""vLLM's operational and dev-mode routes (models, version, load, metrics, tokenize, pause,
abort, weights) and the route table of the vLLM flavour."""

from __future__ import annotations

from aiohttp import web

from .._exposition import VLLMCollector, metrics_response
from .._http_util import ctx_of, empty_ok, json_response, optional_json
from .._state import PauseMode
from .chat import chat_completions, tokenize_messages
from .completions import completions
from .errors import ApiError, error_response, validation_error


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``."""
    ctx = ctx_of(request)
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
    return json_response({"version": ctx_of(request).config.vllm_version})


async def load(request: web.Request) -> web.Response:
    """``GET /load``: in-flight sequences."""
    e = ctx_of(request).engine
    return json_response({"server_load": e.running + e.num_waiting})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text with ``vllm:*`` names."""
    return metrics_response(VLLMCollector(ctx_of(request)))


async def tokenize(request: web.Request) -> web.Response:
    """``POST /tokenize``: ``{"prompt": str}`` or ``{"messages", "tools"?,
    "add_generation_prompt"?}`` (rendered by the chat template, the ids the chat endpoint
    uses) → ``{"count", "max_model_len", "tokens", "token_strs"}``."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    if body is not None and body.get("messages") is not None:
        try:
            ids = tokenize_messages(ctx, body)
        except ApiError as exc:
            return error_response(ctx, exc)
        return json_response({"count": len(ids), "max_model_len": ctx.config.context_length,
                              "tokens": ids, "token_strs": None})
    prompt = None if body is None else body.get("prompt")
    if not isinstance(prompt, str):
        return error_response(ctx, validation_error("prompt", prompt, "missing",
                                                    "Field required"))
    ids = ctx.tokenizer.encode(prompt)
    return json_response({"count": len(ids), "max_model_len": ctx.config.context_length,
                          "tokens": ids, "token_strs": None})


async def detokenize(request: web.Request) -> web.Response:
    """``POST /detokenize``: ``{"tokens": [...]}`` → ``{"prompt"}``."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    tokens = None if body is None else body.get("tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        return error_response(ctx, validation_error("tokens", tokens, "missing",
                                                    "Field required"))
    return json_response({"prompt": ctx.tokenizer.decode(tokens)})


async def pause(request: web.Request) -> web.Response:
    """``POST /pause?mode=abort|wait|keep`` (dev mode)."""
    ctx = ctx_of(request)
    mode = request.query.get("mode")
    if mode is None:
        legacy = request.query.get("wait_for_inflight_requests", "false").lower()
        mode = "wait" if legacy in ("1", "true") else "abort"
    if mode not in ("abort", "wait", "keep"):  # a FastAPI query-parameter validation error
        expected = "'abort', 'wait' or 'keep'"
        return error_response(ctx, ApiError(
            f"1 validation error:\n  {{'type': 'literal_error', 'loc': 'query.mode', "
            f"'msg': \"Input should be {expected}\", 'input': {mode[:40]!r}, "
            f"'ctx': {{'expected': \"{expected}\"}}}}", 400, "Bad Request", "query.mode"))
    modes: dict[str, PauseMode] = {"abort": "abort", "wait": "wait", "keep": "keep"}
    await ctx.engine.pause(modes[mode])
    return json_response({"status": "paused"})


async def resume(request: web.Request) -> web.Response:
    """``POST /resume`` (dev mode)."""
    ctx_of(request).engine.resume()
    return json_response({"status": "resumed"})


async def is_paused(request: web.Request) -> web.Response:
    """``GET /is_paused`` (dev mode)."""
    return json_response({"is_paused": ctx_of(request).engine.paused})


async def abort_requests(request: web.Request) -> web.Response:
    """``POST /abort_requests`` ``{"request_ids": [...]}`` (empty or missing = all)."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    if body is None:
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
    ctx_of(request).engine.cache.clear()
    return json_response({"success": True})


async def update_weight_version(request: web.Request) -> web.Response:
    """``POST /update_weight_version`` ``{"new_version": "v5"}`` (0.33 dev mode)."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    new = None if body is None else body.get("new_version")
    if not isinstance(new, str) or not new:
        return json_response({"error": "new_version must be a non-empty string."}, 400)
    ctx.engine.weight_version += 1
    ctx.engine.weight_label = new
    return json_response({"success": True, "new_version": new})


async def weight_info(request: web.Request) -> web.Response:
    """``GET /weight_info``."""
    return json_response({"weight_version": ctx_of(request).engine.weight_label})


def add_vllm_routes(app: web.Application) -> None:
    """Register every vLLM-flavoured route on ``app``."""
    r = app.router
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/health", empty_ok)
    r.add_get("/ping", empty_ok)
    r.add_post("/ping", empty_ok)
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
