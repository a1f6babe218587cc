import importlib
import re
import types
from pathlib import Path

import pytest

import rollout_kit
from tests._public import RECORD, public_modules, surface

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
    # the names are imported on first access (PEP 562); each must exist where the stub says
    lazy = rollout_kit._EXPORTS  # read from rollout_kit/__init__.pyi
    assert sorted(lazy, key=str.casefold) == rollout_kit.__all__
    assert isinstance(rollout_kit.__version__, str)
    for name in lazy.keys() - {"__version__"}:
        assert getattr(rollout_kit, name).__name__ == name


def _is_submodule(name: str) -> bool:
    return isinstance(getattr(rollout_kit, name), types.ModuleType) or name == "annotations"


def test_import_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rollout_kit, rollout_kit.tracing; "
        "bad = [m for m in ('matplotlib', 'ipywidgets', 'ray', 'pandas', 'aiohttp') "
        "if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_exported_names_show_their_public_module() -> None:
    # as httpx: reprs, tracebacks and pickles name rollout_kit, not the private module
    import pickle
    import subprocess
    import sys
    import traceback

    for name in rollout_kit._EXPORTS.keys() - {"__version__"}:
        obj = getattr(rollout_kit, name)
        assert obj.__module__ == "rollout_kit", (name, obj.__module__)
    assert repr(rollout_kit.RolloutController) == "<class 'rollout_kit.RolloutController'>"
    err = rollout_kit.EngineConnectionError("cannot connect", server="127.0.0.1:1")
    assert traceback.format_exception_only(err)[0].startswith(
        "rollout_kit.EngineConnectionError: cannot connect")
    result = rollout_kit.RolloutResult(task_id=7, status="rejected", reason="reward")
    blob = pickle.dumps([result, err, rollout_kit.RolloutController])
    # found by their public path (an engine error rebuilds through _errors._rebuild)
    assert b"rollout_kit._io" not in blob and b"rollout_kit._controller" not in blob
    back, back_err, cls = pickle.loads(blob)
    assert back == result and cls is rollout_kit.RolloutController
    assert (type(back_err), back_err.server) == (type(err), err.server)
    # a fresh interpreter: an error reached through the controller is named publicly too,
    # and the public path loads a pickle lazily
    code = ("import pickle, sys, rollout_kit; rollout_kit.RolloutController; "
            "from rollout_kit import _errors; print(_errors.EngineError.__module__); "
            "print(pickle.loads(sys.stdin.buffer.read()).task_id)")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(result),
                         capture_output=True, check=True)
    assert out.stdout.decode().split() == ["rollout_kit", "7"]


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
    # every public name, one per line, generated from the code: a new or removed name shows
    # in the change's diff as a decision
    recorded = RECORD.read_text().splitlines()
    now = surface()
    added, gone = sorted(set(now) - set(recorded)), sorted(set(recorded) - set(now))
    assert now == recorded, (f"the public surface changed (added {added}, removed {gone}, or "
                             "reordered): regenerate with `python -m tests._public --write`")


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
