"""``docs/architecture.md`` shows the import layers that ``lint-imports`` enforces: its tables are
rendered from the contracts in ``pyproject.toml`` (``python -m tests._layers --write``)."""

from __future__ import annotations

from tests._layers import contracts, current, render


def test_the_layer_tables_are_the_contracts() -> None:
    assert current() == render(), (
        "docs/architecture.md's layer tables differ from the import-linter contracts: "
        "regenerate them with `python -m tests._layers --write`")


def test_every_contract_and_stack_module_is_shown() -> None:
    text = current()
    for contract in contracts():
        assert contract["name"].replace("|", "\\|") in text or contract.get("containers") == [
            "rollout_kit"], contract["name"]
    for name in ("load", "agents", "_controller", "engines", "tracing", "_errors"):
        assert f"| `rollout_kit.{name}` |" in text, name
    assert "`guidellm`" in text  # the readers' contract holds all four readers
