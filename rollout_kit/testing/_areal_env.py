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

import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from ._tiny_model import build_tiny_model
from ._venv import TORCH_VERSION, _run_logged, file_lock, read_json, venv_python

AREAL_VERSION = "1.0.4"
#: What ``areal.workflow.{rlvr,multi_turn}`` and ``areal.workflow.openai.math_agent`` import
#: (read from the wheel), within the transformers range the wheel pins.
AREAL_REQUIREMENTS: tuple[str, ...] = (
    "transformers>=5.0,<=5.3", "aiofiles", "colorama", "torchdata", "lark", "numba", "einops",
    "pillow", "hydra-core", "omegaconf", "pyyaml", "colorlog", "tenacity", "flask", "uvloop",
    "ray", "openai", "openai-agents", "math-verify",
)
#: rollout_kit's runtime dependencies, the test runner and the notebook runner (nbval), for
#: the checkout on PYTHONPATH.
PROJECT_REQUIREMENTS: tuple[str, ...] = (
    "aiohttp>=3.10", "orjson>=3.10", "pandas>=2.2", "numpy>=1.26", "matplotlib>=3.8",
    "ipywidgets>=8.1", "nest-asyncio2>=1.7.4", "tqdm>=4.66", "prometheus-client>=0.20",
    "pyarrow>=15", "pytest>=8.1", "pytest-asyncio>=0.24", "pytest-timeout>=2.3",
    "nbval>=0.11", "ipykernel>=6.29", "nbclient", "nbformat",
)
_MARKER = "rollout-kit-installed.json"


def default_areal_cache_dir() -> Path:
    """``$ROLLOUT_KIT_AREAL_CACHE`` or ``~/.cache/rollout-kit/areal``."""
    env = os.environ.get("ROLLOUT_KIT_AREAL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rollout-kit" / "areal"


def _ready(venv: Path) -> bool:
    marker = read_json(venv / _MARKER)
    return (marker is not None and marker.get("areal") == AREAL_VERSION
            and marker.get("torch") == TORCH_VERSION
            and marker.get("requirements") == list(AREAL_REQUIREMENTS + PROJECT_REQUIREMENTS)
            and venv_python(venv).exists())


def ensure_areal_env(cache_dir: Path | None = None) -> Path:
    """Create (once) the venv with AReaL's workflow code; return its folder (``CACHE/venv``).

    Raises:
        rollout_kit.RolloutKitError: creating the environment, installing or importing
            AReaL's workflow modules failed (the message carries the tail of the log).
    """
    cache = (cache_dir or default_areal_cache_dir()).expanduser().resolve()
    venv = cache / "venv"
    if _ready(venv):
        return venv
    with file_lock(cache / "install.lock"):
        if _ready(venv):
            return venv
        log_path = cache / "install.log"
        with log_path.open("w") as log:
            if venv.exists():
                shutil.rmtree(venv)
            _run_logged([sys.executable, "-m", "venv", str(venv)], log, "creating the venv",
                        log_path)
            py = str(venv_python(venv))
            env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            env.pop("PYTHONPATH", None)
            pip = [py, "-m", "pip", "install"]
            _run_logged([*pip, f"torch=={TORCH_VERSION}"], log, "pip install torch", log_path,
                        env)
            _run_logged([*pip, "--no-deps", f"areal=={AREAL_VERSION}"], log,
                        "pip install areal", log_path, env)
            _run_logged([*pip, *AREAL_REQUIREMENTS, *PROJECT_REQUIREMENTS], log,
                        "pip install AReaL's workflow requirements", log_path, env)
            check = ("import areal.workflow.rlvr, areal.workflow.multi_turn, "
                     "areal.workflow.openai.math_agent, torch; print(torch.__version__)")
            _run_logged([py, "-c", check], log, "importing AReaL's workflows", log_path, env)
        marker = {"areal": AREAL_VERSION, "torch": TORCH_VERSION,
                  "requirements": list(AREAL_REQUIREMENTS + PROJECT_REQUIREMENTS),
                  "python": platform.python_version(), "created": time.time()}
        (venv / _MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    return venv


def ensure_areal_model(cache_dir: Path | None = None) -> Path:
    """The tiny model folder (tokenizer with a chat template) built with the AReaL venv."""
    cache = (cache_dir or default_areal_cache_dir()).expanduser().resolve()
    venv = ensure_areal_env(cache)
    return build_tiny_model(cache / "tiny-llama", venv_python(venv))
