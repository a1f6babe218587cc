"""One recorded call re-issued: its requests rebuilt from the dump, then sent again.

A recorded call is replayed request by request as it was sent: one request per server
response (``segments``), each with the recorded prompt plus the output tokens recorded
before it, the recorded sampling parameters and **seed**, and the budget that response was
sent with — except that a response the server aborted is asked for exactly the tokens it
gave then (so the next request starts where the recorded one did).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, EngineError, truncate
from .._io import ModelRequest
from ..tracing.dumps import gconfig_of

if TYPE_CHECKING:
    from ..engines import InferenceEngine


@dataclass(slots=True)
class Replayed:
    """What one replay of a recorded call gave."""

    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: str | None = None
    server: str | None = None
    latency_s: float = math.nan
    ttft_s: float = math.nan
    text: str = ""
    error: str | None = None


def _is_missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def not_replayable(call: Mapping[str, Any]) -> str | None:
    """Why a recorded call cannot be re-sent at all, or ``None``."""
    if not call.get("prompt_ids") and not call.get("prompt_text"):
        return ("no prompt to send: the call was sent as text, the dump is text-free and the "
                "server returned no prompt token ids")
    segments: Sequence[Mapping[str, Any]] = call.get("segments") or ()
    if not call.get("prompt_ids") and len(segments) > 1:
        return "continued after an abort but no prompt token ids were recorded"
    return None


def _segments(call: Mapping[str, Any]) -> list[tuple[int, int]]:
    """``(prefix, max_new_tokens)`` of each request to send."""
    segments: Sequence[Mapping[str, Any]] = call.get("segments") or ()
    if not segments:  # a dump without per-response records (AReaL's): one request
        return [(0, int(call["sampling"].get("max_new_tokens") or 1))]
    out: list[tuple[int, int]] = []
    for seg in segments:
        budget = int(seg["n_tokens"]) if seg.get("stop_reason") == "abort" \
            else int(seg["max_new_tokens"])
        if budget > 0:
            out.append((int(seg["prefix"]), budget))
    return out


async def replay_call(engine: InferenceEngine, call: Mapping[str, Any]) -> Replayed:
    """Send a recorded call again (see the module docstring); errors are kept, not raised.

    Raises:
        ConfigError: the call cannot be replayed (:func:`not_replayable`).
    """
    why = not_replayable(call)
    if why is not None:
        raise ConfigError(why)
    g = gconfig_of(dict(call["sampling"]))
    prompt: list[int] = list(call.get("prompt_ids") or ())
    recorded: list[int] = list(call.get("output_ids") or ())
    out = Replayed()
    t0 = time.perf_counter()
    for prefix, budget in _segments(call):
        if prompt:
            req = ModelRequest(input_ids=prompt + recorded[:prefix],
                               gconfig=g.new(max_new_tokens=budget))
        else:
            req = ModelRequest(text=str(call["prompt_text"]), gconfig=g.new(max_new_tokens=budget))
        try:
            resp = await engine.generate_async(req)
        except (EngineError, ConfigError) as exc:
            out.error = truncate(f"{type(exc).__name__}: {exc}")
            break
        if math.isnan(out.ttft_s) and not math.isnan(resp.ttft):  # from the engine's start
            start = resp.start if resp.start >= t0 else time.perf_counter() - resp.latency
            out.ttft_s = start + resp.ttft - t0
        out.output_ids.extend(resp.output_tokens)
        out.logprobs.extend(resp.output_logprobs)
        out.text += resp.text or ""
        out.stop_reason = resp.stop_reason
        out.server = resp.server
    out.latency_s = time.perf_counter() - t0
    return out


def is_seeded(call: Mapping[str, Any]) -> bool:
    """Whether the call's sampling is reproducible by its parameters alone."""
    sampling = call.get("sampling") or {}
    greedy = bool(sampling.get("greedy")) or float(sampling.get("temperature", 1.0)) < 1e-5
    return greedy or not _is_missing(sampling.get("seed"))
