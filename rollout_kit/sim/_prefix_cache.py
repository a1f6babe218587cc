"""A simulated prefix cache: chained block hashes with LRU eviction.

A prompt is cut into full blocks of ``block_size`` tokens; block ``i``'s key hashes block ``i``
together with block ``i−1``'s key, so a hit on block ``i`` means the whole prefix up to it was
seen. ``lookup_and_insert`` returns how many leading prompt tokens were cached and then records
the prompt's blocks. As on real servers, at least the last prompt token is always computed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Block-hash prefix cache with a block capacity (0 disables it)."""

    __slots__ = ("_blocks", "block_size", "capacity", "hits", "queries")

    def __init__(self, block_size: int, capacity: int) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        """Forget every block (``/flush_cache``, ``/reset_prefix_cache``)."""
        self._blocks.clear()

    def lookup_and_insert(self, tokens: Sequence[int]) -> int:
        """Cached leading tokens of ``tokens``; then remember its blocks.

        Args:
            tokens: the prompt token ids.

        Returns:
            The number of prompt tokens served from the cache (a multiple of the block size,
            and less than ``len(tokens)``).
        """
        n = len(tokens)
        self.queries += n
        if self.capacity == 0 or n <= self.block_size:
            return 0
        bs = self.block_size
        blocks = self._blocks
        key = 0
        cached = 0
        missed = False
        for start in range(0, n - bs + 1, bs):
            key = hash((key, *tokens[start:start + bs]))
            if not missed and key in blocks:
                blocks.move_to_end(key)
                cached = start + bs
            else:
                missed = True
                blocks[key] = None
        if cached >= n:
            cached -= bs
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        self.hits += cached
        return cached
