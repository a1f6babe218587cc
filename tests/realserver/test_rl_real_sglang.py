"""The RL loop's weight update against the REAL SGLang server on CPU: a real
``update_weights_from_disk`` with ``weight_version`` between two seeds' weights.

Step 1 trains until the server holds one of its next rollouts in place mid-generation
(:func:`~tests.realserver.pauses.freeze_for_update`), so the update that follows cuts it
however late a loaded machine lets the update come: a partial rollout comes back whole, its
tokens carrying two consecutive versions, and the server reports the loop's version. The
engine streams: the cut rollouts wait in SGLang's queue, where the abort answers with the
tokens they streamed (see :data:`~tests.realserver.pauses.SGLANG`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request
from typing import Any

import pytest

from rollout_kit import EngineConfig, GenerationConfig, RolloutController
from rollout_kit.rl import RLConfig, WeightsFromDisk, run_rl_async
from rollout_kit.testing import SGLangCPUServer, fast_engine_config
from rollout_kit.testing._sglang_cpu import sglang_model_dir
from tests.realserver.pauses import SGLANG, FreezingWorkflow, freeze_for_update, thaw_server

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
    url = sglang_cpu_server.url
    cfg: EngineConfig = fast_engine_config(stream=True)
    ctl = RolloutController(sglang=[sglang_cpu_server.address], engine_config=cfg,
                            scrape_interval=None)
    frozen: list[int] = []

    async def train(batch: Any, step: int) -> None:
        if await freeze_for_update(ctl, config, step, url, SGLANG):
            frozen.append(step)

    config = RLConfig(steps=3, batch_size=2, max_staleness=1)
    wf = FreezingWorkflow(reward, GenerationConfig(max_new_tokens=BUDGET, ignore_eos=True),
                          url, SGLANG)
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
        if not len(partial) and not frozen:  # the machine, not the loop: say so, do not pass
            pytest.skip("step 1's rollouts ran to the end between two of the server's steps")
        assert len(partial), f"step 1 froze its rollouts mid-generation, none came back " \
            f"partial: {samples}"
        assert (partial["version_max"] == partial["version_min"] + 1).all()
    finally:  # the session's server runs again, on its first weights, version 0
        await thaw_server(url, SGLANG)
        async with RolloutController(sglang=[sglang_cpu_server.address],
                                     scrape_interval=None) as back:
            await back.engines[0].update_weights_from_disk_async(str(first), 0)
