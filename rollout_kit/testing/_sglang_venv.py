"""The virtual environment that runs SGLang on CPU, and the stand-in for its kernel package.

:func:`ensure_sglang_cpu_env` creates (once) a separate virtual environment with SGLang 0.5.23
on the CPU build of torch 2.13.0 and records a marker so later calls are instant. SGLang's
wheel asks for CUDA packages (its kernels, flashinfer, the CUDA torch); on CPU none of them is
used, so its other requirements are installed with torch held at the CPU build and SGLang
itself with ``--no-deps``. Two things then stand in for what PyPI lacks:

* ``sgl_kernel`` — SGLang imports CPU kernel names from it at start-up; PyPI's kernel wheels
  hold CUDA code only. :data:`STANDIN_DIR` holds an import-only stand-in package (see its
  docstring) that the server finds first on ``PYTHONPATH``: a kernel actually called raises
  ``NotImplementedError`` naming it.
* ``torchvision`` — PyPI's wheel is linked against the CUDA torch, and registering its fake
  operators fails beside the CPU one (``operator torchvision::nms does not exist``); SGLang
  imports it at start-up, so the install makes that registration conditional on the
  operators being there (:func:`patch_torchvision`).

Only ``pip`` talks to the configured package index. The cache folder is
``$ROLLOUT_KIT_SGLANG_CACHE`` (or ``~/.cache/rollout-kit/sglang-cpu``); extra pip arguments
(e.g. PyTorch's CPU wheel index) can be given in ``$ROLLOUT_KIT_SGLANG_PIP_ARGS``.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from .._errors import ConfigError, RolloutKitError
from ._venv import TORCH_VERSION, Installer, install_once, marker_of

SGLANG_VERSION = "0.5.23"
#: The folder to put first on the server's ``PYTHONPATH``: it holds the ``sgl_kernel`` stand-in.
STANDIN_DIR = Path(__file__).resolve().parent / "_standin"
#: The format of the install; a venv of another format is rebuilt.
_FORMAT = 1
#: SGLang 0.5.23's requirements (its wheel's ``Requires-Dist``) less the CUDA-only ones
#: (kernels, flashinfer, flash-attn, cutlass, deep-ep/-gemm, nvidia-*, cuda-python, tilelang,
#: torch_memory_saver, torchaudio, torchcodec, py-spy, kernels, deepseek-recipe,
#: tml-renderers), with torchvision held at the release built for torch 2.13.
REQUIREMENTS = (
    "aiohttp", "anthropic>=0.20.0", "apache-tvm-ffi==0.1.11", "blobfile==3.0.0", "build",
    "compressed-tensors==0.18.0", "datasets", "distro", "easydict", "einops", "fastapi", "gguf",
    "interegular", "IPython", "llguidance>=1.7.6,<2.0.0", "mistral_common>=1.11.5",
    "modelscope", "msgspec", "ninja", "numba==0.65.1", "numpy", "openai==2.8.0",
    "openai-harmony==0.0.4", "orjson", "outlines==0.1.11", "packaging", "partial_json_parser",
    "pillow", "prometheus-client>=0.20.0", "psutil", "pybase64", "pydantic",
    "python-dateutil<3", "python-multipart", "pyzmq>=25.1.2", "regex", "requests", "scipy",
    "sentencepiece==0.2.1", "setproctitle", "smg-grpc-servicer>=0.9.0", "soundfile==0.13.1",
    "tiktoken", "timm==1.0.25", "tokenizers==0.23.2", "tqdm", "transformers==5.19.0",
    "uvicorn>=0.51", "uvloop", "watchfiles", "xgrammar==0.2.7", "xxhash", "zstandard",
    "torchvision==0.28.0", "triton",
)
#: What the new venv must import (with the stand-in on ``PYTHONPATH``) before it is marked ready.
_CHECK = ("import torch, torchvision, transformers, sgl_kernel, sglang\n"
          "from sglang.srt.entrypoints import http_server\n"
          "assert torch.__version__.split('+')[0] == {torch!r}, torch.__version__\n"
          "print(sglang.__version__, torch.__version__)\n")


def default_sglang_cache_dir() -> Path:
    """The cache folder: ``$ROLLOUT_KIT_SGLANG_CACHE`` or ``~/.cache/rollout-kit/sglang-cpu``."""
    env = os.environ.get("ROLLOUT_KIT_SGLANG_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "rollout-kit" / "sglang-cpu"


def sglang_unsupported_reason() -> str | None:
    """Say why this platform cannot run SGLang's CPU server here, or ``None`` when it can.

    SGLang 0.5.23 publishes compiled wheels for Linux on x86_64 only.
    """
    if not sys.platform.startswith("linux"):
        return f"SGLang {SGLANG_VERSION} has wheels for Linux only, not {sys.platform}"
    machine = platform.machine().lower()
    if machine not in {"x86_64", "amd64"}:
        return f"SGLang {SGLANG_VERSION} has wheels for x86_64 only here, not {machine}"
    return None


def _marker() -> dict[str, Any]:
    return {"sglang": SGLANG_VERSION, "torch": TORCH_VERSION, "format": _FORMAT}


def sglang_env_ready(venv: Path) -> bool:
    """Whether ``venv`` holds a finished install of the pinned SGLang and torch."""
    marker = marker_of(venv)
    return marker is not None and all(marker.get(k) == v for k, v in _marker().items())


# torchvision registers fake kernels for its C++ operators at import; ``register_meta`` already
# asks ``torchvision.extension._has_ops()``, but ``@torch.library.register_fake(...)`` does not,
# and beside a torch it was not built for the operators are missing and it raises.
_FAKE = "@torch.library.register_fake("
_GUARDED = "@_rk_register_fake("
_GUARD = ("\n\n# rollout-kit: register fakes only where the operators exist (not beside a CPU "
          "torch)\n"
          "def _rk_register_fake(*args, **kwargs):\n"
          "    if torchvision.extension._has_ops():\n"
          "        return torch.library.register_fake(*args, **kwargs)\n"
          "    return lambda fn: fn\n\n")


def patch_torchvision(site_packages: Path) -> bool:
    """Make torchvision's fake-operator registration conditional on its operators existing.

    Each ``@torch.library.register_fake(...)`` of ``torchvision/_meta_registrations.py`` then
    registers only when ``torchvision.extension._has_ops()`` is true (as its
    ``register_meta`` already does), so ``import torchvision`` works beside the CPU torch; the
    image operators stay unavailable, and SGLang's text serving does not call them.

    Returns:
        Whether the file was changed (``False`` when it already was).

    Raises:
        RolloutKitError: the file is missing or has an unexpected shape.
    """
    path = site_packages / "torchvision" / "_meta_registrations.py"
    try:
        src = path.read_text()
    except OSError as exc:
        raise RolloutKitError(f"cannot patch torchvision: {exc}") from None
    if _GUARDED in src:
        return False
    anchor = src.find("\n@")  # the guard goes before the first decorated function
    if _FAKE not in src or "import torchvision.extension" not in src or anchor < 0:
        raise RolloutKitError(f"unexpected shape of {path}: nothing to guard")
    src = src[:anchor] + _GUARD + src[anchor:].replace(_FAKE, _GUARDED)
    path.write_text(src)
    return True


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise RolloutKitError(f"no site-packages folder in {venv}")
    return found[0]


def ensure_sglang_cpu_env(cache_dir: Path | None = None) -> Path:
    """Create (once) the virtual environment that runs SGLang's server on CPU.

    Installs ``torch==2.13.0`` (the CPU build) with SGLang's non-CUDA requirements
    (:data:`REQUIREMENTS`, torch held by a constraint), then ``sglang==0.5.23`` without its
    dependencies, patches torchvision (:func:`patch_torchvision`), checks that SGLang's HTTP
    server imports with the ``sgl_kernel`` stand-in, and writes a marker file so the next call
    returns at once. A file lock keeps two processes from installing at the same time. pip's
    output goes to ``CACHE/install.log``.

    Args:
        cache_dir: the cache folder; default :func:`default_sglang_cache_dir`.

    Returns:
        The virtual environment folder (``CACHE/venv``).

    Raises:
        ConfigError: the platform has no SGLang wheel.
        RolloutKitError: creating the environment or installing failed (the message carries
            the tail of the log).
    """
    reason = sglang_unsupported_reason()
    if reason is not None:
        raise ConfigError(reason)
    cache = (cache_dir or default_sglang_cache_dir()).expanduser().resolve()
    extra = shlex.split(os.environ.get("ROLLOUT_KIT_SGLANG_PIP_ARGS", ""))

    def install(i: Installer) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            constraints = Path(tmp) / "torch.txt"
            constraints.write_text(f"torch=={TORCH_VERSION}\n")
            i.run([i.python, "-m", "pip", "install", *extra, "-c", str(constraints),
                   f"torch=={TORCH_VERSION}", *REQUIREMENTS], "pip install SGLang's requirements")
        i.run([i.python, "-m", "pip", "install", *extra, "--no-deps", f"sglang=={SGLANG_VERSION}"],
              "pip install sglang")
        patch_torchvision(_site_packages(Path(i.python).parent.parent))
        i.run([i.python, "-c", _CHECK.format(torch=TORCH_VERSION)],
              "importing SGLang in the new venv",
              {**i.env, "PYTHONPATH": str(STANDIN_DIR), "SGLANG_USE_CPU_ENGINE": "1"})

    return install_once(cache, _marker(), install)
