"""Fixtures for the browser end-to-end tests: a real JupyterLab server on loopback and a real
headless Chromium driven by Playwright.

- ``lab``: JupyterLab started with ``python -m jupyterlab`` on ``127.0.0.1`` (free port, random
  token, ``--no-browser``), rooted in a temp dir holding a copy of ``panel_e2e.ipynb``, with
  the project venv's ``python3`` kernel and throw-away Jupyter config/data/settings dirs.
- ``browser``: a Playwright browser context in Debian's Chromium (``/usr/bin/chromium``, or
  ``ROLLOUT_KIT_CHROMIUM``), launched with the flags a closed network needs (no background
  networking, component updates or sync) and a fresh ``--user-data-dir``.
- ``artifacts``: where screenshots go (``ROLLOUT_KIT_ARTIFACTS``, default a temp dir).

When Chromium or the Python packages are missing (run ``scripts/install-browser``), the tests
skip with the reason; under ``CI=true`` they fail instead. JupyterLab, its kernels and
Chromium are ended at teardown, also on failure: the server's process group, then any process
still carrying this run's marker variable in its environment.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "Lab", "unavailable"]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NOTEBOOK = HERE / "panel_e2e.ipynb"
CHROMIUM = os.environ.get("ROLLOUT_KIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
MARKER_ENV = "ROLLOUT_KIT_BROWSER_RUN"
LAB_START_TIMEOUT_S = 60.0

# The notebook is the test's fixture, not a notebook test of its own (nbval would run it).
collect_ignore_glob = ["*.ipynb"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: end-to-end in JupyterLab + headless Chromium "
        "(needs scripts/install-browser)")


def unavailable(reason: str) -> None:
    """Skip with ``reason``; under ``CI=true`` fail, since CI must run the browser test."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser test cannot run under CI=true: {reason}", pytrace=False)
    pytest.skip(f"browser test skipped: {reason}")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """The folder screenshots are written to (``ROLLOUT_KIT_ARTIFACTS`` or a new temp dir)."""
    given = os.environ.get("ROLLOUT_KIT_ARTIFACTS")
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="rollout-kit-artifacts-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pids_with_marker(value: str) -> list[int]:
    """Processes whose environment holds ``MARKER_ENV=value`` (this run's, nobody else's)."""
    needle = f"{MARKER_ENV}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def _kill_marked(value: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids_with_marker(value)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and _pids_with_marker(value):
            time.sleep(0.1)


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(grace_s)


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab server."""

    base_url: str
    token: str
    root: Path
    log: Path

    def url(self, path: str) -> str:
        """The URL of ``path`` (e.g. ``lab/tree/x.ipynb``) with the token attached."""
        return f"{self.base_url}/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET") -> Any:
        """Call the server's REST API; returns the decoded JSON (``None`` when empty)."""
        req = urllib.request.Request(f"{self.base_url}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-n:]


def _write_lab_settings(settings: Path) -> None:
    """Settings that keep the page deterministic: every cell rendered (no virtual
    scrolling), no news prompt, no update checks."""
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, artifacts: Path) -> Iterator[Lab]:
    """JupyterLab on a free loopback port with a random token, serving a copy of the
    test notebook; ended (with its kernels) at teardown."""
    if importlib.util.find_spec("jupyterlab") is None:
        unavailable("jupyterlab is not installed (run scripts/install-browser)")
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    dirs = {name: base / name for name in ("config", "data", "runtime", "ipython",
                                             "settings", "workspaces")}
    for d in dirs.values():
        d.mkdir()
    _write_lab_settings(dirs["settings"])
    port, token, marker = _free_port(), secrets.token_hex(16), secrets.token_hex(8)
    env = {**os.environ,
           "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
           "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "IPYTHONDIR": str(dirs["ipython"]),
           "JUPYTER_PLATFORM_DIRS": "1", "PYTHONPATH": str(REPO), MARKER_ENV: marker}
    env.pop("MPLBACKEND", None)
    log = base / "jupyterlab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.user_settings_dir={dirs['settings']}",
           f"--LabApp.workspaces_dir={dirs['workspaces']}",
           "--LabApp.news_url=", "--ServerApp.open_browser=False", "--allow-root",
           "--ServerApp.terminals_enabled=False",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=root, start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, root, log)
    try:
        deadline = time.monotonic() + LAB_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited ({proc.returncode}):\n{server.log_tail()}")
            try:
                server.api("status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in {LAB_START_TIMEOUT_S:.0f} s:\n"
                                f"{server.log_tail()}")
                time.sleep(0.2)
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.api("shutdown", method="POST")  # shuts its kernels down too
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(8)
        _stop_group(proc)
        _kill_marked(marker)  # kernels run in sessions of their own
        with contextlib.suppress(OSError):
            shutil.copy(log, artifacts / "jupyterlab.log")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium, launched by Playwright with a fresh user-data dir."""
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} not found (run scripts/install-browser)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (run scripts/install-browser)")
    marker = secrets.token_hex(8)
    profile = tempfile.mkdtemp(prefix="rollout-kit-chromium-")
    pw = sync_playwright().start()
    try:
        try:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                env={**os.environ, MARKER_ENV: marker},
                viewport={"width": 1100, "height": 1300}, device_scale_factor=1)
        except Exception as exc:
            unavailable(f"Chromium at {CHROMIUM} did not start: {str(exc)[:500]}")
        try:
            yield context
        finally:
            with contextlib.suppress(Exception):
                context.close()
    finally:
        with contextlib.suppress(Exception):
            pw.stop()
        _kill_marked(marker)
        shutil.rmtree(profile, ignore_errors=True)
