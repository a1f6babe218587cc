import rollout_kit


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
    import types

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
