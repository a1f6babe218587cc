"""rollout_kit: drive LLM rollouts from a notebook, with one task-id source and perf traces.

The curated public API is listed once, in ``__init__.pyi`` beside this file: ``__all__`` is
made from it (sorted ignoring case). ``rollout_kit.sim``, ``rollout_kit.plotting``,
``rollout_kit.analysis``, ``rollout_kit.notebook`` and the other public subpackages are
imported by path, or as attributes (``rk.analysis.summary(...)``).

The names and subpackages are imported on first use (PEP 562, through ``lazy_loader``):
``import rollout_kit.tracing`` or ``rollout-kit --help`` do not pay for pandas and aiohttp.
Once imported, a class or function exported here names ``rollout_kit`` as its ``__module__``
(as httpx does): reprs and tracebacks show ``rollout_kit.RolloutController``, not the private
module that defines it, and pickle finds it here.
"""

from __future__ import annotations

import ast as _ast
import sys as _sys
from collections.abc import Callable as _Callable
from pathlib import Path as _Path
from typing import Any as _Any

import lazy_loader as _lazy


def _read_stub() -> tuple[frozenset[str], dict[str, list[str]]]:
    """The stub's subpackages (``from . import sub as sub``) and its names by the module that
    defines them (``from .m import X as X``: ``{"m": ["X"]}``), as ``lazy_loader`` reads it."""
    tree = _ast.parse(_Path(__file__).with_suffix(".pyi").read_text(encoding="utf-8"))
    subpackages: set[str] = set()
    names: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, _ast.ImportFrom):
            aliases = [alias.name for alias in node.names]
            if node.module:
                names.setdefault(node.module, []).extend(aliases)
            else:
                subpackages.update(aliases)
    return frozenset(subpackages), names


#: the public subpackages (``rk.analysis``), and the names by the module that defines them
_SUBMODULES, _BY_MODULE = _read_stub()
#: each public name -> the module that defines it (``"_controller"``)
_EXPORTS = {name: module for module, names in _BY_MODULE.items() for name in names}


def _attach_stub() -> tuple[_Callable[[str], _Any], _Callable[[], list[str]], list[str]]:
    """``lazy_loader.attach_stub``, with what this package adds: each exported class and
    function names ``rollout_kit`` as its module, an unknown name raises Python's usual
    ``AttributeError``, and ``__all__`` (the names, not the subpackages) is sorted ignoring
    case. ``attach_stub`` itself keeps the name -> module table, which the first needs."""
    load, lazy_dir, _ = _lazy.attach(__name__, _SUBMODULES, _BY_MODULE)

    def __getattr__(name: str) -> _Any:
        if name not in _EXPORTS and name not in _SUBMODULES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = load(name)  # binds it in globals(): later lookups skip this hook
        if name in _EXPORTS:
            _publish()
        return value

    return __getattr__, lazy_dir, sorted(_EXPORTS, key=str.casefold)


def _publish() -> None:
    """Set ``__module__`` to ``rollout_kit`` on every exported class and function whose module
    is loaded (importing one name loads others: the errors come with the controller). A name
    its module has not loaded yet (a lazy package's) is left to load when asked for."""
    for name, module in _EXPORTS.items():
        loaded = _sys.modules.get(f"{__name__}.{module}")
        obj = None if loaded is None else vars(loaded).get(name)
        if (isinstance(obj, type) or callable(obj)) \
                and getattr(obj, "__module__", "").startswith(__name__ + "."):
            obj.__module__ = __name__


__getattr__, __dir__, __all__ = _attach_stub()
