"""Shared fixtures. Matplotlib uses Agg here (not via MPLBACKEND, which would leak into the
nbval kernels and strip their figures).

The server fixtures (``sim_sglang``, ``sim_vllm``, ``sim_servers``, ``rollout_controller``,
``vllm_cpu_server``) come from rollout_kit's own pytest plugin, ``rollout_kit.testing._plugin``,
which the package registers (entry point ``pytest11``): the tests use it as users do.
"""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest


@pytest.fixture(scope="session", autouse=True)
def _raise_fd_limit() -> None:
    """Thousands of concurrent connections need more than the usual 1024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` here and in the processes the tests start, even in
    a run a shell started in the background (``cmd &``), which starts with SIGINT ignored:
    the Ctrl-C tests would otherwise wait for an interrupt that never comes."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")
