"""Engine settings for tests: fail fast instead of waiting as production settings do."""

from __future__ import annotations

from typing import Any

from .._config import EngineConfig, RetryPolicy, Timeouts

#: Three retries after 10, 20 and 40 ms (production: 0.2 s doubling up to 5 s).
FAST_RETRY = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.05)


def fast_engine_config(**overrides: Any) -> EngineConfig:
    """An :class:`~rollout_kit.EngineConfig` for tests.

    Fast retries (:data:`FAST_RETRY`), health probes every 50 ms, pause polls every 10 ms, and
    10 s / 5 s for setting up / one health check (SGLang's ``/health`` takes about a second
    on a CPU: 1 s failed it); request timeouts keep their defaults, so a slow real server
    (vLLM or SGLang on CPU) is not cut off.

    Args:
        **overrides: ``EngineConfig`` fields that replace these.
    """
    fields: dict[str, Any] = {
        "retry": FAST_RETRY,
        "timeouts": Timeouts(setup=10.0, health=5.0),
        "health_probe_interval": 0.05,
        "pause_poll_interval": 0.01,
    }
    fields.update(overrides)
    return EngineConfig(**fields)
