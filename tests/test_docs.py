"""The documents are for users: no session notes, clock stamps or machine paths in them.

Covers ``README.md``, the pages of ``docs/`` and every docstring of ``rollout_kit``. The
benchmark tables that ``bench/run_all.py --write-readme`` writes between the ``bench:``
markers are checked too: the runner writes the command and the machine, never the time, the
load average or an output path. The site itself is built by ``scripts/test``
(``mkdocs build --strict``); here only what needs no build.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from tests._public import public_modules
from tests._scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: what a page or docstring must not hold, with why
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "a session reference ('stop 33')": re.compile(r"\bstop[- ]\d+\b", re.IGNORECASE),
    "a clock stamp ('14:33 UTC')": re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\s*(?:UTC|GMT|CET)\b"),
    "a date of a run (ISO)": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "an absolute machine path": re.compile(
        r"(?<![\w.~-])/(?:root|work|home/[\w.-]+|Users/[\w.-]+)(?=[/\s`'\")\]]|$)"),
}

#: the public modules but the package itself (its page is api/index.md)
PUBLIC_PACKAGES = [m.removeprefix("rollout_kit.") for m in public_modules() if m != "rollout_kit"]


def _pages() -> list[Path]:
    pages = [ROOT / "README.md"]
    for folder, dirs, files in os.walk(DOCS):  # not into docs/notebooks (a link to notebooks/)
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
        pages += [Path(folder) / f for f in files if f.endswith(".md")]
    return sorted(pages)


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((getattr(node, "lineno", 1), doc))
    return out


def _findings(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for what, rx in FORBIDDEN.items()
            for m in rx.finditer(text)]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_carry_no_session_notes_stamps_or_machine_paths(page: Path) -> None:
    bad = [f"line {n}: {f}"
           for n, text in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
           for f in _findings(text)]
    assert not bad, f"{page.relative_to(ROOT)}:\n" + "\n".join(bad)


def test_docstrings_carry_no_session_notes_stamps_or_machine_paths() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}: {f}"
           for path in sorted((ROOT / "rollout_kit").rglob("*.py"))
           for line, doc in _docstrings(path) for f in _findings(doc)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("text", [
    "Notes on the run of 14:33 UTC (stop 33)", "Correction (stop 34)", "the stop-33 runner",
    "2026-12-03, 07:39", "--json " + "/".join(["", "work", "main", "out", "b.json"]),
    "under " + "/".join(["", "root", ".cache"]), "/home/alice/x",
])
def test_the_checks_catch_what_they_are_for(text: str) -> None:
    assert _findings(text)


@pytest.mark.parametrize("text", [
    "stop a module after 600 s", "~/.cache/rollout-kit/vllm-cpu", "`rollout_kit/_gc.py`",
    "p50 12:1 ratio", "http://127.0.0.1:8000/v1", "tests/realserver", "the stop reason",
])
def test_the_checks_leave_ordinary_text_alone(text: str) -> None:
    assert not _findings(text)


def test_the_bench_runner_writes_no_time_load_or_output_path() -> None:
    run_all = load_script("bench/run_all.py")
    result = {"machine": {"cores": 2, "cpu": "AMD EPYC", "ram_gib": 23.5, "python": "3.11.7",
                          "platform": "Linux-6.1-x86_64", "os": "Linux x86_64",
                          "loadavg": [0.37, 0.12, 0.04], "time": "2026-12-04 05:10:04 UTC"},
              "loadavg_after": [1.12, 1.05, 0.66], "seconds": {"tracer": 156.5}}
    command = run_all.doc_command("quick", ["tracer", "sim"])
    assert command == "bench/run_all.py --quick --only tracer,sim"
    for text in (run_all.header(result, command), run_all.machine_line(result)):
        assert not _findings(text), text
        assert "0.37" not in text and "Load average" not in text
    assert "Linux x86_64" in run_all.machine_line(result)


@pytest.mark.parametrize(("path", "markers"), [
    ("README.md", ("<!-- bench:summary:begin -->", "<!-- bench:summary:end -->")),
    ("docs/performance.md", ("<!-- bench:table:begin -->", "<!-- bench:table:end -->")),
])
def test_the_bench_markers_are_there_once_and_in_order(path: str, markers: tuple[str, str]) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    begin, end = markers
    assert text.count(begin) == 1 and text.count(end) == 1
    assert text.index(begin) < text.index(end)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_package_has_an_api_page_in_the_nav(package: str) -> None:
    """A public package has its page; a public module of one (``tracing.schema``) is on its
    package's page."""
    page = DOCS / "api" / f"{package.split('.')[0]}.md"
    assert re.search(rf"^::: rollout_kit\.{package}$", page.read_text(encoding="utf-8"), re.M)
    assert f"api/{page.name}" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
