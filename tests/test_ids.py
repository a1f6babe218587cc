"""TaskIdGenerator and validate_task_id."""

from __future__ import annotations

import threading

import pytest

from rollout_kit.errors import DuplicateTaskIdError, InvalidTaskIdError
from rollout_kit.ids import TaskIdGenerator, validate_task_id


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
