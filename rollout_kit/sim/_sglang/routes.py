"""SGLang's control endpoints (model and server info, cache, abort, pause, weights, metrics)
and the route table of the SGLang flavour."""

from __future__ import annotations

import asyncio

from aiohttp import web

from .._exposition import SGLangCollector, gen_throughput, metrics_response
from .._http_util import ctx_of, empty_ok, json_response, optional_json
from .._state import PauseMode
from .._vllm.chat import serve_chat
from .generate import flat_error, generate

_FLUSH_TEXT = ("Cache flushed.\nPlease check backend logs for more details. (When there are "
               "running or waiting requests, the operation will not be performed.)\n")


async def model_info(request: web.Request) -> web.Response:
    """``GET /get_model_info`` and ``/model_info``."""
    ctx = ctx_of(request)
    name = ctx.config.model_name
    return json_response({
        "model_path": name, "tokenizer_path": name, "is_generation": True,
        "preferred_sampling_params": None, "weight_version": ctx.engine.weight_label,
        "served_model_name": name, "model_type": "sim", "architectures": ["SimForCausalLM"],
        "has_image_understanding": False, "has_audio_understanding": False,
    })


async def server_info(request: web.Request) -> web.Response:
    """``GET /get_server_info`` and ``/server_info``: server args + scheduler state."""
    ctx = ctx_of(request)
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
            "last_gen_throughput": gen_throughput(ctx),
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity":
                             cfg.context_length * cfg.max_num_seqs},
            "load": engine.running + engine.num_waiting,
        }],
        "version": cfg.sglang_version,
    })


async def flush_cache(request: web.Request) -> web.Response:
    """``POST|GET /flush_cache``: plain-text answer (400 while requests run)."""
    ctx = ctx_of(request)
    if ctx.engine.running or ctx.engine.num_waiting:
        return web.Response(text="Cache not flushed. Please check backend logs for more "
                                 "details. (When there are running or waiting requests, the "
                                 "operation will not be performed.)\n", status=400)
    ctx.engine.cache.clear()
    return web.Response(text=_FLUSH_TEXT)


async def abort_request(request: web.Request) -> web.Response:
    """``POST /abort_request``: ``{"rid": prefix}`` or ``{"abort_all": true}``."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    if body is None:
        return flat_error("Invalid JSON body.", 400, "Bad Request")
    if body.get("abort_all"):
        ctx.engine.abort(None)
    else:
        rid = body.get("rid")
        if isinstance(rid, str) and rid:
            ctx.engine.abort(rid)
    return web.Response(status=200)


async def pause_generation(request: web.Request) -> web.Response:
    """``POST /pause_generation``: ``{"mode": "abort"|"retract"|"in_place"}`` (abort)."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    if body is None:
        return flat_error("Invalid JSON body.", 400, "Bad Request")
    mode = body.get("mode", "abort") or "abort"
    modes: dict[str, PauseMode] = {"abort": "abort", "retract": "keep", "in_place": "keep"}
    if mode not in modes:
        return json_response({"error": {"message": f"Invalid mode: {mode!r}. Expected one of "
                                                   "'abort', 'retract', 'in_place'."}}, 400)
    await ctx.engine.pause(modes[mode])
    return json_response({"message": "Generation paused successfully.", "status": "ok"})


async def continue_generation(request: web.Request) -> web.Response:
    """``POST /continue_generation``."""
    ctx_of(request).engine.resume()
    return json_response({"message": "Generation continued successfully.", "status": "ok"})


async def update_weights_from_disk(request: web.Request) -> web.Response:
    """``POST /update_weights_from_disk``: bumps the weight version."""
    ctx = ctx_of(request)
    body = await optional_json(request)
    if body is None:
        return flat_error("Invalid JSON body.", 400, "Bad Request")
    path = body.get("model_path")
    if not isinstance(path, str) or not path:
        return flat_error("1 validation error: model_path Field required", 400, "Bad Request")
    version = body.get("weight_version")
    if version is not None and not isinstance(version, str):
        return flat_error("1 validation error: weight_version Input should be a valid string",
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
    ctx = ctx_of(request)
    body = await optional_json(request)
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
    return json_response({"weight_version": ctx_of(request).engine.weight_label})


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``."""
    ctx = ctx_of(request)
    name = ctx.config.model_name
    return json_response({"object": "list", "data": [{
        "id": name, "object": "model", "created": ctx.created, "owned_by": "sglang",
        "root": name, "parent": None, "max_model_len": ctx.config.context_length}]})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``: the OpenAI-compatible chat in SGLang's shapes (shared
    with the vLLM flavour's implementation; no token ids in streamed chunks)."""
    return await serve_chat(request, "sglang")


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text with ``sglang:*`` names."""
    return metrics_response(SGLangCollector(ctx_of(request)),
                            headers={"X-Content-Type": "text/plain; version=0.0.4"})


def add_sglang_routes(app: web.Application) -> None:
    """Register every SGLang-flavoured route on ``app``."""
    r = app.router
    r.add_post("/generate", generate)
    r.add_put("/generate", generate)
    for path in ("/health", "/health_generate", "/ping"):
        r.add_get(path, empty_ok)
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
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/metrics", metrics)
