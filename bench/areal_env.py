"""The bench environment that runs AReaL's own ``SessionTracer``.

``bench_tracer.py`` measures AReaL's ``areal.utils.perf_tracer`` at the PR-759 snapshot
(commit ``42b9244ed`` of inclusionAI/AReaL) side by side with rollout_kit's ``Tracer``, each in
a subprocess of its own. AReaL's module imports torch, hydra, omegaconf, ray, uvloop,
colorlog, pyyaml and orjson on the way in (``areal.api.cli_args``, ``areal.utils.logging``),
so it runs in a virtual environment of its own, never in the project's.

Where things are (nothing here names a path of one machine):

* the source tree: ``$ROLLOUT_KIT_AREAL_SRC``, default
  ``~/.cache/rollout-kit/areal-42b9244ed/src`` — the commit's tree, exported from a clone of
  the repository (``git archive 42b9244ed | tar -x -C <that folder>``); this module cannot
  download it;
* the virtual environment: ``$ROLLOUT_KIT_AREAL_VENV``, default
  ``~/.cache/rollout-kit/areal-42b9244ed/venv``, made by :func:`setup`
  (``bench/run_all.py --setup-areal`` or ``python bench/areal_env.py``) with pip from the
  configured package index; extra pip arguments in ``$ROLLOUT_KIT_AREAL_PIP_ARGS`` (for
  example PyTorch's CPU wheel index where ``torch==2.13.0`` resolves to a CUDA build).

:func:`unavailable` says why the AReaL row cannot run (``None``: it can); the benchmark then
prints the row as skipped with that reason, never a remembered number.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import venv
from pathlib import Path

__all__ = ["AREAL_COMMIT", "AREAL_REPO", "PACKAGES", "cache_dir", "main", "python", "setup",
           "source_dir", "unavailable", "venv_dir"]

AREAL_REPO = "inclusionAI/AReaL"
AREAL_COMMIT = "42b9244ed"  # PR 759, 2025-12-24
#: what ``areal.utils.perf_tracer`` imports on its way in (torch: the CPU wheel)
PACKAGES = ("torch==2.13.0", "transformers", "hydra-core", "omegaconf", "colorlog", "ray",
            "uvloop", "pyyaml", "orjson", "packaging")
_PROBE = "import areal.utils.perf_tracer"
_MARKER = "rollout-kit-areal-ready"


def cache_dir() -> Path:
    """``~/.cache/rollout-kit/areal-42b9244ed``: the default home of the source and venv."""
    return Path.home() / ".cache" / "rollout-kit" / f"areal-{AREAL_COMMIT}"


def source_dir() -> Path:
    """AReaL's source tree at :data:`AREAL_COMMIT` (``$ROLLOUT_KIT_AREAL_SRC``)."""
    env = os.environ.get("ROLLOUT_KIT_AREAL_SRC")
    return Path(env).expanduser() if env else cache_dir() / "src"


def venv_dir() -> Path:
    """The bench virtual environment (``$ROLLOUT_KIT_AREAL_VENV``)."""
    env = os.environ.get("ROLLOUT_KIT_AREAL_VENV")
    return Path(env).expanduser() if env else cache_dir() / "venv"


def python() -> Path:
    """The bench environment's interpreter."""
    return venv_dir() / "bin" / "python"


def _shown(path: Path) -> str:
    """``path`` with the home folder as ``~``: notes go into the docs, machine paths do not."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def _source_missing() -> str | None:
    src = source_dir()
    if not (src / "areal" / "utils" / "perf_tracer.py").is_file():
        return (f"AReaL source not found at {_shown(src)} (set ROLLOUT_KIT_AREAL_SRC, or "
                f"export commit {AREAL_COMMIT} of {AREAL_REPO} there: git archive "
                f"{AREAL_COMMIT} | tar -x -C {_shown(src)})")
    return None


def probe_env() -> dict[str, str]:
    """The environment a subprocess of the bench venv runs in (AReaL's tree on the path)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.fspath(source_dir())
    env.pop("PYTHONHOME", None)
    return env


def unavailable() -> str | None:
    """Why AReaL's tracer cannot be measured here, or ``None`` when it can."""
    missing = _source_missing()
    if missing:
        return missing
    if not python().is_file():
        return (f"no AReaL bench environment at {venv_dir()} (make it with "
                "`bench/run_all.py --setup-areal`)")
    if not (venv_dir() / _MARKER).is_file():
        return (f"the AReaL bench environment at {venv_dir()} is incomplete (rerun "
                "`bench/run_all.py --setup-areal`)")
    return None


def setup(log: Path | None = None) -> str | None:
    """Create the bench environment and check that AReaL's tracer imports in it.

    Returns:
        ``None`` on success, else why it could not be made (the tail of pip's or the import's
        output; the whole of it is in ``log``, default ``<venv>.log``).
    """
    missing = _source_missing()
    if missing:
        return missing
    target = venv_dir()
    log = log or target.with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    (target / _MARKER).unlink(missing_ok=True)
    try:
        if not python().is_file():
            venv.EnvBuilder(with_pip=True, clear=True).create(target)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"cannot create a virtual environment at {target}: {exc}"
    extra = shlex.split(os.environ.get("ROLLOUT_KIT_AREAL_PIP_ARGS", ""))
    steps = [
        [os.fspath(python()), "-m", "pip", "install", "--disable-pip-version-check",
         *PACKAGES, *extra],
        [os.fspath(python()), "-c", _PROBE],
    ]
    with log.open("a") as fh:
        for cmd in steps:
            fh.write(f"\n$ {shlex.join(cmd)}\n")
            fh.flush()
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=probe_env(), check=False)
            if proc.returncode != 0:
                fh.flush()
                text = log.read_text(errors="replace")[-1500:]
                return (f"`{shlex.join(cmd[:4])} …` failed (exit {proc.returncode}); "
                        f"log {log}:\n{text}")
    (target / _MARKER).write_text(f"{AREAL_REPO}@{AREAL_COMMIT}\n")
    return None


def main() -> int:
    """``python bench/areal_env.py``: make the environment, say where or why not."""
    reason = setup()
    if reason:
        print(f"AReaL bench environment: not made: {reason}", file=sys.stderr)
        return 1
    print(f"AReaL bench environment ready: {python()} (source {source_dir()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
