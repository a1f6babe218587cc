"""The virtual environment that runs AReaL's own workflow and agent code, for compatibility tests.

:func:`ensure_areal_env` creates (once) a separate virtual environment with ``areal==1.0.4``
installed ``--no-deps`` (its full requirements pull CUDA builds and training stacks) plus only
what its workflow modules import, the PyTorch CPU build, and rollout_kit's own runtime
dependencies; rollout_kit itself is not installed there: a test puts the checkout on
``PYTHONPATH``. A marker file makes later calls instant and a file lock keeps two processes
from installing at once. The cache folder is ``$ROLLOUT_KIT_AREAL_CACHE`` (or
``~/.cache/rollout-kit/areal``); pip's output goes to ``CACHE/install.log``.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

from ._tiny_model import build_tiny_model
from ._venv import TORCH_VERSION, Installer, install_once, marker_of, venv_python

AREAL_VERSION = "1.0.4"
#: What ``areal.workflow.{rlvr,multi_turn}`` and ``areal.workflow.openai.math_agent`` import
#: (read from the wheel), within the transformers range the wheel pins.
AREAL_REQUIREMENTS: tuple[str, ...] = (
    "transformers>=5.0,<=5.3", "aiofiles", "colorama", "torchdata", "lark", "numba", "einops",
    "pillow", "hydra-core", "omegaconf", "pyyaml", "colorlog", "tenacity", "flask", "uvloop",
    "ray", "openai", "openai-agents", "math-verify",
)
#: rollout_kit's runtime dependencies (read from its installed metadata, so they are the ones
#: pyproject.toml names), the test runner and the notebook runner (nbval), for the checkout
#: on PYTHONPATH
PROJECT_REQUIREMENTS: tuple[str, ...] = (
    *(r for r in importlib.metadata.requires("rollout-kit") or () if "extra ==" not in r),
    "pytest>=8.1", "pytest-asyncio>=0.24", "pytest-timeout>=2.3", "nbval>=0.11",
    "ipykernel>=6.29", "nbclient", "nbformat",
)


def default_areal_cache_dir() -> Path:
    """``$ROLLOUT_KIT_AREAL_CACHE`` or ``~/.cache/rollout-kit/areal``."""
    env = os.environ.get("ROLLOUT_KIT_AREAL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rollout-kit" / "areal"


def _marker() -> dict[str, Any]:
    return {"areal": AREAL_VERSION, "torch": TORCH_VERSION,
            "requirements": list(AREAL_REQUIREMENTS + PROJECT_REQUIREMENTS)}


def areal_env_ready(venv: Path) -> bool:
    """Whether ``venv`` holds a finished install of this AReaL, torch and requirements."""
    marker = marker_of(venv)
    return marker is not None and all(marker.get(k) == v for k, v in _marker().items())


def ensure_areal_env(cache_dir: Path | None = None) -> Path:
    """Create (once) the venv with AReaL's workflow code; return its folder (``CACHE/venv``).

    Raises:
        rollout_kit.RolloutKitError: creating the environment, installing or importing
            AReaL's workflow modules failed (the message carries the tail of the log).
    """
    cache = (cache_dir or default_areal_cache_dir()).expanduser().resolve()

    def install(i: Installer) -> None:
        pip = [i.python, "-m", "pip", "install"]
        i.run([*pip, f"torch=={TORCH_VERSION}"], "pip install torch")
        i.run([*pip, "--no-deps", f"areal=={AREAL_VERSION}"], "pip install areal")
        i.run([*pip, *AREAL_REQUIREMENTS, *PROJECT_REQUIREMENTS],
              "pip install AReaL's workflow requirements")
        i.run([i.python, "-c", "import areal.workflow.rlvr, areal.workflow.multi_turn, "
               "areal.workflow.openai.math_agent, torch; print(torch.__version__)"],
              "importing AReaL's workflows")

    return install_once(cache, _marker(), install)


def ensure_areal_model(cache_dir: Path | None = None) -> Path:
    """The tiny model folder (tokenizer with a chat template) built with the AReaL venv."""
    cache = (cache_dir or default_areal_cache_dir()).expanduser().resolve()
    venv = ensure_areal_env(cache)
    return build_tiny_model(cache / "tiny-llama", venv_python(venv))
