"""Parsing vLLM request bodies: typed fields, ``SamplingParams`` checks, prompts, context length.

Values are coerced as pydantic does in vLLM 0.32 (``"5"`` is an int, ``"yes"`` a bool) and
rejected with its messages. Unknown top-level fields are ignored.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from .._context import ServerContext
from .._generation import SamplingSpec, stop_strings
from .._http_util import BadBody, read_json
from .errors import ApiError, body_error, param_error, validation_error

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def get_int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if type(v) is int:
        return v
    if type(v) is float:
        if v.is_integer():
            return int(v)
        raise validation_error(name, v, "int_from_float",
                          "Input should be a valid integer, got a number with a fractional part")
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            raise validation_error(name, v, "int_parsing", "Input should be a valid integer, "
                              "unable to parse string as an integer") from None
    raise validation_error(name, v, "int_type", "Input should be a valid integer")


def get_float(body: dict[str, Any], name: str, default: float) -> float:
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
        raise validation_error(name, v, "float_parsing",
                          "Input should be a valid number, unable to parse string as a number")
    raise validation_error(name, v, "float_type", "Input should be a valid number")


def get_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if type(v) is bool:
        return v
    if type(v) is int and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise validation_error(name, v, "bool_parsing",
                      "Input should be a valid boolean, unable to interpret input")


class CommonParams:
    """The fields completions and chat share: sampling values and stream options."""

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


def parse_common(ctx: ServerContext, body: dict[str, Any], max_key: tuple[str, ...],
            default_max: int | None) -> CommonParams:
    c = CommonParams()
    model = body.get("model")
    if model is not None and model != ctx.config.model_name:
        raise ApiError(f"The model `{model}` does not exist. Valid aliases: "
                        f"{ctx.config.model_name}.", 404, "NotFoundError", "model")
    c.stream = get_bool(body, "stream")
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise validation_error("stream_options", so, "model_type",
                              "Input should be a valid dictionary")
        if not c.stream:
            raise param_error("Stream options can only be defined when `stream=True`.",
                               "stream_options")
        c.include_usage = bool(so.get("include_usage"))
        c.continuous_usage = bool(so.get("continuous_usage_stats"))
    max_tokens: int | None = None
    for key in max_key:
        max_tokens = get_int(body, key, None)
        if max_tokens is not None:
            break
    c.max_tokens = default_max if max_tokens is None else max_tokens
    temperature = get_float(body, "temperature", 1.0)
    top_p = get_float(body, "top_p", 1.0)
    top_k = get_int(body, "top_k", 0)
    min_p = get_float(body, "min_p", 0.0)
    rep = get_float(body, "repetition_penalty", 1.0)
    pres = get_float(body, "presence_penalty", 0.0)
    freq = get_float(body, "frequency_penalty", 0.0)
    n = get_int(body, "n", 1)
    min_tokens = get_int(body, "min_tokens", 0)
    seed = get_int(body, "seed", None)
    assert n is not None and top_k is not None and min_tokens is not None
    stop = body.get("stop")
    stops = stop_strings(stop)
    if stops is None:
        raise validation_error("stop", stop, "list_type", "Input should be a valid list")
    stop_ids = body.get("stop_token_ids")
    if stop_ids is None:
        stop_ids = []
    if not isinstance(stop_ids, list):
        raise validation_error("stop_token_ids", stop_ids, "list_type",
                          "Input should be a valid list")
    for k, i in enumerate(stop_ids):
        if type(i) is not int:
            raise validation_error(f"stop_token_ids.{k}", i, "int_parsing", "Input should be a "
                              "valid integer, unable to parse string as an integer")
    ignore_eos = get_bool(body, "ignore_eos")
    keep_stop = get_bool(body, "include_stop_str_in_output")
    c.return_token_ids = get_bool(body, "return_token_ids")
    c.tokens_as_ids = get_bool(body, "return_tokens_as_token_ids")
    rid = body.get("request_id")
    c.request_id = rid if isinstance(rid, str) and rid else None
    # SamplingParams._verify_args
    if n < 1:
        raise ApiError(f"n must be at least 1, got {n}.")
    if not -2.0 <= pres <= 2.0:
        raise ApiError(f"presence_penalty must be in [-2, 2], got {pres}.")
    if not -2.0 <= freq <= 2.0:
        raise ApiError(f"frequency_penalty must be in [-2, 2], got {freq}.")
    if rep <= 0.0:
        raise ApiError(f"repetition_penalty must be greater than zero, got {rep}.")
    if temperature < 0.0:
        raise param_error(f"temperature must be non-negative, got {temperature}.",
                           "temperature", temperature)
    if not 0.0 < top_p <= 1.0:
        raise param_error(f"top_p must be in (0, 1], got {top_p}.", "top_p", top_p)
    if top_k < -1:
        raise ApiError(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    if not 0.0 <= min_p <= 1.0:
        raise ApiError(f"min_p must be in [0, 1], got {min_p}.")
    if c.max_tokens is not None and c.max_tokens < 1:
        raise param_error(f"max_tokens must be at least 1, got {c.max_tokens}.",
                           "max_tokens", c.max_tokens)
    if min_tokens < 0:
        raise ApiError(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if c.max_tokens is not None and min_tokens > c.max_tokens:
        raise ApiError(f"min_tokens must be less than or equal to max_tokens={c.max_tokens}, "
                        f"got {min_tokens}.")
    c.n = n
    c.spec_kw = {"temperature": temperature, "stop": stops,
                 "stop_token_ids": frozenset(stop_ids), "ignore_eos": ignore_eos,
                 "min_tokens": min_tokens, "seed": seed, "keep_stop": keep_stop}
    return c


def sampling_spec(ctx: ServerContext, c: CommonParams, prompt_len: int) -> SamplingSpec:
    ctxlen = ctx.config.context_length
    if prompt_len >= ctxlen:
        raise ApiError(f"This model's maximum context length is {ctxlen} tokens. However, "
                        f"your prompt contains {prompt_len} input tokens, which exceeds this "
                        "limit even without any output tokens. Please reduce the length of the "
                        "input prompt. (parameter=input_tokens, value={prompt_len})".format(
                            prompt_len=prompt_len), 400, param="input_tokens")
    room = ctxlen - prompt_len
    max_tokens = room if c.max_tokens is None else c.max_tokens
    if max_tokens > room:
        if ctx.config.max_tokens_policy == "reject":
            raise ApiError(f"'max_tokens' or 'max_completion_tokens' is too large: "
                            f"{max_tokens}. This model's maximum context length is {ctxlen} "
                            f"tokens and your request has {prompt_len} input tokens "
                            f"({max_tokens} > {ctxlen} - {prompt_len}).")
        if max_tokens > ctxlen:
            raise param_error(f"max_tokens={max_tokens} cannot be greater than "
                               f"max_model_len={ctxlen}. Please request fewer output tokens.",
                               "max_tokens", max_tokens)
        max_tokens = room
    return SamplingSpec(max_tokens=max_tokens, **c.spec_kw)


def parse_prompts(ctx: ServerContext, body: dict[str, Any]) -> tuple[list[list[int]],
                                                                  list[str | None]]:
    p = body.get("prompt")
    tok = ctx.tokenizer
    empty = param_error("Either prompt or prompt_embeds must be provided and non-empty.",
                         "prompt")
    if p is None:
        raise empty
    if isinstance(p, str):
        if not p:
            raise empty
        return [tok.encode(p)], [p]
    if isinstance(p, list):
        if not p:  # 0.32 gets past validation and fails in the prompt renderer
            raise ApiError("You must pass at least one prompt")
        if all(type(i) is int for i in p):
            for k, i in enumerate(p):
                if i < 0:
                    raise validation_error(f"prompt.{k}", i, "greater_than_equal",
                                      "Input should be greater than or equal to 0")
            return [p], [None]
        if all(isinstance(s, str) for s in p):
            if any(not s for s in p):
                raise empty
            return [tok.encode(s) for s in p], list(p)
        if all(isinstance(r, list) and r and all(type(i) is int and i >= 0 for i in r)
               for r in p):
            return [list(r) for r in p], [None] * len(p)
    raise validation_error("prompt", p, "string_type",
                      "Input should be a valid string, list of ints or list of strings")


async def body_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or the error vLLM gives for it."""
    try:
        body = await read_json(request)
    except BadBody as exc:
        raise body_error(exc) from None
    if not isinstance(body, dict):
        raise validation_error("body", body, "model_attributes_type",
                          "Input should be a valid dictionary or object to extract fields from")
    return body
