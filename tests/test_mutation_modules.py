"""``scripts/mutation.py`` names files and tests by hand: each name still names something.

A module that moved (``tracing/_frames.py`` became a package) left a pattern that mutated
nothing, and the docs' score table a row of a module the script no longer has.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from tests._scripts import load_script

ROOT = Path(__file__).resolve().parent.parent


MODULES = load_script("scripts/mutation.py").MODULES
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
