"""Helpers for the engine tests: engines over simulated servers on 127.0.0.1."""

from __future__ import annotations

import resource
import socket
from typing import Any

import pytest

from rollout_kit.config import EngineConfig, RetryPolicy, Timeouts
from rollout_kit.engines import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine

FAST_RETRY = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.05)
FAST_TIMEOUTS = Timeouts(request=5.0, total=20.0, setup=5.0, health=1.0)


def make_engine(flavour: str, addresses: Any, **config: Any) -> RemoteInfEngine:
    """An engine of ``flavour`` with fast retries and timeouts unless overridden."""
    config.setdefault("retry", FAST_RETRY)
    config.setdefault("timeouts", FAST_TIMEOUTS)
    config.setdefault("health_probe_interval", 0.05)
    config.setdefault("pause_poll_interval", 0.01)
    cls = RemoteSGLangEngine if flavour == "sglang" else RemotevLLMEngine
    return cls(addresses, config=EngineConfig(**config))


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session", autouse=True)
def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 16384) if hard != resource.RLIM_INFINITY else 16384
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
