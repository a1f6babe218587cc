"""JSONL, the trace's crash-safe log: the one writer (:func:`append_records`) and the one
line reader of trace-like files (traces, dumps, other tools' exports).

Every reader (the read side in ``_frames``, the load datasets) reports torn files and bad
lines the same way: the file, the 1-based line, and a :class:`TornTraceWarning` for a last
line cut short.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from .._errors import TraceSchemaError

StrPath = str | os.PathLike[str]


class TornTraceWarning(UserWarning):
    """The last line of a trace file was cut short (the writer died mid-write); skipped."""


def jsonl_objects(path: StrPath) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their 1-based line numbers.

    A torn last line (its writer died mid-write) is skipped with a :class:`TornTraceWarning`.

    Raises:
        TraceSchemaError: a line other than the last is not JSON, or a line is not an object.
    """
    lines = Path(path).read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for i, line in enumerate(lines):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            if i == len(lines) - 1 and i > 0:
                warnings.warn(f"{os.fspath(path)}: skipped a torn last line ({len(line)} bytes)",
                              TornTraceWarning, stacklevel=4)
                return
            raise TraceSchemaError(f"{os.fspath(path)}: line {i + 1} is not JSON") from None
        if not isinstance(rec, dict):
            raise TraceSchemaError(f"{os.fspath(path)}: line {i + 1} is not a JSON object")
        yield i + 1, rec


def append_records(path: Path, records: Iterable[dict[str, Any]], *, truncate: bool = False
                   ) -> None:
    """Write records as JSON lines in one ``write`` call (append, or truncate first).

    numpy arrays in a record (the columns of a ``columns`` record) are encoded by orjson
    itself, without a Python object per value.
    """
    data = b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
                    for r in records)
    with open(path, "wb" if truncate else "ab") as fh:
        fh.write(data)


def parquet_path(jsonl: StrPath) -> Path:
    """Where the Parquet form of the JSONL trace ``jsonl`` goes: ``X.jsonl`` → ``X.parquet``."""
    return Path(jsonl).with_suffix(".parquet")
