"""Scenario 8: ``cancel_all()`` and a notebook-style KeyboardInterrupt during a run.

Afterwards no asyncio task is orphaned (every task left is a tracked rollout or the engine's
health probe, and none after ``aclose``), the engine's connection pool holds no acquired
connection, every task id still reaches one terminal status, and the controller runs again.
The simulator runs on its own thread, so the test loop holds only client tasks.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any

import pytest

from rollout_kit import GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit._loop import private_loop
from rollout_kit.engines import RemoteInfEngine
from rollout_kit.sim import serve_in_thread
from tests.sim.helpers import until

from .conftest import TOK, check_ledger, make_engine, pick, record

pytestmark = pytest.mark.timeout(60)

PROBE = "rollout_kit health probe"
SCRAPE = "rollout_kit scrape"  # the controller's metrics scraper, one task per server


def reward(prompt: str, completion: str, prompt_ids: list[int],
           completion_ids: list[int], **data: Any) -> float:
    return 1.0


def workflow(tokens: int = 64) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=tokens, ignore_eos=True),
                              tokenizer=TOK)


def leftover_tasks(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Names of the tasks still pending on ``loop`` other than the caller, the probe and
    the metrics scraper (background tasks of a live engine and controller)."""
    current = asyncio.current_task() if loop.is_running() else None
    return sorted(t.get_name() for t in asyncio.all_tasks(loop)
                  if t is not current and not t.done()
                  and not t.get_name().startswith((PROBE, SCRAPE)))


def acquired(engine: RemoteInfEngine) -> int:
    """Connections the engine's pool has handed out and not got back."""
    return engine.connections_in_use


async def test_cancel_all_mid_run() -> None:
    n = pick(100, 1000)
    wf = workflow()
    t0 = time.perf_counter()
    with serve_in_thread("sglang", 1, time_scale=1.0) as cluster:
        engine = make_engine("sglang", cluster.addresses)
        async with engine, RolloutController(engine) as ctl:
            ids = [ctl.submit({"prompt": f"q{i}"}, wf) for i in range(n)]
            # generations are running (64 tokens take ~0.8 s): cancel_all() cuts them short
            await until(lambda: acquired(engine) > 0, "a request in flight")
            cancelled = ctl.cancel_all()
            assert cancelled > 0
            results = await ctl.wait_async(timeout=10)
            ledger = check_ledger(ids, results, ctl.traces())
            assert ledger.statuses["cancelled"] == cancelled
            assert set(ledger.reasons) == {"cancelled:cancelled"}
            await asyncio.sleep(0)  # let the cancelled requests release their connections
            assert leftover_tasks(asyncio.get_running_loop()) == []
            assert acquired(engine) == 0
            # the controller still works
            again = await ctl.rollout_batch_async([{"prompt": "again"}] * 10, workflow(4),
                                                  timeout=20)
            assert [r.status for r in again] == ["accepted"] * 10
        assert leftover_tasks(asyncio.get_running_loop()) == []
        assert engine.connections_in_use == 0
        wall = time.perf_counter() - t0
    record("8. cancel_all() mid-run", load=f"{n} tasks, 64 tokens each",
           faults="cancel_all() mid-generation, then a new batch", ledger=ledger, wall_s=wall)


def _interrupt_after(delay: float) -> threading.Timer:
    """Send SIGINT to this process after ``delay`` s, as Jupyter's "interrupt kernel" does."""
    timer = threading.Timer(delay, signal.raise_signal, args=(signal.SIGINT,))
    timer.start()
    return timer


def test_keyboard_interrupt_during_blocking_rollout_batch() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT is delivered to the main thread only")
    n = pick(60, 500)
    t0 = time.perf_counter()
    with serve_in_thread("sglang", 1, time_scale=1.0) as cluster:
        ctl = RolloutController(sglang=cluster.addresses)
        try:
            ctl.initialize()
            timer = _interrupt_after(0.4)
            with pytest.raises(KeyboardInterrupt):
                ctl.rollout_batch([{"prompt": f"q{i}"} for i in range(n)], workflow())
            timer.join()
            loop = private_loop()
            # every task still pending is a tracked rollout of this controller: no orphan
            running = leftover_tasks(loop)
            tracked = {f"rollout-{t}" for t in ctl.results.unfinished()}
            assert running and set(running) <= tracked, (running, sorted(tracked)[:5])
            # nothing was lost: the interrupted batch's tasks come back from wait()
            ctl.cancel_all()
            results = ctl.wait(timeout=10)
            assert len(results) == n
            ledger = check_ledger(list(range(n)), results, ctl.traces())
            assert leftover_tasks(loop) == []
            engine: Any = ctl.engines[0]
            assert acquired(engine) == 0
            # and the controller runs again, blocking calls included
            again = ctl.rollout_batch([{"prompt": "again"}] * 5, workflow(4), timeout=20)
            assert [r.status for r in again] == ["accepted"] * 5
        finally:
            ctl.close()
        assert leftover_tasks(private_loop()) == []
        assert engine.connections_in_use == 0
        wall = time.perf_counter() - t0
    record("8. KeyboardInterrupt during blocking rollout_batch()",
           load=f"{n} tasks, 64 tokens each", faults="SIGINT after 0.4 s, cancel_all, new batch",
           ledger=ledger, wall_s=wall)
