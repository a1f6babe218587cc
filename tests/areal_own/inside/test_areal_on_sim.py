"""AReaL 1.0.4's own workflows and agents, unmodified, through rollout_kit on the simulator."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest as AReaLRequest
from areal.workflow.multi_turn import MultiTurnWorkflow
from areal.workflow.openai.math_agent import MathAgent, MultiTurnMathAgent
from areal.workflow.rlvr import RLVRWorkflow
from areal_helpers import math_data, reward_fn, zero_reward

import rollout_kit as rk
from rollout_kit.agents import AgentEndpoint
from rollout_kit.areal import AReaLAgentWorkflow, AReaLEngine
from rollout_kit.engines import RemoteSGLangEngine
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import load_dump

N = 6


def greedy(**kw: Any) -> GenerationHyperparameters:
    return GenerationHyperparameters(max_new_tokens=12, greedy=True, **kw)


def check_against_the_wire(traj: dict[str, torch.Tensor], calls: Any) -> None:
    """The tensors are the recorded calls' ids, logprobs and versions, in order."""
    ids = traj["input_ids"][0].tolist()
    mask, lps = traj["loss_mask"][0].tolist(), traj["logprobs"][0].tolist()
    vers = traj["versions"][0].tolist()
    assert traj["attention_mask"].dtype == torch.bool and traj["attention_mask"].all()
    assert traj["rewards"].shape == (1,)
    pos = 0
    for _, call in calls.iterrows():
        n_new_prompt = len(call.prompt_ids) - pos
        assert ids[:len(call.prompt_ids)] == call.prompt_ids
        out = slice(len(call.prompt_ids), len(call.prompt_ids) + len(call.output_ids))
        assert ids[out] == call.output_ids
        assert mask[pos:out.start] == [0] * n_new_prompt and set(mask[out]) <= {1}
        assert vers[pos:out.start] == [-1] * n_new_prompt and vers[out] == call.versions
        assert lps[out] == pytest.approx(call.logprobs, abs=1e-6)
        pos = out.stop
    assert len(ids) == pos


async def test_rlvr_workflow_unchanged_through_the_controller(sim_servers: Any, model_dir: str,
                                                              tokenizer: Any,
                                                              tmp_path: Path) -> None:
    sim = sim_servers("sglang", n=2, tokenizer=model_dir)
    ctl = rk.RolloutController(sglang=sim.addresses, dump=tmp_path / "dump")
    wf = RLVRWorkflow(reward_fn, greedy(), tokenizer)
    results = await ctl.rollout_batch_async(math_data(N), wf)
    assert [r.task_id for r in results] == list(range(N))  # ids in submit order
    assert [r.status for r in results] == ["accepted"] * N
    await ctl.close_async()
    calls = load_dump(tmp_path / "dump")
    for r in results:
        check_against_the_wire(r.trajectory, calls.loc[r.task_id])
    sessions = ctl.sessions()
    assert sessions.groupby(level="task_id").size().tolist() == [1] * N  # one per agenerate
    # AReaL's own perf_tracer calls are the phases: generate and reward of each session
    spans = ctl.spans()
    assert spans.groupby("task_id")["phase"].apply(sorted).tolist() == \
        [["generate", "reward"]] * N
    tasks = ctl.traces()
    assert (tasks["reward_s"] > 0).all() and (tasks["generate_s"] > 0).all()


def test_rlvr_workflow_through_areal_engine_returns_areal_trajectories(
        sim_servers: Any, model_dir: str, tokenizer: Any) -> None:
    sim = sim_servers("sglang", n=1, tokenizer=model_dir)
    eng = AReaLEngine(RemoteSGLangEngine(sim.addresses, config=fast_engine_config()))
    eng.initialize()
    wf = RLVRWorkflow(reward_fn, greedy(), tokenizer)
    batch = eng.rollout_batch(math_data(4), wf)
    assert len(batch) == 4 and all(t["input_ids"].dtype == torch.int32 for t in batch)
    [grouped] = eng.rollout_batch(math_data(1), wf, group_size=3)
    assert grouped["input_ids"].shape[0] == 3 and grouped["rewards"].shape == (3,)
    tid = eng.submit(math_data(1)[0], wf)
    [traj] = eng.wait(1)
    assert tid == 5 and traj["loss_mask"].shape == traj["input_ids"].shape
    eng.destroy()


async def test_multi_turn_workflow_unchanged_one_session_per_turn(
        sim_servers: Any, model_dir: str, tokenizer: Any, tmp_path: Path) -> None:
    sim = sim_servers("sglang", n=1, tokenizer=model_dir)
    ctl = rk.RolloutController(sglang=sim.addresses, dump=tmp_path / "dump")
    wf = MultiTurnWorkflow(zero_reward, greedy(), tokenizer, max_turns=3, turn_discount=0.9)
    results = await ctl.rollout_batch_async(math_data(3), wf)
    assert [r.status for r in results] == ["accepted"] * 3
    await ctl.close_async()
    calls = load_dump(tmp_path / "dump")
    for r in results:
        assert len(calls.loc[r.task_id]) == 3  # zero reward: every turn is asked
        check_against_the_wire(r.trajectory, calls.loc[r.task_id])
    assert ctl.sessions().groupby(level="task_id").size().tolist() == [3, 3, 3]


@pytest.mark.parametrize("agent", [MathAgent(max_tokens=16, temperature=0.0),
                                   MultiTurnMathAgent(max_turns=3, temperature=0.0)],
                         ids=["MathAgent", "MultiTurnMathAgent"])
async def test_areal_agents_unchanged_over_the_agent_endpoint(sim_servers: Any, model_dir: str,
                                                              agent: Any) -> None:
    sim = sim_servers("vllm", n=1, tokenizer=model_dir, accuracy=0.5)
    ctl = rk.RolloutController(servers={"vllm-chat": sim.addresses})
    async with AgentEndpoint() as ep:
        wf = AReaLAgentWorkflow(agent, endpoint=ep, reward_discount=0.5, trajectory="tensors")
        results = await ctl.rollout_batch_async(math_data(N), wf)
    assert [r.status for r in results] == ["accepted"] * N, results[0].traceback
    sessions = ctl.sessions()
    for r in results:
        traj = r.trajectory
        n_calls = len(sessions.loc[r.task_id])
        assert traj["input_ids"].shape[0] == traj["rewards"].shape[0] == n_calls
        rewards = traj["rewards"].tolist()
        # InteractionCache: newest to oldest, later rewards discounted by 0.5
        for older, newer in itertools.pairwise(rewards):
            assert older == pytest.approx(newer * 0.5)
    assert "drift_at" in sessions  # each call is a checked turn
    await ctl.close_async()


class IntAgent:
    async def run(self, data: Any, **kw: Any) -> int:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=kw["base_url"], api_key=kw["api_key"],
                             http_client=kw["http_client"], max_retries=0)
        await client.chat.completions.create(messages=data["messages"], model="default")
        return 1


class SilentAgent:
    async def run(self, data: Any, **kw: Any) -> float:
        return 1.0


class VisionWorkflow:
    async def arun_episode(self, engine: Any, data: Any) -> Any:
        return await engine.agenerate(AReaLRequest(
            rid=uuid.uuid4().hex, input_ids=[1, 2], gconfig=greedy(),
            image_data=["data:image/png;base64,iVBORw0KGgo="]))


async def test_bad_input_fails_its_task_with_the_reason(sim_servers: Any, model_dir: str,
                                                        tokenizer: Any) -> None:
    sim = sim_servers("vllm", n=1, tokenizer=model_dir)
    ctl = rk.RolloutController(servers={"vllm-chat": sim.addresses})
    [vision] = await ctl.rollout_batch_async([{}], VisionWorkflow())
    assert vision.status == "failed" and "image_data" in str(vision.error)

    def broken_reward(*args: Any, **kw: Any) -> float:
        raise ZeroDivisionError("reward model down")

    [raised] = await ctl.rollout_batch_async(
        math_data(1), RLVRWorkflow(broken_reward, greedy(), tokenizer))
    assert raised.status == "failed" and raised.reason == "workflow_exception"
    assert raised.traceback and "rlvr.py" in raised.traceback
    async with AgentEndpoint() as ep:
        [int_reward] = await ctl.rollout_batch_async(
            math_data(1), AReaLAgentWorkflow(IntAgent(), endpoint=ep))
        [silent] = await ctl.rollout_batch_async(
            math_data(1), AReaLAgentWorkflow(SilentAgent(), endpoint=ep))
    assert (int_reward.status, int_reward.reason) == ("failed", "agent_error")
    assert "return float(reward)" in str(int_reward.error)
    assert (silent.status, silent.reason) == ("failed", "agent_error")
    assert "without a chat call" in str(silent.error)
    assert ctl.traces()["status"].tolist() == ["failed"] * 4  # every task accounted
    await ctl.close_async()
