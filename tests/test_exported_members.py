import importlib
import re
import types
from pathlib import Path

import pytest

import rollout_kit
from tests._public import public_modules, surface

ROOT = Path(__file__).resolve().parent.parent


def test_all_is_sorted_and_complete() -> None:
    public = sorted(
        (name for name in dir(rollout_kit) if not name.startswith("_") or name == "__version__"),
        key=str.casefold,
    )
    exported = [n for n in public if not _is_submodule(n)]
    assert rollout_kit.__all__ == sorted(rollout_kit.__all__, key=str.casefold)
    assert sorted(rollout_kit.__all__, key=str.casefold) == exported


def test_every_lazy_export_resolves() -> None:
    # the names are imported on first access (PEP 562); each must exist where the table says
    lazy = rollout_kit._EXPORTS
    assert sorted([*lazy, "__version__"], key=str.casefold) == rollout_kit.__all__
    for name in lazy:
        assert getattr(rollout_kit, name).__name__ == name


def _is_submodule(name: str) -> bool:
    return isinstance(getattr(rollout_kit, name), types.ModuleType) or name == "annotations"


def test_import_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rollout_kit; "
        "bad = [m for m in ('matplotlib', 'ipywidgets', 'ray') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- the public surface: public modules, their __all__, the API reference ----------------------

def test_the_api_reference_documents_exactly_the_public_modules() -> None:
    # a module without a leading underscore is public: it has a page, or it is made private.
    # A module a package exports by name (tracing's ``schema``) is shown on that page.
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        documented |= set(re.findall(r"^::: (rollout_kit[\w.]*)$", page.read_text(), re.M))
    exported_modules = {f"{m}.{n}" for m in public_modules()
                        for n in importlib.import_module(m).__all__
                        if isinstance(getattr(importlib.import_module(m), n), types.ModuleType)}
    assert documented == set(public_modules()) | exported_modules


@pytest.mark.parametrize("name", public_modules())
def test_a_public_module_lists_what_it_exports(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    for attr in exported:  # each resolves; private names stay out
        assert attr == "__version__" or not attr.startswith("_"), f"{name}.{attr}"
        getattr(module, attr)


def test_the_public_surface_is_the_recorded_one() -> None:
    # every public name, one per line: a new or removed name shows in the change's diff as a
    # decision. Regenerate with `python -m tests._public > tests/public_api.txt`.
    recorded = (ROOT / "tests" / "public_api.txt").read_text().splitlines()
    assert surface() == recorded


def test_public_subpackages_load_as_attributes_of_the_root() -> None:
    """``import rollout_kit as rk; rk.analysis.summary(...)`` works (loaded on first use)."""
    import subprocess
    import sys

    top = {m.split(".")[1] for m in public_modules() if m.count(".") == 1}
    assert rollout_kit._SUBMODULES == top  # every public subpackage, no other
    code = ("import sys, rollout_kit as rk; assert 'rollout_kit.analysis' not in sys.modules; "
            "print(rk.analysis.summary.__module__, rk.plotting.plot_timeline.__name__, "
            "rk.load.run_load_async.__name__, 'analysis' in dir(rk))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["rollout_kit.analysis._summaries", "plot_timeline",
                                  "run_load_async", "True"]
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = rollout_kit.nope  # type: ignore[attr-defined]
