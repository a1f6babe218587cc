"""AReaL 1.0.4's own workflows, an agent and AReaLEngine, unmodified, against a REAL server
on CPU: vLLM's completions (``vllm``) or SGLang's native ``/generate`` (``sglang``, AReaL's
default engine), with their chat flavours for the agent. The outer test starts the server and
passes ``ROLLOUT_KIT_REAL_FLAVOUR``, ``ROLLOUT_KIT_REAL_ADDRESS`` and the model folder."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from areal.api.cli_args import GenerationHyperparameters
from areal.workflow.multi_turn import MultiTurnWorkflow
from areal.workflow.openai.math_agent import MathAgent
from areal.workflow.rlvr import RLVRWorkflow
from areal_helpers import math_data, reward_fn, zero_reward
from test_areal_on_sim import check_against_the_wire

import rollout_kit as rk
from rollout_kit.agents import AgentEndpoint
from rollout_kit.areal import AReaLAgentWorkflow, AReaLEngine
from rollout_kit.engines import make_engine
from rollout_kit.tracing import load_dump

FLAVOUR = os.environ.get("ROLLOUT_KIT_REAL_FLAVOUR", "")
ADDRESS = os.environ.get("ROLLOUT_KIT_REAL_ADDRESS", "")
pytestmark = pytest.mark.skipif(not ADDRESS, reason="no real server given")


def _post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"http://{ADDRESS}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return dict(json.loads(resp.read()))


def raw_greedy(prompt_ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """The server's own greedy answer to ``prompt_ids``: output ids and their logprobs."""
    if FLAVOUR == "sglang":
        out = _post("/generate", {"input_ids": prompt_ids, "return_logprob": True,
                                  "sampling_params": {"max_new_tokens": n, "temperature": 0}})
        return out["output_ids"], [e[0] for e in out["meta_info"]["output_token_logprobs"]]
    choice = _post("/v1/completions", {
        "model": "tiny", "prompt": prompt_ids, "max_tokens": n, "temperature": 0.0,
        "logprobs": 0, "return_tokens_as_token_ids": True, "return_token_ids": True,
    })["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


async def test_rlvr_and_multi_turn_unchanged(tokenizer: Any, tmp_path: Path) -> None:
    ctl = rk.RolloutController(servers={FLAVOUR: [ADDRESS]}, dump=tmp_path / "dump")
    g = GenerationHyperparameters(max_new_tokens=8, greedy=True)
    rlvr = await ctl.rollout_batch_async(math_data(3), RLVRWorkflow(reward_fn, g, tokenizer))
    multi = await ctl.rollout_batch_async(
        math_data(2), MultiTurnWorkflow(zero_reward, g, tokenizer, max_turns=2,
                                        turn_discount=0.9))
    assert [r.status for r in rlvr + multi] == ["accepted"] * 5, rlvr[0].traceback
    assert [r.task_id for r in rlvr + multi] == [0, 1, 2, 3, 4]
    await ctl.close_async()
    calls = load_dump(tmp_path / "dump")
    for r in rlvr + multi:
        check_against_the_wire(r.trajectory, calls.loc[r.task_id])
    first = calls.loc[0].iloc[0]
    ids, logprobs = raw_greedy(first.prompt_ids, len(first.output_ids))
    assert ids == first.output_ids
    assert logprobs == pytest.approx(
        rlvr[0].trajectory["logprobs"][0, len(first.prompt_ids):].tolist(), abs=1e-4)
    assert ctl.sessions().groupby(level="task_id").size().tolist() == [1, 1, 1, 2, 2]


async def test_math_agent_unchanged_over_the_chat_flavour() -> None:
    ctl = rk.RolloutController(servers={f"{FLAVOUR}-chat": [ADDRESS]})
    async with AgentEndpoint() as ep:
        wf = AReaLAgentWorkflow(MathAgent(max_tokens=8, temperature=0.0), endpoint=ep,
                                trajectory="tensors")
        results = await ctl.rollout_batch_async(math_data(2), wf)
    assert [r.status for r in results] == ["accepted"] * 2, results[0].traceback
    for r in results:
        t = r.trajectory
        completion = int(ctl.sessions().loc[r.task_id, "completion_tokens"].sum())
        assert int(t["loss_mask"].sum()) == completion > 0  # the server's completion ids
    await ctl.close_async()


def test_areal_engine_calling_style(tokenizer: Any) -> None:
    engine = AReaLEngine(make_engine(FLAVOUR, [ADDRESS]))
    engine.initialize()
    g = GenerationHyperparameters(max_new_tokens=8, greedy=True)
    wf = RLVRWorkflow(reward_fn, g, tokenizer)
    [grouped] = engine.rollout_batch(math_data(1), wf, group_size=2)
    assert grouped["input_ids"].shape[0] == 2
    assert grouped["input_ids"][0].tolist() == grouped["input_ids"][1].tolist()  # greedy
    assert engine.wait_for_task(engine.submit(math_data(2)[1], wf))["rewards"].shape == (1,)
    assert engine.controller.traces()["status"].tolist() == ["accepted"] * 2
    engine.destroy()
