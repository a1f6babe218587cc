"""TaskIdGenerator and validate_task_id."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from rollout_kit import DuplicateTaskIdError, InvalidTaskIdError
from rollout_kit._ids import TaskIdGenerator, validate_task_id


def test_sequential_from_zero() -> None:
    g = TaskIdGenerator()
    assert [g.next() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert list(g.reserve(3)) == [5, 6, 7]
    assert g.peek == 8 and g.next() == 8
    assert list(g.reserve(0)) == []


def test_thread_safe_under_many_threads() -> None:
    g = TaskIdGenerator()
    out: list[list[int]] = [[] for _ in range(16)]

    def work(i: int) -> None:
        for _ in range(500):
            out[i].append(g.next())
        out[i].extend(g.reserve(10))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [x for o in out for x in o]
    assert sorted(ids) == list(range(16 * 510))
    assert all(o == sorted(o) for o in out)  # each thread sees increasing ids


def test_explicit_claim_and_duplicates() -> None:
    g = TaskIdGenerator()
    assert g.claim(2) == 2
    with pytest.raises(DuplicateTaskIdError, match="2"):
        g.claim(2)
    assert [g.next(), g.next(), g.next()] == [0, 1, 3]  # auto ids skip the explicit one
    with pytest.raises(DuplicateTaskIdError):
        g.claim(1)  # already handed out
    assert g.is_used(2) and g.is_used(3) and not g.is_used(4)
    g.claim(5)
    assert g.reserve(3) == [4, 6, 7]


@pytest.mark.parametrize("bad", [True, False, 1.0, -1, "3", 2**63, 2**64, None])
def test_invalid_ids_name_the_value(bad: object) -> None:
    with pytest.raises(InvalidTaskIdError) as info:
        validate_task_id(bad)
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)
    with pytest.raises(InvalidTaskIdError):
        TaskIdGenerator().claim(bad)


def test_valid_ids_and_bad_reserve() -> None:
    assert validate_task_id(0) == 0 and validate_task_id(2**63 - 1) == 2**63 - 1
    with pytest.raises(InvalidTaskIdError):
        TaskIdGenerator().reserve(-1)
    with pytest.raises(InvalidTaskIdError):
        TaskIdGenerator(start=-5)
    assert TaskIdGenerator(start=10).next() == 10
    assert "next=" in repr(TaskIdGenerator())


# -- edges, and the lock that next() / reserve() hold ------------------------------------


def test_claim_at_the_counter_and_one_below() -> None:
    g = TaskIdGenerator(start=5)
    assert g.claim(5) == 5  # the counter itself is still free
    assert g.next() == 6
    with pytest.raises(DuplicateTaskIdError):
        g.claim(6)  # handed out: one below the counter now
    assert not g.is_used(7) and g.is_used(6) and g.is_used(4)  # ids below start count as used


def test_skipped_claims_are_forgotten() -> None:
    g = TaskIdGenerator()
    g.claim(1)
    g.claim(2)
    g.claim(10)
    assert g.reserve(3) == [0, 3, 4]
    assert g._ahead == {10}  # memory bounded by how far callers jumped ahead
    assert g.peek == 5 and repr(g) == "TaskIdGenerator(next=5)"


def test_peek_skips_claimed_ids_without_taking_them() -> None:
    g = TaskIdGenerator()
    g.claim(0)
    g.claim(1)
    assert g.peek == 2 and g.peek == 2  # no side effect
    assert g.next() == 2 and g.peek == 3


@pytest.mark.parametrize("bad", [-1, 1.0, "3", True, None])
def test_reserve_refuses_non_counts_naming_them(bad: object) -> None:
    g = TaskIdGenerator()
    with pytest.raises(InvalidTaskIdError, match="reserve") as info:
        g.reserve(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)
    assert g.next() == 0  # nothing was taken


def test_invalid_id_message_names_the_type() -> None:
    with pytest.raises(InvalidTaskIdError, match=r"got float 1\.5"):
        validate_task_id(1.5)
    with pytest.raises(InvalidTaskIdError, match="got bool True"):
        validate_task_id(True)
    with pytest.raises(InvalidTaskIdError, match="63 bits"):
        validate_task_id(2**63)
    assert validate_task_id(2**63 - 1) == 2**63 - 1  # the edge itself is valid


class _SpyLock:
    """A lock that records whether it is held (and refuses to be entered twice)."""

    def __init__(self) -> None:
        self.held = False
        self.entries = 0

    def __enter__(self) -> None:
        assert not self.held, "the id lock was entered twice"
        self.held = True
        self.entries += 1

    def __exit__(self, *exc: object) -> None:
        self.held = False


def test_every_counter_step_happens_under_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The invariant the lock protects, checked directly: ``_take_next`` (read the counter,
    skip claimed ids, write it back) never runs unlocked, so no GIL luck is involved."""
    g = TaskIdGenerator()
    spy = _SpyLock()
    g._lock = spy  # type: ignore[assignment]
    steps: list[bool] = []
    take = TaskIdGenerator._take_next

    def checked(self: TaskIdGenerator) -> int:
        steps.append(spy.held)
        return take(self)

    monkeypatch.setattr(TaskIdGenerator, "_take_next", checked)
    assert g.next() == 0
    assert g.reserve(3) == [1, 2, 3]
    g.claim(7)
    assert g.is_used(7) and g.peek == 4
    assert steps == [True] * 4 and not spy.held
    assert spy.entries == 5  # next, reserve, claim, is_used, peek: one entry each


class _YieldingSet(set[int]):
    """A set whose membership test gives the GIL away: a thread switch lands between the
    counter's read and its write on every call of ``_take_next``."""

    def __contains__(self, item: object) -> bool:
        time.sleep(0)
        return super().__contains__(item)


def test_no_duplicate_ids_when_threads_switch_inside_next() -> None:
    g = TaskIdGenerator()
    g._ahead = _YieldingSet()  # type: ignore[assignment]
    n_threads, per_thread = 8, 200
    out: list[list[int]] = [[] for _ in range(n_threads)]
    start = threading.Barrier(n_threads)

    def work(i: int) -> None:
        start.wait()
        for _ in range(per_thread):
            out[i].append(g.next())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    ids = sorted(x for o in out for x in o)
    assert ids == list(range(n_threads * per_thread))  # no id twice, none lost
