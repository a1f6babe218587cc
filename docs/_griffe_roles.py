"""Griffe extension for the documentation site (mkdocs.yml): adapts two habits of this
project's docstrings to what mkdocstrings renders.

* Sphinx roles (``:class:`~.core.Tracer```): Markdown has none, so each becomes a code span of
  the name a reader would see (the last dotted part with ``~``, the whole target otherwise).
* Grouped arguments (``seed, vocab_size: the vocabulary and seed ...`` in ``Args:``): the
  Google parser takes one name per entry, so the entry is repeated for each name.
* Lazy packages (``__init__.pyi`` read by ``lazy_loader.attach_stub``): their ``__all__`` is
  computed when imported, so griffe is given the list the package really exports.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|type):`([^`]+)`")
_ARGS = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|"
                   r"Other Parameters):\s*$")
_GROUP = re.compile(r"^(\s+)(\**\w+(?:\s*,\s*\**\w+)+)(\s*\([^)]*\))?:(.*)$")


def _name(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    if "<" in target and target.endswith(">"):  # :class:`text <target>`
        return f"`{target.split('<', 1)[0].strip()}`"
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target.lstrip('.')}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_groups(text: str) -> str:
    """``a, b: text`` entries of an arguments section, one entry per name."""
    lines = text.splitlines()
    out: list[str] = []
    i, section = 0, None  # section: the indent of the current arguments header
    while i < len(lines):
        line = lines[i]
        header = _ARGS.match(line)
        if header:
            section = len(header.group(1))
            out.append(line)
            i += 1
            continue
        if section is not None and line.strip() and _indent(line) <= section:
            section = None
        group = _GROUP.match(line) if section is not None else None
        if group is None:
            out.append(line)
            i += 1
            continue
        indent, names, kind, desc = group.groups()
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > len(indent)):
            j += 1
        more = lines[i + 1:j]
        for name in (n.strip() for n in names.split(",")):
            out += [f"{indent}{name}{kind or ''}:{desc}", *more]
        i = j
    return "\n".join(out)


class DocstringHabits(griffe.Extension):
    """Rewrites Sphinx roles and grouped arguments in every docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002
        if obj.docstring is not None:
            obj.docstring.value = split_groups(_ROLE.sub(_name, obj.docstring.value))


class LazyExports(griffe.Extension):
    """Gives each package that has an ``__init__.pyi`` stub the ``__all__`` it computes at
    import, which griffe cannot read from the source."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:  # noqa: ARG002
        stack = [pkg]
        while stack:
            module = stack.pop()
            stack.extend(m for m in module.modules.values() if not m.is_alias)
            path = module.filepath
            if module.exports is None and not isinstance(path, list) \
                    and path is not None and path.with_suffix(".pyi").is_file():
                module.exports = list(importlib.import_module(module.path).__all__)
