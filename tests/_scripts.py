"""The repository's scripts (``bench/``, ``scripts/``: folders that are not packages) as
modules, for tests that call their functions."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(relative: str) -> ModuleType:
    """The script at ``relative`` (``"bench/run_all.py"``) imported under its file's stem;
    what it imports of its neighbours while loading is found beside it."""
    path = ROOT / relative
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(path.stem)
    finally:
        sys.path.remove(folder)
