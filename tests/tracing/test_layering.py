"""The tracing modules import one way: no cycle, type-only and function-level imports included.

A package of tracing (``_chrome/``, ``_store/``, …) is one node: the imports of all its modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rollout_kit.tracing

PKG = Path(rollout_kit.tracing.__file__).parent


def _files(mod: str) -> list[Path]:
    """The source of a tracing module, or every module of a tracing package."""
    path = PKG / f"{mod}.py"
    return [path] if path.is_file() else sorted((PKG / mod).rglob("*.py"))


def _graph() -> dict[str, set[str]]:
    """Tracing module or package -> the tracing modules and packages it imports."""
    mods = {p.stem for p in PKG.glob("*.py")} | {
        p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    graph: dict[str, set[str]] = {}
    for mod in mods:
        deps: set[str] = set()
        for path in _files(mod):
            up = len(path.relative_to(PKG).parts)  # the level of a relative import of tracing
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == up:
                    names = [node.module] if node.module else [a.name for a in node.names]
                    deps |= {n.split(".")[0] for n in names}
                elif isinstance(node, ast.ImportFrom | ast.Import) and not (
                        isinstance(node, ast.ImportFrom) and node.level):
                    full = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                        a.name for a in node.names]
                    deps |= {n.split(".")[2] for n in full
                             if n.startswith("rollout_kit.tracing.")}
        graph[mod] = (deps & mods) - {mod}
    return graph


def test_no_import_cycle_among_tracing_modules() -> None:
    graph = _graph()
    done: set[str] = set()

    def visit(mod: str, path: list[str]) -> None:
        if mod in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(mod):], mod]))
        if mod in done:
            return
        for dep in sorted(graph[mod]):
            visit(dep, [*path, mod])
        done.add(mod)

    for mod in sorted(graph):
        visit(mod, [])


def test_scopes_and_live_table_do_not_import_the_tracer() -> None:
    graph = _graph()
    for low in ("_live", "_context", "_scopes", "_codes", "_store"):
        assert "_tracer" not in graph[low], low
