"""Scenario 1: one of two servers stops mid-run and comes back; no task lost or duplicated."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from rollout_kit import ExecutorConfig, GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit.sim import ApiName, serve

from .conftest import TOK, check_ledger, make_engine, pick, record

pytestmark = pytest.mark.timeout(90)


def reward(prompt: str, completion: str, prompt_ids: list[int],
           completion_ids: list[int], **data: Any) -> float:
    return float(len(completion_ids) > 0)


@pytest.mark.parametrize("flavour", ["sglang", "vllm"])
async def test_stopped_server_leaves_rotation_and_comes_back(flavour: ApiName) -> None:
    n_tasks = pick(400, 1500)
    downtime = pick(2.0, 5.0)
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=32), tokenizer=TOK)
    async with serve(flavour, 2, time_scale=1.0, max_num_seqs=64) as cluster, \
            make_engine(flavour, cluster.addresses, health_probe_interval=0.1) as engine:
        victim, healthy = cluster[0], cluster[1]
        t0 = time.perf_counter()
        async with RolloutController(
                engine, executor_config=ExecutorConfig(max_concurrent_rollouts=64)) as ctl:
            ids = [ctl.submit({"prompt": f"question {i}"}, wf) for i in range(n_tasks)]
            while ctl.stats()["accepted"] < n_tasks // 5:
                await asyncio.sleep(0.01)
            served_before = victim.state()["metrics"]["num_requests"]
            await victim.stop()
            stopped = time.perf_counter()
            async with asyncio.timeout(30):  # the first refused request takes it out
                while engine.router.down != (victim.address,):
                    await asyncio.sleep(0.01)
            # the stopped server left the rotation: the healthy one carries the load
            healthy_before = healthy.state()["metrics"]["num_requests"]
            async with asyncio.timeout(30):
                while healthy.state()["metrics"]["num_requests"] <= healthy_before:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(max(0.0, downtime - (time.perf_counter() - stopped)))
            assert engine.router.down == (victim.address,)  # still out while it is down
            await victim.start()
            async with asyncio.timeout(60):
                while engine.router.down:  # the probe brings it back
                    await asyncio.sleep(0.05)
                results = await ctl.wait_async(timeout=60)
            wall = time.perf_counter() - t0
            served_after = victim.state()["metrics"]["num_requests"]  # fresh since restart
            ledger = check_ledger(ids, results, ctl.traces())
            sessions = ctl.sessions()
    assert served_before > 0
    assert served_after > 0, "the restarted server was never used again"
    assert ledger.statuses == {"accepted": n_tasks}, ledger
    # one trajectory per task, one session each: nothing ran twice
    assert all(len(r.trajectory["input_ids"]) == 1 for r in results)
    assert len(sessions) == n_tasks
    retried = int((sessions["retries"] > 0).sum())
    record(f"1. server stopped and restarted ({flavour})",
           load=f"{n_tasks} tasks, 2 servers, concurrency 64",
           faults=f"server 0 stopped for {downtime:g} s mid-run", ledger=ledger, wall_s=wall,
           retried_sessions=retried)
