"""Parsing SGLang ``/generate`` bodies (0.5.23): the contract gate's type checks, then
``SamplingParams.verify`` and the tokenizer manager's checks, with their messages."""

from __future__ import annotations

import math
from typing import Any

from .._context import ServerContext
from .._generation import SamplingSpec, stop_strings

_SAMPLING_KEYS = (
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "min_new_tokens", "stop", "stop_token_ids",
    "stop_regex", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
    "no_stop_trim", "n", "json_schema", "regex", "ebnf", "structural_tag", "logit_bias",
    "stream_interval", "custom_params", "sampling_seed", "beam_width", "watermark", "choice",
    "max_thinking_tokens",
)
_SAMPLING_SET = frozenset(_SAMPLING_KEYS)


class Invalid(Exception):
    """A ``ValueError``-style rejection: 400 ``{"error": {"message"}}`` (SSE event if stream)."""


class Contract(Exception):
    """A 0.5.23 contract-gate rejection: 400 ``{"error": "<string>"}``."""


def _is_int(x: object) -> bool:
    return type(x) is int


def _is_num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _type_name(x: object) -> str:
    return {bool: "boolean", int: "integer", float: "floating point", str: "string",
            list: "sequence", dict: "map", type(None): "null"}.get(type(x), "value")


def invalid_type(field: str, value: object, expected: str) -> Contract:
    """A serde-style type error (the 0.5.23 contract gate's wording)."""
    return Contract(f"invalid type: {_type_name(value)} `{str(value)[:40]}`, expected "
                    f"{expected} at field `{field}`")


def _sampling(ctx: ServerContext, sp: Any) -> tuple[SamplingSpec, int]:
    if sp is None:
        sp = {}
    if not isinstance(sp, dict):
        raise invalid_type("sampling_params", sp, "a map")
    for key in sp:
        if key not in _SAMPLING_SET:
            raise Contract(f"unknown field `{key}`, expected one of "
                           + ", ".join(f"`{k}`" for k in _SAMPLING_KEYS))
    cfg = ctx.config

    def num(name: str, default: float) -> float:
        v = sp.get(name)
        if v is None:
            return default
        if not _is_num(v) or type(v) is bool:
            raise invalid_type(f"sampling_params.{name}", v, "a number")
        return float(v)

    def integer(name: str, default: int) -> int:
        v = sp.get(name)
        if v is None:
            return default
        if not _is_int(v):
            raise invalid_type(f"sampling_params.{name}", v, "an integer")
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
        raise invalid_type("sampling_params.sampling_seed", seed_v, "an integer")
    stop = sp.get("stop")
    stops = stop_strings(stop)
    if stops is None:
        raise invalid_type("sampling_params.stop", stop, "a string or a sequence of strings")
    stop_ids = sp.get("stop_token_ids")
    if stop_ids is None:
        stop_ids = []
    if not isinstance(stop_ids, list) or not all(_is_int(i) for i in stop_ids):
        raise invalid_type("sampling_params.stop_token_ids", stop_ids,
                            "a sequence of integers")
    for flag in ("ignore_eos", "no_stop_trim", "skip_special_tokens"):
        v = sp.get(flag)
        if v is not None and type(v) is not bool:
            raise invalid_type(f"sampling_params.{flag}", v, "a boolean")
    # SamplingParams.verify() messages
    if temperature < 0.0:
        raise Invalid(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise Invalid(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise Invalid(f"min_p must be in [0, 1], got {min_p}.")
    if top_k < 1 and top_k != -1:
        raise Invalid(f"top_k must be -1 (disable), or at least 1, got {top_k}.")
    if not -2.0 <= freq <= 2.0:
        raise Invalid(f"frequency_penalty must be in [-2, 2], got {freq}.")
    if not -2.0 <= pres <= 2.0:
        raise Invalid(f"presence_penalty must be in [-2, 2], got {pres}.")
    if not 0.0 <= rep <= 2.0:
        raise Invalid(f"repetition_penalty must be in [0, 2], got {rep}.")
    if max_new < 0:
        raise Invalid(f"max_new_tokens must be at least 0, got {max_new}.")
    if not 0 <= min_new <= max_new:
        raise Invalid(f"min_new_tokens must be in [0, max_new_tokens], got {min_new}.")
    if n < 1:
        raise Invalid(f"n must be at least 1, got {n}.")
    spec = SamplingSpec(max_tokens=max_new, temperature=temperature, stop=stops,
                        stop_token_ids=frozenset(stop_ids),
                        ignore_eos=bool(sp.get("ignore_eos", False)), min_tokens=min_new,
                        seed=seed_v, keep_stop=bool(sp.get("no_stop_trim", False)))
    return spec, n


class GenRequest:
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


def parse_generate(ctx: ServerContext, body: Any) -> GenRequest:
    """Parse a ``/generate`` body.

    Raises:
        Contract: a field of the wrong type or an unknown sampling field.
        Invalid: a value SGLang rejects.
    """
    if not isinstance(body, dict):
        raise invalid_type("body", body, "a map")
    req = GenRequest()
    tok = ctx.tokenizer
    text = body.get("text")
    ids = body.get("input_ids")
    stream = body.get("stream", False)
    if type(stream) is not bool:
        raise invalid_type("stream", stream, "a boolean")
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
            raise invalid_type("text", text, "a string or a sequence of strings")
    elif ids is not None:
        if not isinstance(ids, list):
            raise invalid_type("input_ids", ids, "a sequence of integers")
        if not ids:
            raise Invalid("input_ids cannot be empty.")
        if all(_is_int(i) for i in ids):
            req.prompts = [ids]
        elif all(isinstance(row, list) and all(_is_int(i) for i in row) for row in ids):
            req.batch = True
            req.prompts = ids
            if any(not row for row in ids):
                raise Invalid("input_ids cannot be empty.")
        else:
            raise invalid_type("input_ids", ids, "a sequence of integers")
        if any(i < 0 for row in req.prompts for i in row):
            raise Invalid("input_ids must be non-negative token ids.")
        req.prompt_texts = [None] * len(req.prompts)
    else:
        raise Invalid("Either text, input_ids or input_embeds should be provided.")
    nprompts = len(req.prompts)
    sp = body.get("sampling_params")
    if isinstance(sp, list):
        if len(sp) != nprompts:
            raise Invalid("The length of sampling_params should be equal to the batch size.")
        parsed = [_sampling(ctx, s) for s in sp]
    else:
        parsed = [_sampling(ctx, sp)] * nprompts
    req.specs = [p[0] for p in parsed]
    req.n = parsed[0][1]
    if any(p[1] != req.n for p in parsed):
        raise Invalid("The parallel sample size n must be the same for every prompt.")
    for key, expected in (("return_logprob", bool), ("return_text_in_logprobs", bool),
                          ("logprob_start_len", int), ("top_logprobs_num", int),
                          ("return_prompt_token_ids", bool)):
        v = _first(body.get(key))
        if v is not None and type(v) is not expected:
            raise invalid_type(key, v, "a boolean" if expected is bool else "an integer")
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
            raise Invalid("The rid should be a list with the same length as the batch.")
        if len(set(rid)) != len(rid):
            raise Invalid(f"Duplicate request ids in the batch: {rid}")
        req.rids = list(rid)
        req.client_rids = list(rid)
    else:
        raise invalid_type("rid", rid, "a string or a sequence of strings")
    ctxlen = ctx.config.context_length
    for prompt, spec in zip(req.prompts, req.specs, strict=True):
        plen = len(prompt)
        if plen >= ctxlen:
            raise Invalid(f"The input ({plen} tokens) is longer than the model's context "
                           f"length ({ctxlen} tokens).")
        if plen + spec.max_tokens > ctxlen:
            raise Invalid(
                "Requested token count exceeds the model's maximum context length of "
                f"{ctxlen} tokens. You requested a total of {plen + spec.max_tokens} tokens: "
                f"{plen} tokens from the input messages and {spec.max_tokens} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit.")
    return req
