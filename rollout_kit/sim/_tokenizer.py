"""The simulator's tokenizers: byte-level by default, or a real ``tokenizer.json`` file.

:class:`ByteTokenizer` (the default) is deterministic, local and round-trips any UTF-8 text:
ids ``0..2`` are special (``<pad>``, ``<s>``, ``</s>``); byte ``b`` is id ``b + 3``; ``encode``
never adds the BOS token. Both simulated flavours count prompt tokens with the server's
tokenizer, so a prompt has the same token count on an SGLang-flavoured and a vLLM-flavoured
simulator.

:class:`FileTokenizer` (``SimConfig(tokenizer="path")``, ``rollout-kit sim --tokenizer PATH``)
loads a Hugging Face ``tokenizer.json`` with the ``tokenizers`` package, so the simulator counts
prompt and output tokens as a client using that tokenizer does (``vllm bench serve
--tokenizer PATH``): ``encode`` adds what the file's post-processor adds, as the real servers'
``tokenizer(text).input_ids`` does. Generated ids are drawn from its ordinary (printable,
non-special) tokens, so they decode to text with that tokenizer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .._errors import ConfigError

BYTE_OFFSET = 3
_SPECIAL_TEXT = ("<pad>", "<s>", "</s>")
#: generated filler (byte tokenizer): frequent letters, spaces, a few capitals and digits
_ALPHABET = "etaoinshrdlucmfwypvbgkqjxz" * 2 + "etaoinshr" + "      " + "ETAOINS.,0123456789"
#: padding after an answer: no digits, so the answer stays the completion's last number
_PAD_ALPHABET = "etaoinshrdlucmfwypvbgkqjxz" * 2 + "    "


class ByteTokenizer:
    """Byte-level tokenizer with three special tokens.

    Attributes:
        pad_token_id: id of ``<pad>`` (0).
        bos_token_id: id of ``<s>`` (1).
        eos_token_id: id of ``</s>`` (2).
        vocab_size: 259 (3 specials + 256 bytes).
    """

    pad_token_id = 0
    bos_token_id = 1
    eos_token_id = 2
    vocab_size = BYTE_OFFSET + 256
    pad_token = "<pad>"
    bos_token = "<s>"
    eos_token = "</s>"

    __slots__ = ()

    #: ``generation`` draws filler text from these ids
    filler_ids: tuple[int, ...] = tuple(ord(c) + BYTE_OFFSET for c in _ALPHABET)
    #: digit-free filler (padding after an answer)
    pad_filler_ids: tuple[int, ...] = tuple(ord(c) + BYTE_OFFSET for c in _PAD_ALPHABET)
    #: the raw bytes of every id (empty for special ids)
    byte_table: tuple[bytes, ...] = (b"",) * BYTE_OFFSET + tuple(bytes((b,)) for b in range(256))
    #: ids are UTF-8 bytes: ``answers`` scans prompt ids without decoding
    byte_level = True
    path: str | None = None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (its UTF-8 bytes, each shifted by 3); no BOS is added."""
        return [b + BYTE_OFFSET for b in text.encode("utf-8")]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; special tokens are dropped (or rendered when not skipped).

        Ids outside the vocabulary are ignored; invalid UTF-8 becomes U+FFFD.
        """
        if skip_special_tokens:
            data = bytes(i - BYTE_OFFSET for i in ids if BYTE_OFFSET <= i < self.vocab_size)
            return data.decode("utf-8", errors="replace")
        parts: list[str] = []
        buf = bytearray()
        for i in ids:
            if BYTE_OFFSET <= i < self.vocab_size:
                buf.append(i - BYTE_OFFSET)
            elif 0 <= i < BYTE_OFFSET:
                parts.append(buf.decode("utf-8", errors="replace"))
                buf.clear()
                parts.append(_SPECIAL_TEXT[i])
        parts.append(buf.decode("utf-8", errors="replace"))
        return "".join(parts)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (empty for special or unknown ids)."""
        if BYTE_OFFSET <= token_id < self.vocab_size:
            return bytes((token_id - BYTE_OFFSET,))
        return b""

    def token_text(self, token_id: int) -> str:
        """A printable string for one token, as servers show it in logprobs.

        Printable ASCII bytes are themselves, special tokens their name, other bytes
        ``bytes:\\xNN`` (vLLM's spelling for a token that is not valid UTF-8 alone).
        """
        if BYTE_OFFSET <= token_id < self.vocab_size:
            b = token_id - BYTE_OFFSET
            if 32 <= b < 127 or b in (9, 10, 13):
                return chr(b)
            return f"bytes:\\x{b:02x}"
        if 0 <= token_id < BYTE_OFFSET:
            return _SPECIAL_TEXT[token_id]
        return ""

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is one of the special tokens."""
        return 0 <= token_id < BYTE_OFFSET

    def alternative(self, token_id: int, j: int) -> int:
        """The ``j``-th (``j >= 1``) top-logprob alternative to ``token_id`` (never itself)."""
        base = token_id - BYTE_OFFSET if token_id >= BYTE_OFFSET else token_id
        alt = ((base + 7 * j) % 256) + BYTE_OFFSET
        if alt == token_id:
            alt = ((base + 7 * j + 1) % 256) + BYTE_OFFSET
        return alt

    def valid_ids(self, ids: Sequence[object]) -> bool:
        """Whether every element is an int id inside the vocabulary."""
        v = self.vocab_size
        return all(type(i) is int and 0 <= i < v for i in ids)

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab_size=259, bos=1, eos=2, pad=0)"


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character that stands for each byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_EOS_NAMES = ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<eos>", "<|end|>")
_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>")
_PAD_NAMES = ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>")


def _config_token(folder: Path, key: str) -> str | None:
    """``key`` (``eos_token`` …) from a ``tokenizer_config.json`` beside the file."""
    try:
        data = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get(key) if isinstance(data, dict) else None
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class FileTokenizer:
    """A Hugging Face ``tokenizer.json`` behind the :class:`ByteTokenizer` interface.

    The BOS / EOS / pad tokens come from a ``tokenizer_config.json`` beside the file, else
    from the usual names (``</s>``, ``<|endoftext|>``, …); a tokenizer without an EOS token
    is refused.

    Attributes:
        path: the ``tokenizer.json`` read.
        vocab_size: ids are ``0 .. vocab_size - 1`` (added tokens included).
    """

    byte_level = False

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - the extra is installed in development
            raise ConfigError("a tokenizer file needs the 'tokenizers' package "
                              "(pip install 'rollout-kit[tokenizer]')") from None
        file = Path(path).expanduser()
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise ConfigError(f"no tokenizer file at {path} (want tokenizer.json or a folder "
                              "with it)")
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"cannot read tokenizer {file}: {first}") from None
        self._tok: Any = tok
        self.path = str(file)
        self.vocab_size = int(tok.get_vocab_size(with_added_tokens=True))
        added = tok.get_added_tokens_decoder()
        self._special = frozenset(int(i) for i, t in added.items() if t.special)

        def find(key: str, names: tuple[str, ...]) -> int | None:
            name = _config_token(file.parent, key)
            for n in ((name,) if name else ()) + names:
                i = tok.token_to_id(n)
                if i is not None:
                    return int(i)
            return None

        eos = find("eos_token", _EOS_NAMES)
        if eos is None:
            raise ConfigError(f"tokenizer {file} has no EOS token (looked for "
                              f"tokenizer_config.json's eos_token and {', '.join(_EOS_NAMES)})")
        self.eos_token_id = eos
        bos = find("bos_token", _BOS_NAMES)
        pad = find("pad_token", _PAD_NAMES)
        self.bos_token_id = eos if bos is None else bos
        self.pad_token_id = eos if pad is None else pad
        self._special |= {self.eos_token_id, self.bos_token_id, self.pad_token_id}
        self.eos_token = str(tok.id_to_token(self.eos_token_id))
        self.bos_token = str(tok.id_to_token(self.bos_token_id))
        self.pad_token = str(tok.id_to_token(self.pad_token_id))
        self.byte_table = self._byte_table()
        self._text = tuple(_printable(b) for b in self.byte_table)
        filler = tuple(i for i, t in enumerate(self._text)
                       if t is not None and t.strip() and i not in self._special)
        if not filler:
            filler = tuple(i for i in range(self.vocab_size) if i not in self._special)
        self.filler_ids = filler
        no_digit = tuple(i for i in filler if not any(c.isdigit() for c in self._text[i] or ""))
        self.pad_filler_ids = no_digit or filler

    def _byte_table(self) -> tuple[bytes, ...]:
        tok = self._tok
        table: list[bytes] = []
        decoder = json.loads(tok.to_str()).get("decoder") or {}
        byte_level = decoder.get("type") == "ByteLevel" or any(
            d.get("type") == "ByteLevel" for d in decoder.get("decoders", ()) or ())
        rev = _bytes_to_unicode() if byte_level else {}
        for i in range(self.vocab_size):
            if i in self._special:
                table.append(b"")
                continue
            piece = tok.id_to_token(i)
            if piece is None:
                table.append(b"")
            elif rev and all(c in rev for c in piece):
                table.append(bytes(rev[c] for c in piece))
            else:
                table.append(str(tok.decode([i], skip_special_tokens=False)).encode("utf-8"))
        return tuple(table)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (with the special tokens the post-processor adds)."""
        ids: list[int] = self._tok.encode(text).ids
        return ids

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; ids outside the vocabulary are ignored."""
        v = self.vocab_size
        return str(self._tok.decode([i for i in ids if 0 <= i < v],
                                    skip_special_tokens=skip_special_tokens))

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (empty for special or unknown ids)."""
        return self.byte_table[token_id] if 0 <= token_id < self.vocab_size else b""

    def token_text(self, token_id: int) -> str:
        """A printable string for one token: its text, the special token's name, or
        ``bytes:\\xNN…`` when its bytes are not valid UTF-8 alone (vLLM's spelling)."""
        if not 0 <= token_id < self.vocab_size:
            return ""
        if token_id in self._special:
            return str(self._tok.id_to_token(token_id))
        b = self.byte_table[token_id]
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{x:02x}" for x in b)

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special token."""
        return token_id in self._special

    def alternative(self, token_id: int, j: int) -> int:
        """The ``j``-th (``j >= 1``) top-logprob alternative to ``token_id`` (never itself)."""
        ids = self.filler_ids
        n = len(ids)
        alt = ids[(token_id + 7 * j) % n]
        if alt == token_id and n > 1:
            alt = ids[(token_id + 7 * j + 1) % n]
        return alt

    def valid_ids(self, ids: Sequence[object]) -> bool:
        """Whether every element is an int id inside the vocabulary."""
        v = self.vocab_size
        return all(type(i) is int and 0 <= i < v for i in ids)

    def __repr__(self) -> str:
        return (f"FileTokenizer({self.path!r}, vocab_size={self.vocab_size}, "
                f"bos={self.bos_token_id}, eos={self.eos_token_id}, pad={self.pad_token_id})")


def _printable(b: bytes) -> str | None:
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text and all(c.isprintable() or c == " " for c in text) else None


SimTokenizer = ByteTokenizer | FileTokenizer


@functools.lru_cache(maxsize=8)
def _load_file(path: str, _mtime_ns: int) -> FileTokenizer:
    return FileTokenizer(path)


def load_tokenizer(path: str | Path | None) -> SimTokenizer:
    """The simulator's tokenizer: a :class:`ByteTokenizer` for ``None``, else the
    :class:`FileTokenizer` of ``path`` (a ``tokenizer.json`` or a folder holding one; loaded
    once per file and shared by every server of a process).

    Raises:
        ConfigError: no such file, an unreadable file, no EOS token, ``tokenizers`` missing.
    """
    if path is None:
        return ByteTokenizer()
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "tokenizer.json"
    try:
        mtime = file.stat().st_mtime_ns
    except OSError:
        raise ConfigError(f"no tokenizer file at {path} (want tokenizer.json or a folder "
                          "with it)") from None
    return _load_file(str(file.resolve()), mtime)
