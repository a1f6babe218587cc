"""The simulator's default answer model: arithmetic questions answered right with a probability.

A prompt whose last question is simple arithmetic (``"What is 17+25?"``, also ``-`` and ``*``,
spaces allowed, ``what's`` too) is answered ``"The answer is 42."``: right with probability
``SimConfig.accuracy``, otherwise a plausible wrong number (off by 1, 2 or 10; for ``*`` also
off by one operand, as if one factor were misread). Any other prompt gets ``None`` and the
simulator writes seeded filler text.

The draw is a pure function of the sequence key (see ``generation.sequence_key``), so it
follows the key's rules: greedy (temperature 0) depends on the simulator seed and the prompt
only, and is a *fixed draw* — the same answer every time for one prompt, right for about
``accuracy`` of all prompts (not always right, so switching to greedy does not change the mean
reward); the same ``seed`` sampling parameter gives the same answer; unseeded samples differ.

Cheap per request: only a window of tokens before each of the last few ``?`` in the prompt's
tail is decoded and matched (no full decode of long prompts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._tokenizer import BYTE_OFFSET

_MASK = (1 << 64) - 1
_INV53 = 1.0 / (1 << 53)
_QMARK = ord("?") + BYTE_OFFSET
_TAIL = 512  # only questions in the prompt's last 512 tokens are seen
_WINDOW = 48  # tokens before a "?" that can hold "What is A op B"
_MAX_MARKS = 4  # the last few "?" are tried, newest first
_QUESTION_RE = re.compile(
    rb"[Ww]hat(?: is|'s)\s+(-?\d{1,9})\s*([-+*])\s*(-?\d{1,9})\s*\?\Z")
_ADD_SLIPS = (1, -1, 2, -2, 10, -10)
#: token id (< 256) -> its byte; the special ids 0..2 map to 0xfd..0xff, never matched
_UNSHIFT = bytes((i - BYTE_OFFSET) % 256 for i in range(256))


def uniform(key: int, salt: int) -> float:
    """A uniform float in ``[0, 1)`` from ``key`` (splitmix64 of ``key ^ salt``)."""
    z = ((key ^ salt) + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return ((z ^ (z >> 31)) >> 11) * _INV53


def find_question(prompt_ids: Sequence[int]) -> tuple[int, str, int] | None:
    """``(a, op, b)`` of the prompt's last arithmetic question, or ``None``.

    Looks at the last few ``?`` tokens in the last ``512`` tokens, newest first; a question
    followed by another arithmetic one loses to it.
    """
    n = len(prompt_ids)
    tail = prompt_ids[n - _TAIL:] if n > _TAIL else prompt_ids
    count = tail.count(_QMARK)  # one C-level scan; 0 for most other prompts
    if not count:
        return None
    rev = list(tail)
    rev.reverse()
    k = -1
    for _ in range(min(count, _MAX_MARKS)):  # the last few "?", newest first
        k = rev.index(_QMARK, k + 1)
        window = rev[k:k + _WINDOW + 1]
        window.reverse()
        try:
            data = bytes(window).translate(_UNSHIFT)
        except ValueError:  # ids 256..258 (bytes 0xfd..0xff: never part of a question)
            data = bytes([i - BYTE_OFFSET if BYTE_OFFSET <= i < 256 else 0 for i in window])
        m = _QUESTION_RE.search(data)
        if m is not None:
            return int(m.group(1)), m.group(2).decode(), int(m.group(3))
    return None


def find_question_text(text: str) -> tuple[int, str, int] | None:
    """:func:`find_question` on text (for a real tokenizer): the last few ``?`` in the
    text's last 2048 characters, newest first."""
    tail = text[-4 * _TAIL:]
    k = len(tail)
    for _ in range(_MAX_MARKS):
        k = tail.rfind("?", 0, k)
        if k < 0:
            return None
        m = _QUESTION_RE.search(tail[max(0, k - _WINDOW):k + 1].encode("utf-8", "replace"))
        if m is not None:
            return int(m.group(1)), m.group(2).decode(), int(m.group(3))
    return None


def _value(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def arithmetic_answer(prompt_ids: Sequence[int], accuracy: float, key: int) -> str | None:
    """``"The answer is N."`` for an arithmetic prompt (right with probability ``accuracy``).

    Args:
        prompt_ids: the prompt's token ids (byte tokenizer).
        accuracy: probability of the right number, in ``[0, 1]``.
        key: the sequence key; equal keys give equal answers.

    Returns:
        The answer text, or ``None`` when the prompt asks no arithmetic question.
    """
    return _answer(find_question(prompt_ids), accuracy, key)


def arithmetic_answer_text(text: str, accuracy: float, key: int) -> str | None:
    """:func:`arithmetic_answer` for a prompt given as text (a real tokenizer's server)."""
    return _answer(find_question_text(text), accuracy, key)


def _answer(found: tuple[int, str, int] | None, accuracy: float, key: int) -> str | None:
    if found is None:
        return None
    a, op, b = found
    right = _value(a, op, b)
    if uniform(key, 0xA11CE) < accuracy:
        return f"The answer is {right}."
    slips: tuple[int, ...] = _ADD_SLIPS
    if op == "*":
        slips = (a, -a, b, -b, *_ADD_SLIPS)  # a*(b±1), (a±1)*b, or a carry slip
    slip = slips[int(uniform(key, 0x5117) * len(slips))]
    if slip == 0:
        slip = 1
    wrong = right + slip
    if right >= 0 > wrong:  # a wrong sign is not a plausible slip
        wrong = right + abs(slip)
    return f"The answer is {wrong}."
