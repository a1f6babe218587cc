"""What the vLLM and SGLang CPU launchers share, checked for both without a real server: a
platform without a wheel gets a ConfigError naming why, the cache folder follows its
environment variable, a marked venv is reused without pip, and a failed install raises with
the log's tail and leaves no marker. Each launcher's own checks are in its setup module."""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import pytest

from rollout_kit import ConfigError, RolloutKitError
from tests.realserver.launchers import BY_NAME, LAUNCHERS, fake_venv, require_platform


@pytest.mark.parametrize(("name", "plat", "machine", "word"), [
    (launcher.name, *where) for launcher in LAUNCHERS for where in launcher.unsupported_platforms
])
def test_unsupported_platforms_get_a_config_error(monkeypatch: pytest.MonkeyPatch, name: str,
                                                  plat: str, machine: str, word: str) -> None:
    launcher = BY_NAME[name]
    monkeypatch.setattr(sys, "platform", plat)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    reason = launcher.unsupported()
    assert reason is not None and word in reason
    with pytest.raises(ConfigError, match=word):
        launcher.ensure(Path("unused"))


@pytest.mark.parametrize("name", BY_NAME)
def test_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               name: str) -> None:
    launcher = BY_NAME[name]
    monkeypatch.setenv(launcher.cache_env, str(tmp_path / "c"))
    assert launcher.default_cache() == tmp_path / "c"
    monkeypatch.delenv(launcher.cache_env)
    assert launcher.default_cache() == Path.home() / ".cache" / "rollout-kit" / launcher.folder


@pytest.mark.parametrize("name", BY_NAME)
def test_marked_env_is_reused_without_installing(tmp_path: Path, name: str) -> None:
    launcher = BY_NAME[name]
    require_platform(launcher)
    venv = fake_venv(tmp_path, launcher.marker)
    t0 = time.perf_counter()
    assert launcher.ensure(tmp_path) == venv
    assert time.perf_counter() - t0 < 5  # no pip run (an install takes minutes)
    assert not (tmp_path / "install.log").exists()


@pytest.mark.parametrize("name", BY_NAME)
def test_failed_install_raises_with_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             name: str) -> None:
    launcher = BY_NAME[name]
    require_platform(launcher)
    # an empty wheel folder and no index: pip fails at once; the half-made venv is not marked
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv(launcher.pip_env, f"--no-index --find-links {empty}")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    cache = tmp_path / "cache"
    with pytest.raises(RolloutKitError, match=launcher.failure) as info:
        launcher.ensure(cache)
    assert "log tail" in str(info.value)
    assert (cache / "install.log").stat().st_size > 0
    assert not (cache / "venv" / "rollout-kit-installed.json").exists()
