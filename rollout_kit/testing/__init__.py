"""Test support: real vLLM and SGLang servers on CPU, and a pytest plugin with server fixtures.

* The pytest plugin, registered under the name
  ``rollout_kit`` through the ``pytest11`` entry point, so installing rollout-kit is enough:
  fixtures ``sim_sglang``, ``sim_vllm``, ``sim_servers``, ``rollout_controller``,
  ``vllm_cpu_server`` and ``sglang_cpu_server`` (``pytest --fixtures`` lists them;
  ``-p no:rollout_kit`` turns them off).
* The virtual environment with ``vllm-cpu`` (created once,
  cached in ``$ROLLOUT_KIT_CACHE`` or ``~/.cache/rollout-kit/vllm-cpu``), and the one with
  SGLang (``$ROLLOUT_KIT_SGLANG_CACHE`` or ``~/.cache/rollout-kit/sglang-cpu``; SGLang's CUDA
  kernel package is replaced by an import-only stand-in that raises if a kernel is called).
  :func:`ensure_vllm_cpu_env` and :func:`ensure_sglang_cpu_env` create them;
  :func:`env_ready` and :func:`sglang_env_ready` say whether one is installed already.
* :func:`build_tiny_model` — a tiny random-weight Llama built locally;
  :func:`sglang_model_dir`, the one the SGLang server loads (built once per cache).
* :class:`VLLMCPUServer` and :class:`SGLangCPUServer`, the server processes.
* :func:`fast_engine_config`, engine settings that fail fast.

Usage outside pytest::

    from rollout_kit.testing import start_vllm_cpu_server

    with start_vllm_cpu_server() as server:
        print(server.url)    # http://127.0.0.1:PORT, model "tiny"

``rollout-kit serve vllm-cpu`` does the same from the command line; ``start_sglang_cpu_server``
and ``rollout-kit serve sglang-cpu`` start the SGLang one.
"""

from __future__ import annotations

from ._config import FAST_RETRY, fast_engine_config
from ._sglang_cpu import SGLangCPUServer, sglang_model_dir, start_sglang_cpu_server
from ._sglang_venv import (
    SGLANG_VERSION,
    default_sglang_cache_dir,
    ensure_sglang_cpu_env,
    sglang_env_ready,
    sglang_unsupported_reason,
)
from ._tiny_model import build_tiny_model
from ._venv import (
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    default_cache_dir,
    ensure_vllm_cpu_env,
    env_ready,
    unsupported_reason,
    venv_python,
)
from ._vllm_cpu import MODEL_NAME, VLLMCPUServer, start_vllm_cpu_server

__all__ = [
    "FAST_RETRY",
    "MODEL_NAME",
    "SGLANG_VERSION",
    "TORCH_VERSION",
    "VLLM_CPU_VERSION",
    "SGLangCPUServer",
    "VLLMCPUServer",
    "build_tiny_model",
    "default_cache_dir",
    "default_sglang_cache_dir",
    "ensure_sglang_cpu_env",
    "ensure_vllm_cpu_env",
    "env_ready",
    "fast_engine_config",
    "sglang_env_ready",
    "sglang_model_dir",
    "sglang_unsupported_reason",
    "start_sglang_cpu_server",
    "start_vllm_cpu_server",
    "unsupported_reason",
    "venv_python",
]
