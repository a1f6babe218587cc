"""No module of ``rollout_kit`` imports itself back through others, type-only imports included:
a cycle makes an import order matter and two modules one unit to read."""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected parts (more than one module) of the direct import graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        # iterative Tarjan: (module, its imports still to visit)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, todo = work[-1]
            w = next(todo, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    part.append(m)
                    if m == v:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_the_import_graph_has_no_cycle() -> None:
    graph = grimp.build_graph("rollout_kit", include_external_packages=False)
    assert _cycles(graph) == []


def test_a_cycle_is_found() -> None:
    graph = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c", "p.d"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.c", imported="p.d")
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]
