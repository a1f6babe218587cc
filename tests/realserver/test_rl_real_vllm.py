"""The RL loop's weight update against the REAL vLLM server on CPU (dev-mode pause/resume).

vLLM has no stock ``update_weights_from_disk``: the update here is the dev-mode
``/pause?mode=abort`` → (a simulated load) → ``set_version`` → ``/resume`` cycle, which is
what cuts generations in flight. A partial rollout must come back whole, its tokens carrying
two consecutive versions; every task ends accounted and the server generates again after.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import pytest

from rollout_kit import (
    EngineConfig,
    GenerationConfig,
    RetryPolicy,
    RolloutController,
    SingleTurnWorkflow,
    Timeouts,
)
from rollout_kit.rl import RLConfig, SimulatedUpdate, run_rl_async
from rollout_kit.testing import VLLMCPUServer
from tests.realserver.pauses import FreezingWorkflow, freeze_for_update, thaw_server

pytestmark = pytest.mark.vllm_cpu

#: runs of the loop at most, until an update cuts a generation in flight
TRIES = 3


def reward(prompt, completion, prompt_ids, completion_ids, **_):
    return float(len(completion_ids))


async def _run(server: VLLMCPUServer, budget: int) -> tuple[RolloutController, Any, list[int]]:
    """Three steps of the loop; returns the controller, the run and the steps whose training
    ended with the next rollouts frozen on the server mid-generation."""
    cfg = EngineConfig(retry=RetryPolicy(max_retries=2, initial_delay=0.05, max_delay=0.5),
                       timeouts=Timeouts(request=60.0, total=120.0, setup=30.0),
                       pause_poll_interval=0.02)
    ctl = RolloutController(vllm=[server.address], engine_config=cfg, scrape_interval=None)
    config = RLConfig(steps=3, batch_size=2, max_staleness=1)
    frozen: list[int] = []

    async def train(batch: Any, step: int) -> None:
        # step 1's next rollouts wait on the frozen server while it trains; it ends with one
        # of them running there, so the update that follows cuts it mid-way: a trainer that
        # sleeps a share of a generation instead races the server
        if await freeze_for_update(ctl, config, step, server.url):
            frozen.append(step)

    wf = FreezingWorkflow(reward, GenerationConfig(max_new_tokens=budget, ignore_eos=True),
                          server.url)
    try:
        async with ctl:
            run = await asyncio.wait_for(run_rl_async(
                ctl, itertools.cycle([{"prompt": "The quick brown fox"}]), wf, config,
                train=train, update=SimulatedUpdate(seconds=0.05)), 300)
    finally:  # the server is shared by the session: never leave it frozen
        await thaw_server(server.url)
    return ctl, run, frozen


async def test_rl_loop_pauses_updates_and_resumes_a_real_vllm_server(
        vllm_cpu_server: VLLMCPUServer) -> None:
    budget = min(900, vllm_cpu_server.max_model_len - 32)
    tries = []
    for _ in range(TRIES):
        ctl, run, frozen = await _run(vllm_cpu_server, budget)
        tasks = ctl.traces()
        # every task accounted, the loop's steps all done, the versions advanced
        assert set(tasks["status"]) == {"accepted"} and not ctl.results.unfinished()
        assert list(run.steps["status"]) == ["ok"] * 3 and ctl.get_version() == 3
        assert (tasks["completion_tokens"] == budget).all()  # partial ones came back whole
        samples = run.step_samples
        assert ((samples["tokens"] == budget) & (samples["version_max"] <= samples["step"])
                ).all()
        partial = samples[samples["partial"]]
        if len(partial):
            assert (partial["version_max"] == partial["version_min"] + 1).all()
            events = ctl.tracer.frames().events
            assert set(partial.index) <= set(events["task_id"])  # resumed after /pause
            break
        # a generation frozen in flight and cut by the update must come back partial
        assert not frozen, f"steps {frozen} froze rollouts in flight, none came back partial"
        tries.append(f"run {len(tries) + 1}: no step's training found its next rollouts "
                     f"running ({len(samples)} samples, none partial)")
    else:  # the machine, not the loop: say so, do not pass
        pytest.skip(f"every step's rollouts ended before the server could be frozen (a "
                    f"CPU-starved client, load {os.getloadavg()[0]:.1f}): {tries}")
    # the server is not left paused: it generates again
    ctl2 = RolloutController(vllm=[vllm_cpu_server.address], scrape_interval=None)
    async with ctl2:
        [after] = await ctl2.rollout_batch_async(
            ["The quick brown fox"],
            SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=4)), timeout=60)
    assert after.ok
