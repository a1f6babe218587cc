"""The simulator's tokenizer: byte-level, deterministic, local, round-trips any UTF-8 text.

Ids ``0..2`` are special (``<pad>``, ``<s>``, ``</s>``); byte ``b`` is id ``b + 3``. Both
simulated flavours count prompt tokens with it, so a prompt has the same token count on an
SGLang-flavoured and a vLLM-flavoured simulator. ``encode`` never adds the BOS token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["BYTE_OFFSET", "ByteTokenizer"]

BYTE_OFFSET = 3
_SPECIAL_TEXT = ("<pad>", "<s>", "</s>")


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

    def valid_ids(self, ids: Sequence[object]) -> bool:
        """Whether every element is an int id inside the vocabulary."""
        v = self.vocab_size
        return all(type(i) is int and 0 <= i < v for i in ids)

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab_size=259, bos=1, eos=2, pad=0)"
