"""The collector settings a controller holds while it is open (``rollout_kit._gc``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rollout_kit import RolloutController
from rollout_kit._gc import YOUNG_THRESHOLD, GcHold, holders
from rollout_kit.sim import SimCluster


@pytest.fixture(autouse=True)
def _untouched_collector() -> Iterator[None]:
    """Every test starts and ends with no hold, no freeze and the same thresholds."""
    gc.collect()  # controllers an earlier test dropped without close() give their holds back
    if holders() or gc.get_freeze_count():
        pytest.fail(f"{holders()} collector hold(s) left by an earlier test (an unclosed "
                    "RolloutController that is still referenced)")
    before = gc.get_threshold()
    yield
    assert holders() == 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_hold_freezes_raises_the_young_threshold_and_restores() -> None:
    before = gc.get_threshold()
    with GcHold() as hold:
        assert hold.held and holders() == 1
        assert gc.get_threshold() == (max(before[0], YOUNG_THRESHOLD), *before[1:])
        assert gc.get_freeze_count() > 0
    assert not hold.held
    hold.release()  # idempotent: the count does not go below zero
    assert holders() == 0


def test_holds_nest_and_interleave_the_last_release_restores() -> None:
    before = gc.get_threshold()
    a, b = GcHold(), GcHold()
    try:
        a.release()
        assert holders() == 1 and gc.get_threshold()[0] >= YOUNG_THRESHOLD
        # still frozen while b holds (the count only falls as frozen objects are freed)
        assert gc.get_freeze_count() > 0
    finally:
        a.release()
        b.release()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_higher_threshold_is_never_lowered() -> None:
    before = gc.get_threshold()
    gc.set_threshold(50_000, *before[1:])
    try:
        with GcHold():
            assert gc.get_threshold()[0] == 50_000
        assert gc.get_threshold()[0] == 50_000
    finally:
        gc.set_threshold(*before)


def test_a_freeze_made_by_the_process_is_left_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with GcHold():  # a second freeze would take in every object made since: more
            assert 0 < gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen  # not unfrozen by the hold's release
    finally:
        gc.unfreeze()


async def test_the_controller_holds_until_closed(sim_sglang: SimCluster) -> None:
    ctl = RolloutController(sglang=sim_sglang.addresses)
    assert holders() == 1 and gc.get_threshold()[0] >= YOUNG_THRESHOLD
    await ctl.close_async()
    assert holders() == 0
    await ctl.close_async()  # closing twice releases once
    assert holders() == 0


async def test_tune_gc_false_leaves_the_collector_alone(sim_sglang: SimCluster) -> None:
    before = gc.get_threshold()
    ctl = RolloutController(sglang=sim_sglang.addresses, tune_gc=False)
    assert holders() == 0 and gc.get_threshold() == before
    await ctl.close_async()


def test_a_controller_dropped_without_close_gives_its_hold_back(sim_sglang: SimCluster) -> None:
    ctl = RolloutController(sglang=sim_sglang.addresses)
    assert holders() == 1
    del ctl
    gc.collect()  # the controller may sit in a reference cycle
    assert holders() == 0
