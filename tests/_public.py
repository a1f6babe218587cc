"""The public surface: every module of ``rollout_kit`` whose dotted path has no private part.

Implementation modules start with ``_`` (``rollout_kit.engines._http``); what a user imports is
a public package's ``__all__``. The API reference (``docs/api/*.md``) documents exactly these.
"""

from __future__ import annotations

import importlib
import pkgutil

import rollout_kit


def public_modules() -> list[str]:
    """``rollout_kit`` and its modules and packages with no ``_``-prefixed part, sorted."""
    names = ["rollout_kit"]
    for info in pkgutil.walk_packages(rollout_kit.__path__, "rollout_kit."):
        parts = info.name.split(".")[1:]
        if not any(p.startswith("_") for p in parts):
            names.append(info.name)
    return sorted(names)


def surface() -> list[str]:
    """Every public name as ``module.name``, in the order of the modules and their ``__all__``."""
    return [f"{m}.{n}" for m in public_modules() for n in importlib.import_module(m).__all__]


if __name__ == "__main__":
    print("\n".join(surface()))
