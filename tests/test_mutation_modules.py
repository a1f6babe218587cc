"""``scripts/mutation.py`` names files and tests by hand: each name still names something.

A module that moved (``tracing/_frames.py`` became a package) left a pattern that mutated
nothing, and the docs' score table a row of a module the script no longer has.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_mutation_script",
                                                  ROOT / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


MODULES = _script().MODULES
SOURCES = [p.relative_to(ROOT).as_posix() for p in (ROOT / "rollout_kit").rglob("*.py")]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_pattern_mutates_a_file_and_each_test_exists(name: str) -> None:
    module = MODULES[name]
    for pattern in module.files:  # as mutmut reads it (fnmatch)
        assert fnmatch.filter(SOURCES, pattern), f"{name}: {pattern} matches no source file"
    for test in module.tests:
        assert (ROOT / test).exists(), f"{name}: {test} does not exist"


def test_the_score_table_names_the_scripts_modules() -> None:
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.]+)` \| ", text.split("### Scores", 1)[1], re.M)
    assert rows and set(rows) <= set(MODULES), set(rows) - set(MODULES)
