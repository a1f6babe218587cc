"""Where a reward runs: threads, the loop, or the loop once it has shown itself cheap."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from rollout_kit import ConfigError
from rollout_kit._workflows import RewardRunner
from rollout_kit._workflows.reward import PROBE_CALLS


class Recorder:
    """A sync reward that records the thread of each call; ``sleep_s`` makes it slow."""

    def __init__(self, sleep_s: float = 0.0) -> None:
        self.threads: list[int] = []
        self.sleep_s = sleep_s

    def __call__(self, prompt: str, completion: str, prompt_ids: list[int],
                 completion_ids: list[int], **data: Any) -> float:
        self.threads.append(threading.get_ident())
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return float(data.get("answer") == completion)


async def call(runner: RewardRunner, **data: Any) -> float:
    return await runner("p", "4", [1], [2], data)


async def probe_until_inline(runner: RewardRunner) -> int:
    """Call until the runner has moved on the loop; return the number of calls. (A probed
    call counts as cheap only within CHEAP_WALL_S of wall time, which a starved machine can
    exceed, so the count is bounded rather than exact.)"""
    for n in range(1, 50 * PROBE_CALLS):
        await call(runner, answer="4")
        if runner.inline:
            return n
    raise AssertionError("a trivial reward never counted as cheap")


async def test_auto_moves_a_cheap_reward_onto_the_loop_after_the_probe() -> None:
    fn = Recorder()
    runner = RewardRunner(fn, "auto")
    loop_thread = threading.get_ident()
    n = await probe_until_inline(runner)
    assert n >= PROBE_CALLS
    assert await call(runner, answer="5") == 0.0
    assert loop_thread not in fn.threads[:n]  # probed in threads
    assert fn.threads[n] == loop_thread  # then on the loop


async def test_auto_keeps_a_blocking_reward_in_threads() -> None:
    fn = Recorder(sleep_s=0.03)  # little CPU, but 30 ms of wall time (I/O-like)
    runner = RewardRunner(fn, "auto")
    for _ in range(PROBE_CALLS + 2):
        await call(runner)
    assert not runner.inline and runner.mode == "auto"
    assert threading.get_ident() not in fn.threads


async def test_an_inline_call_that_turns_slow_sends_the_rest_to_threads(
        caplog: pytest.LogCaptureFixture) -> None:
    fn = Recorder()
    runner = RewardRunner(fn, "auto")
    n = await probe_until_inline(runner)
    fn.sleep_s = 0.01
    with caplog.at_level(logging.WARNING, logger="rollout_kit._workflows"):
        await call(runner)  # one slow call alone may be preemption: still inline
        assert runner.inline
        await call(runner)  # the second in a row sends the rest to threads
    assert runner.mode == "thread"
    assert "later calls run in threads" in caplog.text
    fn.sleep_s = 0.0
    for _ in range(PROBE_CALLS + 1):
        await call(runner)
    assert runner.mode == "thread"  # for good: no second trial
    assert threading.get_ident() not in fn.threads[n + 2:]


async def test_inline_runs_on_the_loop_from_the_first_call_and_is_not_watched() -> None:
    fn = Recorder(sleep_s=0.005)
    runner = RewardRunner(fn, "inline")
    for _ in range(3):
        await call(runner)
    assert fn.threads == [threading.get_ident()] * 3 and runner.inline


async def test_thread_mode_never_runs_on_the_loop_and_times_out() -> None:
    fn = Recorder()
    runner = RewardRunner(fn, "thread")
    for _ in range(PROBE_CALLS + 2):
        await call(runner)
    assert threading.get_ident() not in fn.threads and runner.mode == "thread"
    slow = RewardRunner(Recorder(sleep_s=0.5), "thread", timeout=0.05)
    with pytest.raises(TimeoutError):
        await call(slow)


async def test_async_rewards_are_awaited_with_the_timeout() -> None:
    async def reward(prompt: str, completion: str, *_: Any, **__: Any) -> float:
        await asyncio.sleep(0)
        return 0.5

    async def hangs(*_: Any, **__: Any) -> float:
        await asyncio.Event().wait()
        return 1.0

    assert await call(RewardRunner(reward, "auto")) == 0.5
    with pytest.raises(TimeoutError):
        await call(RewardRunner(hangs, "auto", timeout=0.05))


async def test_bad_mode_and_non_number_rewards_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="reward_mode"):
        RewardRunner(Recorder(), "fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must return a number"):
        await call(RewardRunner(lambda *a, **k: "yes", "inline"))
