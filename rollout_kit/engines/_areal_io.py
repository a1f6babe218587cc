"""AReaL's request type, read at the workflow boundary (``engine.agenerate``).

AReaL workflows build ``areal.api.io_struct.ModelRequest`` objects whose ``gconfig`` is AReaL's
``GenerationHyperparameters``. :func:`request_of` reads them attribute by attribute — ``areal``
is never imported — and maps every field to what the server receives, or refuses it with a
:class:`~rollout_kit.ConfigError` naming the field, so nothing a workflow asked for is dropped
without a word.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._config import GenerationConfig
from .._errors import ConfigError
from .._io import ModelRequest

#: AReaL's ``top_k`` default (1e8) and anything at least as large means "no top-k".
_NO_TOP_K = 1e8

#: ``GenerationHyperparameters`` fields with a rollout_kit counterpart of the same meaning.
_SAME = ("n_samples", "max_new_tokens", "min_new_tokens", "max_tokens", "greedy", "top_p",
         "temperature", "ignore_eos", "skip_special_tokens", "frequency_penalty", "seed")
#: fields read with a conversion (below) or refused when set. ``lora_name`` is read by AReaL's
#: engines only when the engine itself was configured with ``use_lora`` (its default names a
#: LoRA that is never sent otherwise); rollout_kit's engines have no LoRA mode, so it is not
#: sent either.
_CONVERTED = frozenset({"top_k", "stop", "stop_token_ids", "lora_name", "use_beam_search"})
_KNOWN = frozenset(_SAME) | _CONVERTED

_REQUEST_HINT = ("agenerate takes a ModelRequest: rollout_kit's, or AReaL's (rid, input_ids, "
                 "gconfig, metadata, tokenizer)")


def _fields_of(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    try:
        return dict(vars(obj))
    except TypeError:
        raise ConfigError(f"gconfig must be a GenerationConfig or AReaL's "
                          f"GenerationHyperparameters, got {type(obj).__name__}") from None


def _top_k(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"gconfig.top_k must be a number, got {value!r}")
    if value == -1 or value >= _NO_TOP_K:
        return -1
    if value < 1 or value != int(value):
        raise ConfigError(f"gconfig.top_k must be -1, >= 1e8 (no top-k) or an integer >= 1, "
                          f"got {value!r}")
    return int(value)


def _key(g: Any) -> tuple[Any, ...] | None:
    """A hashable key of ``g``'s field values (lists as tuples), or ``None``."""
    d = getattr(g, "__dict__", None)
    if d is None:
        return None
    key = (type(g), *((k, tuple(v) if type(v) is list else v) for k, v in d.items()))
    try:
        hash(key)
    except TypeError:
        return None
    return key


#: converted configs by their AReaL values: AReaL's workflows build a new
#: ``GenerationHyperparameters`` per request (``gconfig.new(n_samples=1)``) with the same
#: values, and converting one costs ~35 µs against ~3 µs for the lookup
#: (``bench/bench_areal_workflows.py``).
_CONVERTED_CACHE: dict[tuple[Any, ...], GenerationConfig] = {}
_CACHE_SIZE = 256


def gconfig_of(g: Any) -> GenerationConfig:
    """AReaL's ``GenerationHyperparameters`` (or any object with its field names) as a
    :class:`GenerationConfig`.

    Raises:
        ConfigError: a field rollout_kit cannot send is set (``use_beam_search``, a field
            it does not know with a value other than its off value), or a value is out of
            range.
    """
    if type(g) is GenerationConfig:
        return g
    key = _key(g)
    if key is not None:
        done = _CONVERTED_CACHE.get(key)
        if done is not None:
            return done
    out = _convert(g)
    if key is not None:
        if len(_CONVERTED_CACHE) >= _CACHE_SIZE:
            _CONVERTED_CACHE.clear()
        _CONVERTED_CACHE[key] = out
    return out


def _convert(g: Any) -> GenerationConfig:
    values = _fields_of(g)
    if values.get("use_beam_search"):
        raise ConfigError("gconfig.use_beam_search=True: beam search is not supported (the "
                          "SGLang and vLLM sampling APIs rollout_kit drives have none)")
    unknown = sorted(k for k, v in values.items() if k not in _KNOWN and v not in (None, 0, "")
                     and v != [] and v is not False)
    if unknown:
        raise ConfigError(f"gconfig field(s) {', '.join(unknown)} are set, and rollout_kit "
                          f"does not know how to send them; leave them at their off value")
    kw = {k: values[k] for k in _SAME if k in values}
    if "top_k" in values:
        kw["top_k"] = _top_k(values["top_k"])
    stop = values.get("stop")
    if stop:
        kw["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
    if values.get("stop_token_ids"):
        kw["stop_token_ids"] = tuple(values["stop_token_ids"])
    try:
        return GenerationConfig(**kw)
    except TypeError as exc:  # a value of the wrong type reached a comparison
        raise ConfigError(f"gconfig: {exc}") from None


def _refuse_vision(req: Any) -> None:
    if getattr(req, "image_data", None):
        raise ConfigError("ModelRequest.image_data is set: vision requests are not supported "
                          "(rollout_kit sends token ids, text or chat messages)")
    if getattr(req, "vision_msg_vllm", None):
        raise ConfigError("ModelRequest.vision_msg_vllm is set: vision requests are not "
                          "supported (rollout_kit sends token ids, text or chat messages)")


def request_of(req: Any) -> tuple[ModelRequest, Any]:
    """``req`` as rollout_kit's :class:`~rollout_kit.ModelRequest`, with AReaL's tokenizer.

    rollout_kit's own request passes through as it is. AReaL's keeps its ``rid`` (sticky
    routing, abort), ``input_ids``, ``metadata`` and ``gconfig`` (:func:`gconfig_of`); its
    ``tokenizer`` is returned to be set on the response (AReaL's ``end_with_stop`` reads it).

    Raises:
        ConfigError: not a request, a vision request, MoE routing asked for
            (``metadata["return_routed_experts"]``), or a field :func:`gconfig_of` refuses.
    """
    if type(req) is ModelRequest:
        return req, None
    try:
        rid, ids, g = req.rid, req.input_ids, req.gconfig
    except AttributeError:
        raise ConfigError(f"{_REQUEST_HINT}; got {type(req).__name__}") from None
    _refuse_vision(req)
    metadata = dict(getattr(req, "metadata", None) or {})
    if metadata.get("return_routed_experts"):
        raise ConfigError("ModelRequest.metadata['return_routed_experts'] is set: MoE routing "
                          "records are not returned by rollout_kit's engines")
    if isinstance(ids, str) or not hasattr(ids, "__iter__"):
        raise ConfigError(f"ModelRequest.input_ids must be a list of ints, got "
                          f"{type(ids).__name__}")
    new = ModelRequest(rid=str(rid), input_ids=list(ids), gconfig=gconfig_of(g),
                       metadata=metadata)
    return new, getattr(req, "tokenizer", None)
