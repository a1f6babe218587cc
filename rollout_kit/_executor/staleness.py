"""Dispatch capacity, with AReaL's staleness formula when staleness control is on.

``capacity = max_concurrent_rollouts - running``; with ``max_staleness`` set also
``min(..., (max_staleness + version + 1) * consumer_batch_size - (accepted + running))``.
Accepted results count as soon as they finish (not when consumed); rejected ones do not.
"""

from __future__ import annotations

from .._config import ExecutorConfig


def capacity(config: ExecutorConfig, *, running: int, accepted: int, version: int) -> int:
    """How many more tasks may be dispatched now (may be negative)."""
    cap = config.max_concurrent_rollouts - running
    if config.max_staleness is not None:
        budget = (config.max_staleness + version + 1) * config.consumer_batch_size
        cap = min(cap, budget - (accepted + running))
    return cap


def stall_message(config: ExecutorConfig, *, accepted: int, version: int, queued: int) -> str:
    """Explain a staleness stall and how to release it."""
    return (
        f"staleness control stalls dispatch: {queued} task(s) queued, none running, capacity 0 "
        f"at version {version} (accepted={accepted}, max_staleness={config.max_staleness}, "
        f"consumer_batch_size={config.consumer_batch_size}); call set_version({version + 1}) "
        "after consuming a batch, or use a larger max_staleness (None turns it off)"
    )
