"""A set of task ids that costs one bit per id: what a tracer keeps of every task it has
finalized or ingested, to tell a late mark of a finished task from an unknown id."""

from __future__ import annotations


class IdSet:
    """Set of task ids, as a bitmap for ids below 2**27 (16 MiB at most), else a set.

    ``top`` is one more than the largest id added (0 when empty): an id at or above it is
    not in the set, which a caller can test without a method call (ids usually grow).
    """

    __slots__ = ("_big", "_bits", "top")
    LIMIT = 1 << 27

    def __init__(self) -> None:
        self._bits = bytearray()
        self._big: set[int] = set()
        self.top = 0

    def add(self, i: int) -> None:
        """Insert ``i``."""
        if i >= self.top:
            self.top = i + 1
        if i >= self.LIMIT:
            self._big.add(i)
            return
        byte = i >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
        self._bits[byte] |= 1 << (i & 7)

    def __contains__(self, i: int) -> bool:
        if i >= self.LIMIT:
            return i in self._big
        byte = i >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (i & 7)))

