"""The import-layer tables of ``docs/architecture.md``, rendered from the import-linter contracts.

The contracts in ``pyproject.toml`` are what ``lint-imports`` enforces; the page shows them, so it
is rendered from them: each layer with the first sentence of its module's docstring, the layers
inside packages, and the forbidden imports. ``python -m tests._layers --write`` rewrites the
block between the page's markers; ``tests/test_architecture_doc.py`` checks it is current.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- layers:begin -->", "<!-- layers:end -->"
_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def contracts() -> list[dict[str, Any]]:
    """The import-linter contracts of ``pyproject.toml``, in order."""
    with (ROOT / "pyproject.toml").open("rb") as fh:
        found: list[dict[str, Any]] = tomllib.load(fh)["tool"]["importlinter"]["contracts"]
    return found


def summary(module: str) -> str:
    """The first sentence of ``module``'s docstring, as Markdown (read, not imported)."""
    path = ROOT / Path(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    doc = ast.get_docstring(ast.parse(file.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.split(r"(?<=[a-z)`])\. ", first)[0].rstrip(".")
    first = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", first)
    return _escape(first.replace("``", "`"))


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _names(layer: str) -> list[str]:
    return [n.strip() for n in re.split(r"[|:]", layer) if n.strip()]


def _layer(layer: str) -> str:
    return " \\| ".join(f"`{n}`" for n in _names(layer))


def _modules(names: list[str]) -> str:
    return ", ".join(f"`{n.removeprefix('rollout_kit.')}`" for n in names)


def render() -> str:
    """The Markdown between the markers."""
    all_contracts = contracts()
    [stack] = [c for c in all_contracts
               if c["type"] == "layers" and c["containers"] == ["rollout_kit"]]
    out = ["From the top, each layer may import only the layers below it (modules in one row",
           "are independent: neither imports the other):", "",
           "| layer | module | what it is |", "|---:|---|---|"]
    for i, layer in enumerate(stack["layers"], 1):
        for j, name in enumerate(_names(layer)):
            out.append(f"| {i if j == 0 else ''} | `rollout_kit.{name}` "
                       f"| {summary(f'rollout_kit.{name}')} |")
    out += ["", "Inside packages, from the top:", "", "| package | layers | contract |",
            "|---|---|---|"]
    for c in all_contracts:
        if c["type"] == "layers" and c is not stack:
            for container in c["containers"]:
                layers = " > ".join(_layer(x) for x in c["layers"])
                out.append(f"| `{container}` | {layers} | {_escape(c['name'])} |")
    out += ["", "Imports that are forbidden:", "", "| rule | these modules | import none of |",
            "|---|---|---|"]
    for c in all_contracts:
        if c["type"] == "forbidden":
            note = " (nor through others)" if not c.get("allow_indirect_imports") else ""
            out.append(f"| {_escape(c['name'])} | {_modules(c['source_modules'])} "
                       f"| {_modules(c['forbidden_modules'])}{note} |")
    rules = [c["name"] for c in all_contracts if c["type"] == "private_modules"]
    if rules:
        out += ["", "And for every package: " + "; ".join(rules) + "."]
    return "\n".join(out)


def current() -> str:
    """The block as the page has it now (between the markers)."""
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def write() -> None:
    """Rewrite the block in the page."""
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + render() + "\n" + text[end:], encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    elif sys.argv[1:]:
        raise SystemExit("usage: python -m tests._layers [--write]")
    else:
        print(render())
