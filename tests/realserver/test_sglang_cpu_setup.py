"""rollout_kit.testing's SGLang CPU launcher without the real server: platform checks, the
install marker, failure paths (each a clear RolloutKitError, never a hang), the ``sgl_kernel``
stand-in, the torchvision patch and the CLI's ``--setup-only``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_kit import EngineConnectionError, RolloutKitError
from rollout_kit._cli import main
from rollout_kit.testing import (
    SGLangCPUServer,
    sglang_unsupported_reason,
)
from rollout_kit.testing import (
    _sglang_venv as sglang_venv,
)
from rollout_kit.testing import (
    _tiny_model as tiny_model,
)
from tests.realserver import launchers
from tests.realserver.launchers import BY_NAME

x86_linux = pytest.mark.skipif(sglang_unsupported_reason() is not None,
                               reason=f"needs an SGLang platform: {sglang_unsupported_reason()}")


def fake_venv(root: Path, *, marker: bool) -> Path:
    """A 'venv' whose python is this interpreter (no server in it), optionally marked ready."""
    return launchers.fake_venv(root, BY_NAME["sglang"].marker if marker else None)


def model_folder(root: Path, seed: int = 0, vocab: int = 320) -> Path:
    folder = root / f"tiny-llama-w{seed}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    (folder / "rollout-kit-model.json").write_text(json.dumps(
        {"format": tiny_model.MODEL_FORMAT, "vocab_size": vocab, "weights_seed": seed}))
    return folder


def _standin(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(sglang_venv.STANDIN_DIR)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=False, timeout=60)


def test_the_kernel_standin_imports_any_name_and_raises_when_called() -> None:
    """What SGLang does at start-up (``from sgl_kernel import <kernel>``) works; calling the
    kernel raises NotImplementedError naming it."""
    proc = _standin(
        "import sgl_kernel\n"
        "from sgl_kernel import copy_all_layer_kv_cache_cpu as k\n"
        "print(sgl_kernel.__doc__.split()[:3], k.__name__)\n"
        "try:\n"
        "    k(1, layer=2)\n"
        "except NotImplementedError as e:\n"
        "    print('raised:', e)\n")
    assert proc.returncode == 0, proc.stderr
    assert "copy_all_layer_kv_cache_cpu" in proc.stdout
    assert "raised: sgl_kernel.copy_all_layer_kv_cache_cpu was called" in proc.stdout
    assert "stand-in" in proc.stdout
    # dunder look-ups stay ordinary (hasattr probes, pickling, help())
    proc = _standin("import sgl_kernel; print(hasattr(sgl_kernel, '__wrapped__'))")
    assert proc.stdout.strip() == "False", proc.stderr


_META = '''import functools

import torch
import torch.library

# Ensure that torch.ops.torchvision is visible
import torchvision.extension  # noqa: F401


@functools.lru_cache(None)
def get_meta_lib():
    return torch.library.Library("torchvision", "IMPL", "Meta")


@torch.library.register_fake("torchvision::nms")
def meta_nms(dets, scores, iou_threshold):
    return dets


@torch.library.register_fake("torchvision::qnms")
def meta_qnms(dets, scores, iou_threshold):
    return dets
'''


def test_torchvision_patch_guards_each_fake_registration(tmp_path: Path) -> None:
    (tmp_path / "torchvision").mkdir()
    path = tmp_path / "torchvision" / "_meta_registrations.py"
    path.write_text(_META)
    assert sglang_venv.patch_torchvision(tmp_path) is True
    text = path.read_text()
    assert text.count("@_rk_register_fake(") == 2 and "@torch.library.register_fake(" not in text
    assert "if torchvision.extension._has_ops():" in text
    compile(text, str(path), "exec")  # still Python
    assert sglang_venv.patch_torchvision(tmp_path) is False  # once only
    path.write_text("def something_else(): pass\n")
    with pytest.raises(RolloutKitError, match="unexpected shape"):
        sglang_venv.patch_torchvision(tmp_path)
    with pytest.raises(RolloutKitError, match="cannot patch torchvision"):
        sglang_venv.patch_torchvision(tmp_path / "nowhere")


def test_a_weighted_model_folder_is_told_apart(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, seed=0)
    # a finished folder of these weights returns at once (python=None would install)
    assert tiny_model.build_tiny_model(folder, weights_seed=0) == folder.resolve()
    marker = json.loads((folder / "rollout-kit-model.json").read_text())
    assert not tiny_model._finished(marker, None) and not tiny_model._finished(marker, 1)


def test_server_command_and_environment(tmp_path: Path) -> None:
    server = SGLangCPUServer(fake_venv(tmp_path, marker=False), model_folder(tmp_path))
    cmd = server.command()
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    for flag, value in (("--device", "cpu"), ("--host", "127.0.0.1"),
                        ("--max-total-tokens", "8192"), ("--max-running-requests", "8"),
                        ("--context-length", "1024"), ("--served-model-name", "tiny")):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--enable-metrics" in cmd and "--sleep-on-idle" in cmd
    env = server.environment()
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["PYTHONPATH"] == str(sglang_venv.STANDIN_DIR)
    assert server.health_timeout >= 5  # /health takes about a second on a CPU
    assert repr(server).startswith("SGLangCPUServer(http://127.0.0.1:")


@x86_linux
def test_server_that_dies_at_start_raises_with_log(tmp_path: Path) -> None:
    server = SGLangCPUServer(fake_venv(tmp_path, marker=False), model_folder(tmp_path),
                             startup_timeout=60)
    with pytest.raises(EngineConnectionError, match="No module named 'sglang'") as info:
        server.start()
    assert "SGLang CPU server exited" in str(info.value)
    assert info.value.server == server.address and info.value.endpoint == "/health"
    assert not server.is_running()
    assert server.log_path.name == f"sglang-{server.port}.log"
    server.stop()


@x86_linux
def test_cli_setup_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv = fake_venv(tmp_path, marker=True)
    model = model_folder(tmp_path)
    assert main(["serve", "sglang-cpu", "--setup-only", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"venv: {venv}" in out and f"model: {model}" in out


@x86_linux
def test_cli_reports_start_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_venv(tmp_path, marker=True)
    model_folder(tmp_path)
    assert main(["serve", "sglang-cpu", "--cache-dir", str(tmp_path),
                 "--startup-timeout", "60"]) == 1
    assert "No module named 'sglang'" in capsys.readouterr().err
