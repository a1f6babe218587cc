"""Conversations as load against the real vLLM 0.32 CPU server (``--enable-prefix-caching
--enable-prompt-tokens-details``): a later turn resends the conversation, the server's prefix
cache serves the history (``cached_tokens`` > 0), and its TTFT is lower than that of a first
turn of the same prompt length.

TTFT on the 2-core CPU server is noisy (a few milliseconds of scheduling and HTTP around a
prefill of ~900 tokens through a 2-layer model), so the TTFT claim compares **medians over
several conversations**, sent one at a time at a low rate, the cached and the cold turns
interleaved in one run so a slower stretch of the machine hits both alike. The length match
is checked from the server's own prompt token counts.
"""

from __future__ import annotations

import numpy as np
import pytest

import rollout_kit as rk
from rollout_kit import EngineConfig
from rollout_kit.load import (
    Arrivals,
    Conversation,
    ConversationTurn,
    LoadSpec,
    run_conversations_async,
)
from rollout_kit.load._datasets.conversation import text_of_length
from rollout_kit.testing import VLLMCPUServer

pytestmark = [pytest.mark.vllm_cpu, pytest.mark.timeout(600)]

LONG = 840  # characters = tokens of the first message (the tiny model counts bytes)
QUESTION = "And then?"
PAIRS = 8


def _two_turns(i: int) -> Conversation:
    rng = np.random.default_rng([1, i])
    return Conversation(turns=(
        ConversationTurn(content=text_of_length(LONG, rng), output_len=4),
        ConversationTurn(content=QUESTION, output_len=4)), ignore_eos=True, id=f"warm{i}")


def _one_turn(i: int, length: int) -> Conversation:
    rng = np.random.default_rng([2, i])
    return Conversation(turns=(ConversationTurn(content=text_of_length(length, rng),
                                                output_len=4),), ignore_eos=True,
                        id=f"cold{i}")


async def _run(ctl: rk.RolloutController, convs: list[Conversation]) -> object:
    return await run_conversations_async(
        ctl, convs, LoadSpec(arrivals=Arrivals(rate=4.0, burstiness=float("inf")),
                             max_concurrency=1))


async def test_later_turns_hit_the_prefix_cache_and_answer_sooner(
        vllm_cpu_server: VLLMCPUServer) -> None:
    ctl = rk.RolloutController(servers={"vllm-chat": [vllm_cpu_server.address]},
                               engine_config=EngineConfig(stream=True))
    await ctl.initialize_async()
    try:
        # one conversation to learn the prompt lengths the server counts
        probe = await _run(ctl, [_two_turns(1000)])
        t = probe.turns  # type: ignore[attr-defined]
        p0, p1 = (int(t.xs(k, level="turn")["prompt_tokens"].iloc[0]) for k in (0, 1))
        assert p1 > p0 + len(QUESTION)
        # a first turn as long as a second one: its message longer by what turn 2 adds
        cold_len = LONG + (p1 - p0)
        convs: list[Conversation] = []
        for i in range(PAIRS):
            convs += [_two_turns(i), _one_turn(i, cold_len)]
        run = await _run(ctl, convs)
    finally:
        await ctl.close_async()
    turns = run.turns  # type: ignore[attr-defined]
    assert (turns["status"] == "accepted").all(), turns[["status", "reason"]]
    ids = turns.index.get_level_values("turn").to_numpy()
    task_turns = turns.groupby(level="task_id").size()
    warm_tasks = task_turns[task_turns == 2].index
    later = turns[ids == 1]
    cold = turns[(ids == 0) & ~turns.index.get_level_values("task_id").isin(warm_tasks)]
    assert len(later) == PAIRS and len(cold) == PAIRS
    # the history is served from the prefix cache: most of the first message's tokens
    assert (later["cached_tokens"] > 0).all(), later["cached_tokens"]
    assert (later["cached_tokens"] >= 0.8 * p0).all(), (later["cached_tokens"], p0)
    # the same prompt length (the server's count) within 3 %: the tiny model's tokenizer
    # merges a few byte pairs of the random text, and the reply is retokenized
    cold_len_med = float(cold["prompt_tokens"].median())
    assert abs(cold_len_med - float(later["prompt_tokens"].median())) <= 0.03 * cold_len_med, \
        (cold["prompt_tokens"].tolist(), later["prompt_tokens"].tolist())
    assert float(cold["cached_tokens"].max()) < 0.5 * float(later["cached_tokens"].min())
    later_ttft = float(later["ttft_s"].median())
    cold_ttft = float(cold["ttft_s"].median())
    print(f"median TTFT: later turns {later_ttft * 1e3:.2f} ms (cached "
          f"{int(later['cached_tokens'].median())} of {int(later['prompt_tokens'].median())}),"
          f" cold first turns {cold_ttft * 1e3:.2f} ms")
    assert later_ttft < cold_ttft, (later["ttft_s"].tolist(), cold["ttft_s"].tolist())
    by = run.by_turn()  # type: ignore[attr-defined]
    assert by.loc[1, "cache_hit_ratio"] > 0.8
