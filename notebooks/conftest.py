"""``areal_workflows.ipynb`` runs AReaL's own code: it is collected where AReaL is installed
(the AReaL venv of ``tests/areal_own``, which runs it), and left out elsewhere."""

from __future__ import annotations

import importlib.util
from pathlib import Path

NEEDS_AREAL = {"areal_workflows.ipynb"}


def _areal_installed() -> bool:
    try:
        return importlib.util.find_spec("areal.workflow") is not None
    except ModuleNotFoundError:  # no ``areal`` package at all
        return False


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    if collection_path.name in NEEDS_AREAL and not _areal_installed():
        return True
    return None
