"""The server flavours, by name: the one registry every part that builds an engine from
addresses looks up (the controller's workers, the Ray pool, replay, the command line).

Each flavour is a :class:`~.._backend.Backend` in a module of this package, named once, by its
``flavour`` attribute: :mod:`.sglang`, :mod:`.vllm` (completions), :mod:`.sglang_chat`,
:mod:`.vllm_chat` (chat beside them); :mod:`.openai` holds what the OpenAI-compatible ones
share. A new flavour is one module plus one entry in :data:`BUILT_IN`, or
:func:`register_flavour` from outside the package.
"""

from __future__ import annotations

from ..._errors import ConfigError
from .._backend import Backend
from .sglang import SGLangBackend
from .sglang_chat import SGLangChatBackend
from .vllm import VLLMBackend
from .vllm_chat import VLLMChatBackend

#: the flavours this package defines, in registration order
BUILT_IN: tuple[type[Backend], ...] = (
    SGLangBackend,
    VLLMBackend,
    SGLangChatBackend,
    VLLMChatBackend,
)

#: flavour name → its adapter class
FLAVOURS: dict[str, type[Backend]] = {cls.flavour: cls for cls in BUILT_IN}

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


__all__ = [
    "ALIASES",
    "BUILT_IN",
    "FLAVOURS",
    "SGLangBackend",
    "SGLangChatBackend",
    "VLLMBackend",
    "VLLMChatBackend",
    "backend_for",
    "canonical_flavour",
    "flavour_names",
    "register_flavour",
]
