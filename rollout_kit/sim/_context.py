"""``ServerContext``: what every route handler of one simulated server shares."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field

from ._config import ApiName, SimConfig
from ._faults import FaultPlan
from ._state import SimEngine
from ._tokenizer import ByteTokenizer, SimTokenizer


@dataclass(eq=False)
class ServerContext:
    """Per-server state reachable from the aiohttp app (``app[CTX_KEY]``).

    Attributes:
        api: ``"sglang"`` or ``"vllm"``.
        config: the server's configuration.
        engine: scheduler state (slots, queue, pause, metrics).
        faults: the live fault plan.
        tokenizer: the server's tokenizer.
        created: wall-clock second the server was built (``created`` fields).
        port: the listening port once bound.
    """

    api: ApiName
    config: SimConfig
    engine: SimEngine
    faults: FaultPlan
    tokenizer: SimTokenizer = field(default_factory=ByteTokenizer)
    created: int = field(default_factory=lambda: int(time.time()))
    port: int = 0
    host: str = "127.0.0.1"
    _ids: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    _prefix: str = field(default_factory=lambda: os.urandom(8).hex(), repr=False)

    def next_id(self) -> str:
        """A unique request id: a random per-server prefix plus a counter (32 hex chars)."""
        return f"{self._prefix}{next(self._ids):016x}"
