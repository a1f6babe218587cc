"""AReaL's own code in its own venv: ``inside/`` holds tests that import ``areal`` and torch;
the project's run never collects them, and ``test_areal_own_code.py`` runs them with the AReaL
venv's interpreter (:mod:`rollout_kit.testing._areal_env`), the checkout on ``PYTHONPATH``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rollout_kit.testing._areal_env import ensure_areal_env, ensure_areal_model
from rollout_kit.testing._plugin import in_ci
from rollout_kit.testing._venv import venv_python

collect_ignore = ["inside"]

ROOT = Path(__file__).resolve().parents[2]
INSIDE = Path(__file__).resolve().parent / "inside"


@dataclass(frozen=True)
class AReaLEnv:
    python: Path
    model: Path

    def run(self, *tests: str, env: Mapping[str, str] | None = None) -> None:
        """Run ``inside/<tests>`` with the AReaL venv's pytest; fail with its output, or when
        any of them was skipped."""
        self.pytest(["-c", str(INSIDE / "pytest.ini"), "-q", *(str(INSIDE / t) for t in tests)],
                    cwd=INSIDE, env=env)

    def run_real(self, flavour: str, server: Any) -> None:
        """Run ``inside/test_areal_on_real_server.py`` against a running real server (with
        ``address`` and ``model_dir``) of ``flavour``."""
        self.run("test_areal_on_real_server.py",
                 env={"ROLLOUT_KIT_REAL_FLAVOUR": flavour,
                      "ROLLOUT_KIT_REAL_ADDRESS": server.address,
                      "ROLLOUT_KIT_AREAL_MODEL": str(server.model_dir)})

    def run_notebook(self, name: str) -> None:
        """Run ``notebooks/<name>`` under nbval (the project's settings) in the AReaL venv."""
        self.pytest(["-q", str(ROOT / "notebooks" / name)], cwd=ROOT)

    def pytest(self, args: list[str], *, cwd: Path,
               env: Mapping[str, str] | None = None) -> None:
        child = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLOUT_KIT_AREAL_MODEL": str(self.model),
                 **(env or {})}
        proc = subprocess.run([str(self.python), "-m", "pytest", *args], cwd=cwd, env=child,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              check=False)
        out = proc.stdout + proc.stderr
        sys.stdout.write(out[-4000:])
        assert proc.returncode == 0, \
            f"AReaL's tests failed (exit {proc.returncode}):\n{out[-8000:]}"
        summary = out.strip().splitlines()[-1]
        assert "passed" in summary and "skipped" not in summary, summary


@pytest.fixture(scope="session")
def areal_env() -> AReaLEnv:
    """The AReaL venv (set up once, cached); skipped with the reason where it cannot be set up,
    except under ``CI=true``; ``ROLLOUT_KIT_SKIP_AREAL=1`` skips on purpose."""
    if os.environ.get("ROLLOUT_KIT_SKIP_AREAL", "").lower() in {"1", "true", "yes"}:
        pytest.skip("AReaL tests disabled by ROLLOUT_KIT_SKIP_AREAL")
    try:
        venv = ensure_areal_env()
        model = ensure_areal_model()
    except Exception as exc:
        if in_ci():
            raise
        pytest.skip(f"the AReaL venv could not be set up (set CI=true to fail): "
                    f"{type(exc).__name__}: {exc}")
    return AReaLEnv(venv_python(venv), model)
