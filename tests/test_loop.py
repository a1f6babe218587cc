"""Blocking sync calls: private Runner in scripts, nest-asyncio2 inside a running asyncio loop,
and a clear SyncInLoopError inside uvloop (which cannot be re-entered)."""

from __future__ import annotations

import asyncio

import pytest

from rollout_kit import RolloutController, SyncInLoopError
from rollout_kit._loop import run_sync
from tests._local_engine import LocalEngine
from tests.test_executor import EchoWorkflow


async def _answer() -> int:
    await asyncio.sleep(0)
    return 42


def test_run_sync_without_a_loop_reuses_one_private_loop() -> None:
    async def loop_id() -> int:
        return id(asyncio.get_running_loop())

    assert run_sync(_answer()) == 42
    assert run_sync(loop_id()) == run_sync(loop_id())


async def test_run_sync_inside_a_running_asyncio_loop() -> None:
    assert run_sync(_answer(), what="test") == 42  # re-enters via nest-asyncio2


def test_blocking_call_inside_uvloop_names_the_async_twin() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        ctl = RolloutController([LocalEngine("a")])
        with pytest.raises(SyncInLoopError, match=r"rollout_batch\(\).*await"):
            ctl.rollout_batch([1, 2], EchoWorkflow())
        res = await ctl.rollout_batch_async([1, 2], EchoWorkflow())  # the async twin works
        assert [r.task_id for r in res] == [0, 1]
        await ctl.close_async()

    uvloop.run(main())
