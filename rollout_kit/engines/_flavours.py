"""The server flavours, by name: the one registry every part that builds an engine from
addresses looks up (the controller's workers, the Ray pool, replay, the command line).

A new flavour is one module (a :class:`~._backend.Backend`) plus one line here, or
:func:`register_flavour` from outside the package.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._config import EngineConfig
from .._errors import ConfigError
from ._backend import Backend
from ._remote import RemoteInfEngine
from ._sglang import SGLangBackend
from ._sglang_chat import SGLangChatBackend
from ._vllm import VLLMBackend
from ._vllm_chat import VLLMChatBackend

#: flavour name → its adapter class
FLAVOURS: dict[str, type[Backend]] = {
    "sglang": SGLangBackend,
    "vllm": VLLMBackend,
    "sglang-chat": SGLangChatBackend,
    "vllm-chat": VLLMChatBackend,
}

#: other tools' names of a flavour (``vllm bench serve --backend``) → the flavour
ALIASES: dict[str, str] = {
    "openai": "vllm",
    "openai-chat": "vllm-chat",
}


def canonical_flavour(name: str) -> str:
    """The flavour ``name`` stands for: itself, or the flavour an alias names."""
    return ALIASES.get(name, name) if name not in FLAVOURS else name


def register_flavour(backend: type[Backend]) -> None:
    """Add ``backend`` under its ``flavour`` name (an existing name is replaced)."""
    if not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise ConfigError(f"a flavour is a Backend subclass, got {backend!r}")
    FLAVOURS[backend.flavour] = backend


def flavour_names() -> tuple[str, ...]:
    """The registered flavour names, in registration order."""
    return tuple(FLAVOURS)


def backend_for(flavour: str) -> Backend:
    """A fresh adapter of ``flavour`` (``ConfigError`` naming the known ones)."""
    cls = FLAVOURS.get(canonical_flavour(flavour))
    if cls is None:
        raise ConfigError(f"unknown server flavour {flavour!r}; known: "
                          f"{', '.join(FLAVOURS)}")
    return cls()


def make_engine(flavour: str, addresses: str | Sequence[str], *,
                config: EngineConfig | None = None, name: str | None = None) -> RemoteInfEngine:
    """An engine over ``addresses`` speaking ``flavour``."""
    return RemoteInfEngine(addresses, backend_for(flavour), config=config, name=name)
