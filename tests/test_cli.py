"""``rollout-kit``: one-line errors and exit codes, address checks, waiting for servers."""

from __future__ import annotations

import asyncio
import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rollout_kit import ConfigError, EngineConnectionError, NoHealthyServerError
from rollout_kit._cli import SUBCOMMANDS, Subcommand, error_line, main, resolve
from rollout_kit._cli.demo import _reason_lines, _wait_ready
from rollout_kit._paths import parse_address, prepare_output_dir, remove_output_dir

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rollout_kit", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=90, check=False)


def _assert_one_error_line(stderr: str, *needles: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("rollout-kit: error: ")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr and "Unclosed" not in stderr, stderr
    for needle in needles:
        assert needle in errors[0], stderr


class _Health(http.server.BaseHTTPRequestHandler):
    """``GET /health``: the statuses in ``server.statuses`` one by one, then the last one."""

    def do_GET(self) -> None:
        statuses: list[int] = self.server.statuses  # type: ignore[attr-defined]
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def health_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    server.statuses = [503]  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _address(server: http.server.ThreadingHTTPServer) -> str:
    return f"127.0.0.1:{server.server_address[1]}"


# -- addresses ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:8000", "127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "127.0.0.1:8000"),
    ("HTTP://localhost:1", "localhost:1"),
    ("https://example.org:443", "https://example.org:443"),
    ("[::1]:65535", "[::1]:65535"),
    (" 10.0.0.2:30000 ", "10.0.0.2:30000"),
])
def test_parse_address_accepts(text: str, expected: str) -> None:
    assert parse_address(text, "--sglang") == expected


@pytest.mark.parametrize(("text", "message"), [
    ("not a url", "is not a server address (expected host:port or http(s)://host:port)"),
    ("http://127.0.0.1:99999", "the port 99999 is out of range (1-65535)"),
    ("127.0.0.1:0", "the port 0 is out of range"),
    ("127.0.0.1", "is not a server address"),
    ("127.0.0.1:http", "the port 'http' is not a number"),
    ("ftp://127.0.0.1:21", "the scheme must be http:// or https://"),
    ("http://127.0.0.1:8000/generate", "without a path"),
    ("::1:8000", "IPv6 host in brackets"),
    (":8000", "is not a server address"),
])
def test_parse_address_rejects(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^--vllm ") as info:
        parse_address(text, "--vllm")
    assert message in str(info.value)


# -- one line on stderr, an exit code, no folder -------------------------------------------

@pytest.mark.parametrize(("address", "needle"), [
    ("not a url", "--sglang 'not a url' is not a server address"),
    ("http://127.0.0.1:99999", "the port 99999 is out of range (1-65535)"),
])
def test_demo_bad_address_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      address: str, needle: str) -> None:
    out = tmp_path / "out"
    assert main(["demo", "--sglang", address, "--out", str(out), "--no-progress"]) == 2
    _assert_one_error_line(capsys.readouterr().err, needle)
    assert not out.exists()


def test_demo_refused_connection_fails_fast_naming_the_address(tmp_path: Path) -> None:
    address = f"127.0.0.1:{_free_port()}"
    proc = _cli("demo", "--sglang", address, "--out", "out", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    _assert_one_error_line(proc.stderr, f"cannot connect to {address} (--sglang)",
                           "connection refused")
    assert not (tmp_path / "out").exists()


def test_demo_waits_for_an_unhealthy_server_then_says_why(
        tmp_path: Path, health_server: http.server.ThreadingHTTPServer) -> None:
    address = _address(health_server)
    proc = _cli("demo", "--vllm", f"http://{address}", "--setup-timeout", "1.5", "--out", "out",
                "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"rollout-kit: waiting up to 1.5 s (--setup-timeout) for {address} (--vllm)" \
        in proc.stderr
    assert "GET /health answered HTTP 503" in proc.stderr
    _assert_one_error_line(proc.stderr, f"{address} (--vllm) did not become healthy within 1.5 s")
    assert not (tmp_path / "out").exists()


def test_demo_engine_setup_failure_closes_sessions_and_removes_out(
        tmp_path: Path, health_server: http.server.ThreadingHTTPServer) -> None:
    # healthy for the CLI's own check, then never again: the controller's initialize fails
    health_server.statuses = [200, 503]  # type: ignore[attr-defined]
    address = _address(health_server)
    proc = _cli("demo", "--sglang", address, "--setup-timeout", "1", "--out", "o/out",
                "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    _assert_one_error_line(proc.stderr, address)
    assert not (tmp_path / "o").exists()


async def test_wait_ready_waits_until_healthy(
        health_server: http.server.ThreadingHTTPServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    health_server.statuses = [503, 500, 200]  # type: ignore[attr-defined]
    address = _address(health_server)
    await _wait_ready(address, "--sglang", timeout=30)
    err = capsys.readouterr().err
    assert f"waiting up to 30 s (--setup-timeout) for {address} (--sglang)" in err
    assert f"{address} (--sglang) is healthy" in err


async def test_wait_ready_errors() -> None:
    address = f"127.0.0.1:{_free_port()}"
    with pytest.raises(EngineConnectionError, match="connection refused") as info:
        await asyncio.wait_for(_wait_ready(address, "--vllm", timeout=60), 30)
    assert info.value.server == address
    with pytest.raises(EngineConnectionError, match="cannot resolve"):
        await _wait_ready("no-such-host.invalid:80", "--vllm", timeout=60)


async def test_wait_ready_times_out(health_server: http.server.ThreadingHTTPServer) -> None:
    with pytest.raises(NoHealthyServerError, match=r"did not become healthy within 0\.3 s"):
        await _wait_ready(_address(health_server), "--sglang", timeout=0.3)


def test_demo_bad_counts_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for opt in ("--tasks", "--n-samples", "--concurrency", "--setup-timeout"):
        assert main(["demo", opt, "0", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
        _assert_one_error_line(capsys.readouterr().err, f"{opt} must be")
    assert not (tmp_path / "o").exists()


def test_serve_bad_port_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["serve", "vllm-cpu", "--port", "99999", "--cache-dir", str(tmp_path / "c")])
    assert rc == 2
    _assert_one_error_line(capsys.readouterr().err, "--port 99999 is out of range (1-65535)")
    assert not (tmp_path / "c").exists()


def test_report_failure_leaves_no_folder(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "report"
    rc = main(["report", str(tmp_path / "missing.jsonl"), "--out", str(out), "--no-progress"])
    assert rc == 2
    _assert_one_error_line(capsys.readouterr().err, "missing.jsonl")
    assert not (tmp_path / "new").exists()


def test_error_line_is_one_line() -> None:
    assert error_line(ConfigError("a\n  b\n\nc")) == "rollout-kit: error: a b c"
    assert error_line(ConfigError("")) == "rollout-kit: error: ConfigError"


def test_prepare_output_dir_returns_what_it_created(tmp_path: Path) -> None:
    assert prepare_output_dir(tmp_path, force=False) is None
    created = prepare_output_dir(tmp_path / "a" / "b", force=False)
    assert created == (tmp_path / "a").absolute()
    remove_output_dir(created)
    assert list(tmp_path.iterdir()) == []
    remove_output_dir(None)


# -- failure reasons in the demo summary ----------------------------------------------------

def test_reason_lines_group_by_reason_and_first_error_line() -> None:
    tasks = pd.DataFrame({
        "status": ["failed"] * 5 + ["accepted", "cancelled", "failed"],
        "reason": ["no_healthy_server"] * 3 + ["server_error"] * 2
                  + [None, "cancelled", "workflow_exception"],
        "error": ["NoHealthyServerError: no server of sglang (127.0.0.1:1)\nTraceback ..."] * 3
                 + ["EngineServerError: 127.0.0.1:2 answered HTTP 500"] * 2
                 + [None, None, "ValueError: boom"],
    })
    lines = _reason_lines(tasks)
    assert lines[0] == ("3 failed (no_healthy_server): NoHealthyServerError: no server of "
                        "sglang (127.0.0.1:1)")
    assert lines[1] == "2 failed (server_error): EngineServerError: 127.0.0.1:2 answered HTTP 500"
    assert len(lines) == 4 and lines[3].startswith("1 more with 1 other reasons")
    assert _reason_lines(tasks[tasks["status"] == "accepted"]) == []


def test_demo_with_no_accepted_task_exits_1_with_the_reason(tmp_path: Path) -> None:
    # a vLLM client pointed at an SGLang simulator: every task fails
    sim = subprocess.Popen([sys.executable, "-m", "rollout_kit", "sim", "--api", "sglang",
                            "--zero-latency"], stdout=subprocess.PIPE, text=True)
    try:
        assert sim.stdout is not None
        url = sim.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        proc = _cli("demo", "--vllm", url, "--tasks", "3", "--out", "out", "--no-progress",
                    cwd=tmp_path)
    finally:
        sim.terminate()
        sim.wait(30)
    assert proc.returncode == 1, proc.stderr
    assert "status:   accepted=0, rejected=0, failed=3" in proc.stdout
    assert "reasons:  3 failed (" in proc.stdout and "/v1/completions" in proc.stdout
    assert "servers:  samples per server: " in proc.stdout
    _assert_one_error_line(proc.stderr, "none of the 3 tasks was accepted")
    assert (tmp_path / "out" / "tasks.csv").exists()  # the evidence stays


# -- the command table and --help ------------------------------------------------------------

def test_subcommands_are_an_explicit_table() -> None:
    assert set(SUBCOMMANDS) == {"sim", "demo", "report", "export", "serve", "load", "replay",
                                "convert"}
    for cmd in SUBCOMMANDS.values():
        assert isinstance(cmd, Subcommand) and callable(cmd.add_arguments) and callable(cmd.run)
        for ref in (cmd.arguments, cmd.runner):  # each reference names a function
            assert callable(resolve(ref)), ref


def test_help_imports_no_heavy_module(tmp_path: Path) -> None:
    code = ("import sys\nfrom rollout_kit._cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = ('pandas', 'aiohttp', 'numpy', 'rollout_kit._controller', 'tqdm')\n"
            "print('HEAVY=' + ','.join(m for m in heavy if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=True)
    assert "rollout-kit" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "HEAVY=", proc.stdout
