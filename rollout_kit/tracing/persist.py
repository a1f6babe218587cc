"""JSONL persistence: append batches of records to a file; load one or many files back.

A trace file starts with a header record (format, schema version, wall-clock anchor, worker,
pid) followed by task and mark records (see :mod:`rollout_kit.tracing.store`). Records are
serialized with orjson, which refuses integers wider than 64 bits — task ids are therefore
plain sequential ints, never ``uuid4().int``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from ..errors import ConfigError, TraceSchemaError
from .frames import Traces, build_traces
from .imports import foreign_kind, read_files
from .jsonl import TornTraceWarning, jsonl_objects
from .store import FORMAT, Store

__all__ = ["TornTraceWarning", "append_records", "expand_paths", "jsonl_objects", "load_traces",
           "read_records"]

StrPath = str | os.PathLike[str]


def append_records(path: Path, records: Iterable[dict[str, Any]], *, truncate: bool = False
                   ) -> None:
    """Write records as JSON lines in one ``write`` call (append, or truncate first)."""
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    with open(path, "wb" if truncate else "ab") as fh:
        fh.write(data)


def expand_paths(paths: StrPath | Sequence[StrPath], *, pattern: str = "*.jsonl",
                 what: str = "trace") -> list[Path]:
    """The files named by ``paths`` (paths, directories — their ``pattern`` files — or globs).

    Raises:
        ConfigError: a bad argument, nothing matches, or a named file does not exist
            (``what`` names the kind of file in the message).
    """
    if not isinstance(paths, str | os.PathLike | Sequence) or isinstance(paths, bytes):
        raise ConfigError(f"{what} paths must be a path, a glob or a list of them, got {paths!r}")
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not all(isinstance(p, str | os.PathLike) for p in items):
        raise ConfigError(f"{what} paths must be str or os.PathLike, got {paths!r}")
    out: list[Path] = []
    for item in items:
        s = os.fspath(item)
        if any(ch in s for ch in "*?["):
            out.extend(Path(p) for p in sorted(glob.glob(s, recursive=True)))
        elif os.path.isdir(s):
            out.extend(sorted(Path(s).glob(pattern)))
        else:
            out.append(Path(s))
    if not out:
        raise ConfigError(f"no {what} files match {paths!r}")
    for p in out:
        if not p.is_file():
            raise ConfigError(f"{what} file {os.fspath(p)!r} does not exist")
    return out


def read_records(path: StrPath) -> list[dict[str, Any]]:
    """Parse one trace file into records; a torn last line is skipped with a warning.

    Raises:
        TraceSchemaError: the file is empty, does not start with a trace header, or has a
            malformed line other than the last.
    """
    records = [rec for _, rec in jsonl_objects(path)]
    if not records or records[0].get("kind") != "header" or records[0].get("format") != FORMAT:
        raise TraceSchemaError(f"{os.fspath(path)} is not a rollout_kit trace (no header)")
    for i, rec in enumerate(records):
        if rec.get("kind") == "header" and (
                not isinstance(rec.get("wall_epoch"), int | float)
                or isinstance(rec.get("wall_epoch"), bool)):
            raise TraceSchemaError(f"{os.fspath(path)}: header on line {i + 1} has no numeric "
                                   "wall_epoch")
    return records


def load_traces(paths: StrPath | Sequence[StrPath]) -> Traces:
    """Load one or several trace files (paths, directories or globs) into one :class:`Traces`.

    Files of different processes are aligned on their wall-clock anchors: times are seconds
    since the earliest anchor, which becomes ``Traces.wall_epoch``. Other tools' result files
    (``vllm bench serve --save-detailed`` JSON, aiperf's ``profile_export.jsonl``, AReaL's
    ``sessions-r*.jsonl``) are recognised by their content and read by
    :mod:`rollout_kit.tracing.imports`, one kind of file per call.

    Raises:
        ConfigError: nothing matches ``paths`` or a named file does not exist.
        TraceSchemaError: a file is not a trace or is corrupt before its last line, or the
            files are of several kinds (a trace and a vllm bench serve result…).
    """
    files = expand_paths(paths)
    kind = foreign_kind(files)  # another tool's result files, known by their content
    if kind is not None:
        return read_files(kind, files)
    per_file = [(p, read_records(p)) for p in files]
    anchor = min(float(r["wall_epoch"]) for _, recs in per_file for r in recs
                 if r.get("kind") == "header")
    store = Store()
    for p, recs in per_file:
        store.ingest(recs, 0, anchor, source=os.fspath(p))
    return build_traces(store.snapshot(), 0, anchor)
