"""What the dataset loaders share: their errors, checks, files, tokenizer and vocabulary.

* errors: :func:`fail` builds the one-line :class:`~rollout_kit.DatasetError` that
  names the file and the 1-based line (or entry) number;
* checks: :func:`positive` (an option), :func:`check_length` (a length read from a file),
  :func:`check_time_scale` (a trace's time scale), :func:`is_int` / :func:`as_int`;
* files: :func:`open_text` (UTF-8 text) and :func:`jsonl_objects` (one JSON object a line;
  optionally skipping a torn last line);
* the tokenizer: :func:`tokenizer_of` (see :mod:`rollout_kit.load._tokenize`);
* sampling: :func:`take` (the first ``num``, oversampled as vllm does when too few);
* the vocabulary of token-id prompts: :data:`VOCAB_SIZE` / :data:`SPECIAL_IDS` (the
  simulator's byte tokenizer: 259 ids, 0..2 special) and :func:`allowed_ids`.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..._errors import ConfigError, DatasetError, truncate
from ...tracing import TornTraceWarning
from .._tokenize import TextTokenizer, load_tokenizer

_T = TypeVar("_T")

#: default vocabulary: the simulator's byte tokenizer (ids 0..2 special)
VOCAB_SIZE = 259
SPECIAL_IDS = (0, 1, 2)


def is_int(x: object) -> bool:
    """``x`` is an int (numpy ints too), not a bool."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _where(path: str | None, line: int | None, what: str = "line") -> str:
    if path is None:
        return ""
    return f"{path}:{line}: " if line is not None and what == "line" else (
        f"{path}: {what} {line}: " if line is not None else f"{path}: ")


def fail(message: str, path: str | None = None, line: int | None = None,
         what: str = "line") -> DatasetError:
    """The one-line error to raise: ``path:line: message`` (``path: entry N: …``)."""
    one_line = " ".join(message.split())
    return DatasetError(f"{_where(path, line, what)}{one_line}", path=path, line=line)


def as_int(x: object) -> int | None:
    """``x`` as an int when it is one (numpy ints too; an integral float too), else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return None


def check_length(value: object, key: str, path: str | None, line: int | None,
                 what: str = "line") -> int:
    """A positive int length (an integral float like ``12.0`` is accepted)."""
    n = as_int(value)
    if n is None:
        raise fail(f"{key!r} must be an integer, got {truncate(value, 40)}", path, line, what)
    if n < 1:
        raise fail(f"{key!r} must be positive, got {n}", path, line, what)
    return n


def check_time_scale(value: object) -> float:
    """A trace's ``time_scale``: a finite number > 0 (``0.5`` replays twice as fast)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not (
            math.isfinite(value) and value > 0):
        raise fail(f"time_scale must be a finite number > 0, got {value!r}")
    return float(value)


def positive(value: object, name: str) -> int:
    """``value`` of the option ``name`` as an int >= 1 (a float is refused)."""
    n = as_int(value) if not isinstance(value, float) else None
    if n is None or n < 1:
        raise fail(f"{name} must be an int >= 1, got {value!r}")
    return n


def open_text(path: str | Path) -> tuple[str, str]:
    """``(name, text)`` of a UTF-8 dataset file; a missing or unreadable one: DatasetError."""
    p = Path(path).expanduser()
    try:
        return str(path), p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail("no such dataset file", str(path)) from None
    except IsADirectoryError:
        raise fail("is a directory, not a dataset file", str(path)) from None
    except UnicodeDecodeError as exc:
        raise fail(f"not UTF-8 text ({exc.reason} at byte {exc.start})", str(path)) from None
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or exc}", str(path)) from None


def jsonl_objects(path: str | Path, *, torn_ok: bool = False,
                  ) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """``(name, 1-based line number, object)`` of each non-blank line of a JSONL file.

    With ``torn_ok`` (a file a process appends to, such as a trace), a last line that is not
    JSON — the writer died mid-write — is skipped with a
    :class:`~rollout_kit.tracing.TornTraceWarning`, as rollout_kit's own trace reader does.
    """
    name, text = open_text(path)
    lines = text.splitlines()
    last = len(lines)
    while last and not lines[last - 1].strip():
        last -= 1
    seen = False
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            if torn_ok and no == last and seen:
                warnings.warn(f"{name}: skipped a torn last line ({len(raw)} characters)",
                              TornTraceWarning, stacklevel=3)
                return
            raise fail(f"not valid JSON ({exc.msg}, column {exc.colno})", name, no) from None
        if not isinstance(obj, dict):
            raise fail(f"expected a JSON object, got {type(obj).__name__}", name, no)
        seen = True
        yield name, no, obj
    if not seen:
        raise fail("empty dataset (no JSON lines)", name)


def tokenizer_of(tokenizer: TextTokenizer | str | Path | object | None) -> TextTokenizer:
    """The tokenizer ``tokenizer`` names; a bad one raises a one-line DatasetError."""
    try:
        return load_tokenizer(tokenizer)
    except DatasetError:
        raise
    except ConfigError as exc:
        raise fail(str(exc)) from None


def take(requests: list[_T], num: int | None, seed: int, name: str | None) -> list[_T]:
    """The first ``num`` requests; fewer are oversampled as vllm does (seeded choice)."""
    if not requests:
        raise fail("empty dataset (no usable request)", name)
    if num is None:
        return requests
    num = positive(num, "num")
    if len(requests) >= num:
        return requests[:num]
    rng = random.Random(seed)
    return requests + [rng.choice(requests) for _ in range(num - len(requests))]


def allowed_ids(tokenizer: TextTokenizer | str | Path | object | None, vocab_size: int,
                special_ids: Sequence[int]) -> tuple[np.ndarray, int]:
    """The ids a synthetic prompt may use, and the vocabulary size."""
    if tokenizer is not None:
        tok = tokenizer_of(tokenizer)
        vocab_size, special_ids = tok.vocab_size, sorted(tok.special_ids)
    vocab_size = positive(vocab_size, "vocab_size")
    specials = {int(i) for i in special_ids}
    allowed = np.array([i for i in range(vocab_size) if i not in specials], dtype=np.int64)
    if allowed.size == 0:
        raise fail(f"the vocabulary ({vocab_size} ids) has no non-special id")
    return allowed, vocab_size
