"""Token counting for load datasets: the simulator's byte tokenizer, or a real tokenizer file.

Datasets measure prompt and output lengths in tokens; they agree with the server only when both
sides count with the same tokenizer. :func:`load_tokenizer` gives a :class:`TextTokenizer` for

* ``None``: byte counting, the same ids as ``rollout-kit sim``'s default tokenizer (UTF-8 bytes
  shifted by 3; ids 0, 1, 2 are special);
* a path to a ``tokenizer.json`` file, or to a folder holding one (a Hugging Face model folder,
  e.g. the tiny model the vLLM CPU fixture builds): loaded with the ``tokenizers`` package
  (``pip install 'rollout-kit[tokenizer]'``); ``encode`` adds the special tokens the file's
  post-processor adds, as ``tokenizer(text).input_ids`` does in ``vllm bench serve``;
* an object that already tokenizes: a ``tokenizers.Tokenizer``, a ``transformers`` tokenizer,
  or anything whose ``encode(text)`` returns a list of ids (or an object with ``.ids``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError

_BYTE_OFFSET = 3


@runtime_checkable
class TextTokenizer(Protocol):
    """What a dataset needs from a tokenizer."""

    @property
    def vocab_size(self) -> int:
        """Ids are ``0 .. vocab_size - 1``."""
        ...

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids a synthetic prompt must not contain (BOS, EOS, padding, …)."""
        ...

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``."""
        ...


class ByteCounter:
    """The simulator's default tokenizer, for counting: byte ``b`` is id ``b + 3``."""

    __slots__ = ()

    vocab_size = _BYTE_OFFSET + 256
    special_ids = frozenset(range(_BYTE_OFFSET))

    def encode(self, text: str) -> list[int]:
        return [b + _BYTE_OFFSET for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        data = bytes(i - _BYTE_OFFSET for i in ids if _BYTE_OFFSET <= i < self.vocab_size)
        return data.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return "ByteCounter()"


class _Wrapped:
    """A ``tokenizers.Tokenizer``, a ``transformers`` tokenizer or an ``encode``-able object."""

    __slots__ = ("_obj", "_specials", "_vocab", "name")

    def __init__(self, obj: Any, name: str) -> None:
        self._obj = obj
        self.name = name
        self._vocab, self._specials = _vocab_and_specials(obj)

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def special_ids(self) -> frozenset[int]:
        return self._specials

    def encode(self, text: str) -> list[int]:
        out = self._obj.encode(text)
        ids = getattr(out, "ids", out)
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._obj.decode(list(ids)))

    def __repr__(self) -> str:
        return f"TextTokenizer({self.name!r}, vocab_size={self._vocab})"


def _vocab_and_specials(obj: Any) -> tuple[int, frozenset[int]]:
    specials: set[int] = set()
    if hasattr(obj, "get_vocab_size"):  # tokenizers.Tokenizer
        vocab = int(obj.get_vocab_size(with_added_tokens=True))
        decoder = getattr(obj, "get_added_tokens_decoder", None)
        if decoder is not None:
            specials = {int(i) for i, tok in decoder().items() if getattr(tok, "special", True)}
        return vocab, frozenset(specials)
    vocab = len(obj) if hasattr(obj, "__len__") else int(getattr(obj, "vocab_size", 0))
    specials = {int(i) for i in getattr(obj, "all_special_ids", ()) or ()}
    if vocab <= 0:
        raise ConfigError(f"tokenizer {obj!r} reports no vocabulary size")
    return vocab, frozenset(specials)


def tokenizer_file(path: str | Path) -> Path:
    """The ``tokenizer.json`` that ``path`` names (the file itself or a folder holding it).

    Raises:
        ConfigError: no such file.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise ConfigError(f"no tokenizer file at {path} (want tokenizer.json or a folder with it)")
    return p


def load_tokenizer(spec: str | Path | object | None) -> TextTokenizer:
    """A :class:`TextTokenizer` for ``spec`` (see the module docstring).

    Raises:
        ConfigError: the file is missing or unreadable, ``tokenizers`` is not installed, or
            the object cannot encode.
    """
    if spec is None:
        return ByteCounter()
    if isinstance(spec, str | Path):
        path = tokenizer_file(spec)
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - the extra is installed in development
            raise ConfigError("reading a tokenizer file needs the 'tokenizers' package "
                              "(pip install 'rollout-kit[tokenizer]')") from None
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"cannot read tokenizer {path}: {first}") from None
        return _Wrapped(tok, str(path))
    if isinstance(spec, TextTokenizer):
        return spec
    if callable(getattr(spec, "encode", None)) and callable(getattr(spec, "decode", None)):
        return _Wrapped(spec, type(spec).__name__)
    raise ConfigError(f"not a tokenizer: {spec!r} (want None, a path, or an object with "
                      "encode/decode)")
