"""What completions and chat share: admission and faults, sequences, finish reasons, text
deltas, usage, ``sim_timing`` and the system fingerprint (vLLM 0.32 shapes)."""

from __future__ import annotations

import zlib
from typing import Any

from aiohttp import web

from .._context import ServerContext
from .._fault_effects import draw_fault
from .._faults import Fault
from .._generation import SamplingSpec
from .._state import SimSequence
from .errors import PAUSED_MESSAGE, ApiError, error_response, fault_error, overloaded


async def gate_and_fault(ctx: ServerContext,
                         n_seqs: int) -> tuple[web.Response | None, Fault | None]:
    """Wait while paused (503 if the pause rejects), draw the fault, check the queue.

    Returns:
        ``(early answer, None)`` when the request ends here, else ``(None, fault)``.
    """
    engine = ctx.engine
    if not await engine.gate(may_reject=True):
        return error_response(ctx, ApiError(PAUSED_MESSAGE, 503,
                                            "ServiceUnavailableError")), None
    fault = await draw_fault(ctx) if ctx.faults.active else None
    if fault is not None:
        if fault.kind == "error":
            return fault_error(ctx, fault), None
        if fault.kind == "hang":
            return error_response(ctx, ApiError("Server is shutting down.", 503)), None
    if engine.capacity_left() < n_seqs:
        return error_response(ctx, overloaded(), {"Retry-After": "1"}), None
    return None, fault


def make_sequences(ctx: ServerContext, rid: str, prompts: list[list[int]],
                   texts: list[str | None], specs: list[SamplingSpec], n: int,
                   client_rid: str | None, trace_parent: str | None = None
                   ) -> list[SimSequence]:
    """``n`` sequences per prompt, ids ``<rid>-<index>``."""
    seqs = []
    engine = ctx.engine
    for i, (prompt, spec) in enumerate(zip(prompts, specs, strict=True)):
        for j in range(n):
            idx = i * n + j
            seqs.append(engine.new_sequence(f"{rid}-{idx}", prompt, spec, index=idx,
                                            sample_index=j, client_rid=client_rid,
                                            prompt_text=texts[i],
                                            trace_parent=trace_parent))
    return seqs


def final_text(seq: SimSequence) -> str:
    """The text a finished (or aborted) sequence produced."""
    plan = seq.plan
    assert plan is not None
    k = seq.n_done
    return plan.text if (k == len(plan) and seq.aborted is None) else plan.text_at(k)


def text_delta(seq: SimSequence, k: int, final: bool, sent: dict[int, int]) -> str:
    """The text of ``seq``'s first ``k`` tokens not yet sent (``sent``: characters sent per
    sequence index, updated)."""
    plan = seq.plan
    assert plan is not None
    text = plan.text if (final and seq.aborted is None) else plan.text_at(k)
    delta = text[sent.get(seq.index, 0):]
    sent[seq.index] = len(text)
    return delta


def finish_reason(seq: SimSequence) -> tuple[str, int | str | None]:
    """``(finish_reason, stop_reason)`` of an ended sequence."""
    if seq.aborted is not None:
        return "abort", None
    plan = seq.plan
    assert plan is not None
    if plan.finish == "length":
        return "length", None
    if plan.finish == "eos":
        return "stop", None
    return "stop", plan.matched


def timing(ctx: ServerContext, seqs: list[SimSequence]) -> dict[str, float | int]:
    """``sim_timing`` of a request: the slowest sequence's phases, the first first token."""
    now = ctx.engine.loop.time()
    ts = [s.timing(now) for s in seqs]
    out: dict[str, float | int] = {
        key: max(t[key] for t in ts) for key in ("queue_s", "prefill_s", "decode_s", "e2e_s")}
    firsts = [t["first_token_s"] for t in ts if t["first_token_s"] > 0]
    out["first_token_s"] = min(firsts) if firsts else 0.0
    out["cached_tokens"] = sum(int(t["cached_tokens"]) for t in ts)
    return out


def usage(ctx: ServerContext, prompts: list[list[int]], seqs: list[SimSequence],
          *, details: bool = True) -> dict[str, Any]:
    """The ``usage`` object (``details``: with the ``*_details`` fields)."""
    p = sum(len(x) for x in prompts)
    c = sum(s.n_done for s in seqs)
    u: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}
    if details:
        u["prompt_tokens_details"] = cached_details(ctx, seqs)
        u["completion_tokens_details"] = None
    return u


def cached_details(ctx: ServerContext, seqs: list[SimSequence], *,
                   stream: bool = False) -> dict[str, Any] | None:
    """``prompt_tokens_details`` with ``SimConfig.prompt_tokens_details``, else ``None``:
    ``{"cached_tokens": N}`` (0 included) as the real server answers, plus its null
    ``created_cache_tokens`` / ``multimodal_tokens`` outside streams (stream chunks drop
    nulls)."""
    if not ctx.config.prompt_tokens_details:
        return None
    cached = sum(s.cached for s in seqs)
    if stream:
        return {"cached_tokens": cached}
    return {"cached_tokens": cached, "created_cache_tokens": None, "multimodal_tokens": None}


def fingerprint(ctx: ServerContext) -> str:
    """``system_fingerprint``: ``vllm-<version>-<8 hex>`` like 0.32 (stable per model)."""
    digest = zlib.crc32(f"{ctx.config.vllm_version}/{ctx.config.model_name}".encode())
    return f"vllm-{ctx.config.vllm_version}-{digest:08x}"
