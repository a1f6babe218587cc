"""Task ids: one locked counter per owner (controller, or a standalone executor).

Ids are plain non-negative ``int`` s: readable, and serializable by orjson (which rejects
integers wider than 64 bits, so ``uuid4().int`` can never be a task id).

Usage::

    gen = TaskIdGenerator()
    gen.next()          # 0
    gen.reserve(3)      # range(1, 4)
    gen.claim(10)       # explicit id: recorded, later auto ids skip past it
    gen.next()          # 4 ... then 11 after 9 (10 is taken)
"""

from __future__ import annotations

import threading

from ._errors import DuplicateTaskIdError, InvalidTaskIdError


def validate_task_id(task_id: object) -> int:
    """Return ``task_id`` if it is a non-negative ``int`` (not a ``bool``); else raise.

    Raises:
        InvalidTaskIdError: the value is a bool, float, str, negative, or wider than 63 bits.
    """
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise InvalidTaskIdError(
            f"task_id must be a non-negative int, got {type(task_id).__name__} {task_id!r}"
        )
    if task_id < 0:
        raise InvalidTaskIdError(f"task_id must be a non-negative int, got {task_id}")
    if task_id >= 2**63:
        raise InvalidTaskIdError(
            f"task_id must fit in 63 bits (orjson and pandas int64), got {task_id}"
        )
    return int(task_id)


class TaskIdGenerator:
    """Thread-safe source of sequential task ids 0, 1, 2, …

    Explicit ids are *claimed*; claiming one twice raises ``DuplicateTaskIdError`` and auto
    ids skip every claimed id, so mixing both never collides. Only explicit ids above the
    counter are remembered, so memory stays bounded by how far callers jump ahead.
    """

    __slots__ = ("_ahead", "_lock", "_next")

    def __init__(self, start: int = 0) -> None:
        self._next = validate_task_id(start)
        self._ahead: set[int] = set()
        self._lock = threading.Lock()

    def next(self) -> int:
        """Return the next free id."""
        with self._lock:
            return self._take_next()

    def reserve(self, n: int) -> list[int]:
        """Return ``n`` fresh ids at once (consecutive unless explicit ids sit between)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidTaskIdError(f"reserve() needs a non-negative int, got {n!r}")
        with self._lock:
            return [self._take_next() for _ in range(n)]

    def claim(self, task_id: object) -> int:
        """Record an explicit id; raise ``DuplicateTaskIdError`` if it was used before."""
        tid = validate_task_id(task_id)
        with self._lock:
            if tid < self._next or tid in self._ahead:  # every id below the counter is used
                raise DuplicateTaskIdError(f"task_id {tid} was already used by this owner")
            self._ahead.add(tid)
            return tid

    def is_used(self, task_id: int) -> bool:
        """Whether ``task_id`` was handed out or claimed."""
        with self._lock:
            return task_id < self._next or task_id in self._ahead

    @property
    def peek(self) -> int:
        """The id ``next()`` would return now (for display; racy by nature)."""
        with self._lock:
            n = self._next
            while n in self._ahead:
                n += 1
            return n

    def _take_next(self) -> int:
        n = self._next
        while n in self._ahead:
            self._ahead.discard(n)
            n += 1
        self._next = n + 1
        return n

    def __repr__(self) -> str:
        return f"TaskIdGenerator(next={self.peek})"
