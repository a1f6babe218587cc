"""The RL loop's weight update against the REAL SGLang server on CPU: a real
``update_weights_from_disk`` with ``weight_version`` between two seeds' weights.

SGLang decodes slowly here (about 0.1 s a token on 2 cores), so a step that trains until the
server decodes one of the next rollouts lets the update cut them: a partial rollout comes back
whole, its tokens carrying two consecutive versions, and the server reports the loop's
version.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request
from typing import Any

from rollout_kit import EngineConfig, GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit.rl import RLConfig, WeightsFromDisk, run_rl_async
from rollout_kit.testing import SGLangCPUServer, fast_engine_config
from rollout_kit.testing._sglang_cpu import sglang_model_dir
from tests.realserver.pauses import rl_admissions, unfinished, wait_sglang_decoding

BUDGET = 24


def reward(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any,
           **data: Any) -> float:
    return float(len(completion_ids))


def model_info(address: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{address}/model_info", timeout=30) as resp:
        return dict(json.loads(resp.read()))


async def test_rl_loop_updates_real_sglang_weights_from_disk(
        sglang_cpu_server: SGLangCPUServer) -> None:
    first = sglang_cpu_server.model_dir
    other = sglang_model_dir(first.parent, seed=1)
    cfg: EngineConfig = fast_engine_config()
    ctl = RolloutController(sglang=[sglang_cpu_server.address], engine_config=cfg,
                            scrape_interval=None)

    async def train(batch: Any, step: int) -> None:
        # from step 1 on the next rollouts generate while the step trains; it ends once the
        # server decodes one of them, so the update that follows cuts it mid-way (step 2
        # takes them: partial rollouts): 24 tokens take seconds here, the pause comes within
        # milliseconds of that look
        await rl_admissions(ctl, config, step)
        await wait_sglang_decoding(sglang_cpu_server.url, lambda: not unfinished(ctl))

    config = RLConfig(steps=3, batch_size=2, max_staleness=1)
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=BUDGET, ignore_eos=True))
    update = WeightsFromDisk(lambda v: str(other if v % 2 else first))
    try:
        async with ctl:
            run = await asyncio.wait_for(run_rl_async(
                ctl, itertools.cycle([{"prompt": "The quick brown fox"}]), wf,
                config, train=train,
                update=update), 600)
            assert model_info(sglang_cpu_server.address)["weight_version"] == "3"
        tasks = ctl.traces()
        assert set(tasks["status"]) <= {"accepted", "cancelled"} and not \
            ctl.results.unfinished()
        assert list(run.steps["status"]) == ["ok"] * 3 and ctl.get_version() == 3
        samples = run.step_samples
        assert (samples["tokens"] == BUDGET).all()  # partial ones came back whole
        partial = samples[samples["partial"]]
        assert len(partial), samples
        assert (partial["version_max"] == partial["version_min"] + 1).all()
    finally:  # the session's server goes back to its first weights, version 0
        async with RolloutController(sglang=[sglang_cpu_server.address],
                                     scrape_interval=None) as back:
            await back.engines[0].update_weights_from_disk_async(str(first), 0)
