"""A real inference server as a child process on a free loopback port: start, wait, stop.

:class:`ServerProcess` is what the vLLM and SGLang CPU servers share — the process group (so
stopping reaches the engine's child processes too), the log file, the wait for the health
route, the retry on a port taken in between, and kill / restart for the reliability tests.
A subclass says which command and environment start it.
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
from typing import Self

from .._errors import ConfigError, ControllerStateError, EngineConnectionError, EngineTimeoutError
from ._venv import LOG_TAIL_CHARS, read_json

HOST = "127.0.0.1"
_KEEP_LOGS = 20


def prune_logs(folder: Path, prefix: str, *, keep: int, spare: Path) -> None:
    """Delete all but the ``keep`` newest ``PREFIX-*.log`` files in ``folder`` (never ``spare``)."""
    logs = sorted((p for p in folder.glob(f"{prefix}-*.log") if p != spare),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in logs[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def get_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of ``GET url`` (``None`` when nothing answered in ``timeout``)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


class ServerProcess:
    """A server on ``127.0.0.1`` run by ``command()`` in its own process group.

    Attributes:
        venv: the virtual environment that runs it.
        model_dir: the model folder (its ``config.json`` gives ``vocab_size``).
        port: the port (chosen free at construction time unless given).
        log_path: the server's log file (appended to on every start).
        startup_timeout: seconds to wait for the health route on each start.
        vocab_size: the model's vocabulary size.
        extra_args: more command-line arguments.
    """

    #: the server's name in messages, e.g. ``"vLLM CPU server"``
    label = "server"
    #: the log files' prefix (``PREFIX-PORT.log``)
    log_prefix = "server"
    #: the route that answers 200 once the server is ready
    health_path = "/health"
    #: seconds one health request may take
    health_timeout = 2.0

    def __init__(self, venv: Path, model_dir: Path, *, port: int | None = None,
                 log_path: Path | None = None, startup_timeout: float = 240.0,
                 extra_args: Sequence[str] = ()) -> None:
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
        self.port = port if port is not None else free_port()
        self.log_path = log_path or (venv.parent / "logs" / f"{self.log_prefix}-{self.port}.log")
        self.startup_timeout = startup_timeout
        self.vocab_size: int = config["vocab_size"]
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._explicit_port = port is not None

    # -- what a subclass says ---------------------------------------------------------------

    def command(self) -> list[str]:
        """The command line that starts the server."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The server's environment (default: this process's, without ``PYTHONPATH``)."""
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        return env

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` of the server."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``."""
        return f"http://{self.address}"

    @property
    def pid(self) -> int | None:
        """Process id of the server (the process-group leader), or ``None``."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """Whether the server process is alive (not necessarily healthy)."""
        return self._proc is not None and self._proc.poll() is None

    def healthy(self, timeout: float | None = None) -> bool:
        """Whether the health route answers 200 now (within ``timeout``, default
        :attr:`health_timeout`)."""
        wait = self.health_timeout if timeout is None else timeout
        return get_status(f"{self.url}{self.health_path}", wait) == 200

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the server and wait until its health route answers 200.

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
            raise ControllerStateError(f"the {self.label} at {self.url} is already running")
        for attempt in range(3):
            try:
                self._start_once()
                return self
            except EngineConnectionError as exc:
                in_use = "address already in use" in str(exc).lower()
                if self._explicit_port or not in_use or attempt == 2 or isinstance(
                        exc, EngineTimeoutError):
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        prune_logs(self.log_path.parent, self.log_prefix, keep=_KEEP_LOGS, spare=self.log_path)
        env = self.environment()
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
        health = self.health_path
        while True:
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise EngineConnectionError(
                    f"the {self.label} exited with code {code} before becoming healthy; "
                    f"log: {self.log_path}\n--- log tail ---\n{self._log_since(start_offset)}",
                    server=self.address, endpoint=health)
            if self.healthy():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise EngineTimeoutError(
                    f"the {self.label} did not answer {health} with 200 within "
                    f"{self.startup_timeout:.0f} s; log: {self.log_path}\n--- log tail ---\n"
                    f"{self._log_since(start_offset)}", server=self.address, endpoint=health)
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
        # the engine's children may outlive the API server: make sure the group is gone
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

    def restart(self) -> Self:
        """Stop (if running) and start again on the same port; returns ``self``."""
        self.stop()
        self._explicit_port = True  # clients keep the address they already have
        return self.start()

    def _forget(self) -> None:
        self._proc = None
        atexit.unregister(self._kill_at_exit)

    def _kill_at_exit(self) -> None:
        self._signal_group(signal.SIGKILL)

    def __enter__(self) -> Self:
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"{type(self).__name__}({self.url}, {state})"
