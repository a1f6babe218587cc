"""Scenario 4: the real vLLM (and SGLang) CPU server is SIGKILLed mid-run.

Unfinished tasks fail after their retries with a clear connection error naming the server,
nothing hangs, and the same controller is still usable: while the server is down a new task
fails fast; once the server is restarted (same port) the health probe puts it back and the
next batch succeeds. The session's shared server is the one killed, and restarted, so the
scenario costs one server start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from rollout_kit import (
    EngineConnectionError,
    ExecutorConfig,
    GenerationConfig,
    RetryPolicy,
    RolloutController,
    RolloutResult,
    SingleTurnWorkflow,
    Timeouts,
)
from rollout_kit.testing import SGLangCPUServer, VLLMCPUServer
from tests.realserver.pauses import freeze_running_generations, wait_sglang_decoding

from .conftest import TOK, check_ledger, make_engine, pick, record

pytestmark = pytest.mark.timeout(1200)


def reward(prompt: str, completion: str, prompt_ids: list[int],
           completion_ids: list[int], **data: Any) -> float:
    return 1.0


async def test_sigkill_real_vllm_mid_run(vllm_cpu_server: VLLMCPUServer) -> None:
    await _sigkill_mid_run(vllm_cpu_server, "vllm", "4. real vLLM CPU server SIGKILLed mid-run")


async def test_sigkill_real_sglang_mid_run(sglang_cpu_server: SGLangCPUServer) -> None:
    await _sigkill_mid_run(sglang_cpu_server, "sglang",
                           "4. real SGLang CPU server SIGKILLed mid-run")


#: waves of tasks sent at most until one is seen mid-generation
WAVES = 5


async def _running_now(server: VLLMCPUServer | SGLangCPUServer, flavour: str,
                       ended: Callable[[], bool]) -> float:
    """How many generations the server runs once some are found running (vLLM: frozen there
    by a dev-mode pause, so a loaded machine's late kill still finds them, as 900 tokens
    take only ~5 s; SGLang decodes 900 tokens in minutes here), or 0.0 when ``ended()``
    first."""
    if flavour == "vllm":
        return await freeze_running_generations(server.url, ended)
    return await wait_sglang_decoding(server.url, ended)


async def _sigkill_mid_run(server: VLLMCPUServer | SGLangCPUServer, flavour: str,
                           scenario: str) -> None:
    n = pick(16, 64)
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=900, ignore_eos=True),
                            tokenizer=TOK)
    retry = RetryPolicy(max_retries=2, initial_delay=0.1, max_delay=0.5)
    # SGLang's /health takes about a second on a CPU: give each probe room
    health = 2 if flavour == "vllm" else 5
    t0 = time.perf_counter()
    try:
        async with make_engine(flavour, [server.address], retry=retry, model=server.model,
                               timeouts=Timeouts(request=60, total=60, setup=30, health=health),
                               health_probe_interval=0.5) as engine, \
                RolloutController(engine,
                                  executor_config=ExecutorConfig(max_concurrent_rollouts=n)) \
                as ctl:
            # a wave that ends between two looks (a loaded machine) is followed by another
            submitted: list[int] = []
            results: list[RolloutResult] = []
            for _wave in range(WAVES):
                ids = [ctl.submit({"input_ids": [3 + i, 5, 7]}, wf) for i in range(n)]
                submitted += ids
                ended = lambda ids=ids: all(ctl.peek(i) is not None for i in ids)  # noqa: E731
                running = await _running_now(server, flavour, ended)
                if running >= 1:
                    break
                results += await ctl.wait_async(timeout=60)
            else:
                pytest.fail(f"{WAVES} waves of {n} tasks each ended before a generation was "
                            "seen running")
            await asyncio.to_thread(server.kill)
            t_kill = time.perf_counter()
            async with asyncio.timeout(60):  # nothing hangs
                results += await ctl.wait_async(timeout=60)
            fail_s = time.perf_counter() - t_kill
            ledger = check_ledger(submitted, results, ctl.traces())
            failed = [r for r in results if r.status == "failed"]
            assert failed, "the kill did not hit any running generation"
            assert set(ledger.statuses) <= {"accepted", "failed"}
            for r in failed:
                assert isinstance(r.error, EngineConnectionError), repr(r.error)
                assert r.error.server == server.address
                assert server.address in str(r.error)
            # still usable while the server is down: a new task fails fast and clearly
            [down] = await ctl.rollout_batch_async([{"input_ids": [1, 2]}], wf, timeout=30)
            assert down.status == "failed" and isinstance(down.error, EngineConnectionError)
            assert "cannot connect" in str(down.error)
            # restart on the same port: the probe puts it back, the next batch succeeds
            await asyncio.to_thread(server.restart)
            async with asyncio.timeout(30):
                while engine.router.down:
                    await asyncio.sleep(0.1)
            small = GenerationConfig(max_new_tokens=8, ignore_eos=True)
            after = await ctl.rollout_batch_async(
                [{"input_ids": [9, i]} for i in range(8)],
                SingleTurnWorkflow(reward, small, tokenizer=TOK), timeout=120)
            assert [r.status for r in after] == ["accepted"] * 8
            wall = time.perf_counter() - t0
    finally:
        if not server.is_running():  # leave the shared server running for other tests
            await asyncio.to_thread(server.restart)
    record(scenario, load=f"{n} tasks × 900 tokens, 1 real server",
           faults="SIGKILL of the server group mid-generation; restart; new batch of 8",
           ledger=ledger, wall_s=wall, failed_within_s=round(fail_s, 2),
           running_at_kill=int(running), next_batch="8/8 accepted")
