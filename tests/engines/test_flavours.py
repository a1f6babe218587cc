"""The flavour registry: built from the flavour modules, each name written once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from rollout_kit import ConfigError
from rollout_kit.engines import (
    FLAVOURS,
    Backend,
    SGLangBackend,
    VLLMChatBackend,
    _flavours,
    backend_for,
    flavour_names,
    register_flavour,
)


def test_the_registry_holds_every_flavour_its_modules_define() -> None:
    defined: set[type[Backend]] = set()
    for info in pkgutil.iter_modules(_flavours.__path__):
        module = importlib.import_module(f"{_flavours.__name__}.{info.name}")
        defined |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                    if issubclass(cls, Backend) and cls.__module__ == module.__name__}
    assert defined == set(_flavours.BUILT_IN)


def test_names_keep_their_registration_order_and_aliases() -> None:
    assert flavour_names()[:4] == ("sglang", "vllm", "sglang-chat", "vllm-chat")
    assert all(FLAVOURS[cls.flavour] is cls for cls in _flavours.BUILT_IN)
    assert type(backend_for("openai-chat")) is VLLMChatBackend
    assert _flavours.canonical_flavour("openai") == "vllm"
    with pytest.raises(ConfigError, match="known: sglang, vllm, sglang-chat, vllm-chat"):
        backend_for("nope")


def test_register_flavour_adds_a_backend_by_its_name() -> None:
    class Mine(SGLangBackend):
        flavour = "mine-test"

    register_flavour(Mine)
    try:
        assert flavour_names()[-1] == "mine-test"
        assert type(backend_for("mine-test")) is Mine
    finally:
        del FLAVOURS["mine-test"]
    with pytest.raises(ConfigError, match="Backend subclass"):
        register_flavour(int)  # type: ignore[arg-type]
