"""Trace files: compact a JSONL trace to Parquet, load either (the log is appended to by
``_jsonl.append_records``, on the write side).

A trace file starts with a header record (format, schema version, wall-clock anchor, worker,
pid) followed by one ``columns`` record per flush (schema 2; schema 1 files hold one task or
mark record per line, and are still read; see :mod:`rollout_kit.tracing._store`). Records are
serialized with orjson, which refuses integers wider than 64 bits — task ids are therefore
plain sequential ints, never ``uuid4().int``.

The JSONL file is the crash-safe append log. :func:`compact_trace` writes its Parquet form
(:mod:`rollout_kit.tracing._frames.parquet`: ``X.jsonl`` → ``X.parquet``), which loads several times
faster; :func:`load_traces` reads both, and of a JSONL file and the Parquet compacted from it
(both in one directory or glob) loads the Parquet only — unless the JSONL has grown since,
then the JSONL, with a :class:`StaleParquetWarning`.
"""

from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from ..._errors import ConfigError, TraceSchemaError
from .._jsonl import jsonl_objects, parquet_path
from .._store import FORMAT, Snapshot, Store
from .build import Traces, build_traces
from .parquet import concat_snapshots, read_info, read_snapshot, write_snapshot
from .readers import foreign_kind, read_files

StrPath = str | os.PathLike[str]
#: the files of a trace directory: JSONL logs and their Parquet forms
TRACE_PATTERNS = ("*.jsonl", "*.parquet")
_PARQUET_MAGIC = b"PAR1"


class StaleParquetWarning(UserWarning):
    """A Parquet trace was compacted from an earlier state of a JSONL trace loaded with it:
    the JSONL (the log, which has grown since) was loaded instead."""


def expand_paths(paths: StrPath | Sequence[StrPath], *,
                 pattern: str | Sequence[str] = "*.jsonl", what: str = "trace") -> list[Path]:
    """The files named by ``paths`` (paths, directories — their ``pattern`` files, one
    pattern or several, in name order — or globs).

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
            patterns = [pattern] if isinstance(pattern, str) else list(pattern)
            out.extend(sorted({f for pat in patterns for f in Path(s).glob(pat)}))
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


def is_parquet(path: StrPath) -> bool:
    """Whether ``path`` is (meant to be) a Parquet file: its suffix or its first bytes."""
    if os.fspath(path).endswith(".parquet"):
        return True
    with open(path, "rb") as fh:
        return fh.read(len(_PARQUET_MAGIC)) == _PARQUET_MAGIC


def _first_anchor(path: StrPath) -> float | None:
    """The ``wall_epoch`` of the header on the first line of a JSONL trace, or None."""
    try:
        with open(path, "rb") as fh:
            head = orjson.loads(fh.readline())
    except (OSError, orjson.JSONDecodeError):
        return None
    wall = head.get("wall_epoch") if isinstance(head, dict) else None
    return float(wall) if isinstance(wall, int | float) and not isinstance(wall, bool) else None


def source_info(jsonl: StrPath, size: int | None = None) -> dict[str, Any]:
    """What a Parquet trace records of the JSONL it was compacted from (name, absolute path,
    size in bytes — now, unless given —, anchor of its first header)."""
    path = Path(jsonl)
    return {"name": path.name, "path": os.fspath(path.resolve()),
            "size": path.stat().st_size if size is None else size,
            "wall_epoch": _first_anchor(path)}


def _is_current(jsonl: Path, source: dict[str, Any]) -> bool:
    """Whether ``jsonl`` is still what the Parquet with ``source`` was compacted from."""
    try:
        size = jsonl.stat().st_size
    except OSError:
        return False
    return size == source.get("size") and _first_anchor(jsonl) == source.get("wall_epoch")


def _prefer_parquet(files: list[Path]) -> list[Path]:
    """``files`` without each JSONL whose (current) Parquet form is among them, and without
    each Parquet whose JSONL has grown since it was compacted (warned)."""
    parquets = [p for p in files if p.suffix == ".parquet"]
    if not parquets:
        return files
    logs = {p.resolve(): p for p in files if p.suffix != ".parquet"}
    drop: set[Path] = set()
    for pq in parquets:
        try:
            source = read_info(pq).source
        except TraceSchemaError:
            continue  # reported when it is loaded
        if source is None:
            continue
        names = {(pq.parent / str(source.get("name"))).resolve()}
        if isinstance(source.get("path"), str):
            names.add(Path(source["path"]).resolve())
        for name in names & logs.keys():
            log = logs[name]
            if _is_current(log, source):
                drop.add(log)
            else:
                drop.add(pq)
                warnings.warn(f"{os.fspath(pq)} was compacted from an earlier state of "
                              f"{os.fspath(log)}, which has grown since: loading the JSONL",
                              StaleParquetWarning, stacklevel=3)
    return [p for p in files if p not in drop]


def compact_trace(jsonl: StrPath, out: StrPath | None = None) -> tuple[Path, Snapshot]:
    """Write the Parquet form of the JSONL trace ``jsonl`` (to ``out``, default next to it:
    :func:`parquet_path`); a torn last line is skipped with a :class:`TornTraceWarning`.

    Returns:
        The Parquet path and the snapshot written (for counts).

    Raises:
        TraceSchemaError: ``jsonl`` is not a rollout_kit trace or is corrupt before its
            last line.
    """
    path = Path(jsonl)
    size = path.stat().st_size  # before reading: what is appended meanwhile is not in it
    recs = read_records(path)
    headers = [r for r in recs if r.get("kind") == "header"]
    anchor = min(float(h["wall_epoch"]) for h in headers)
    store = Store()
    store.ingest(recs, 0, anchor, source=os.fspath(path))
    snap = store.snapshot()
    target = parquet_path(path) if out is None else Path(out)
    write_snapshot(target, snap, 0, anchor,
                   {"headers": headers, "source": source_info(path, size)})
    return target, snap


def _targets(files: list[Path], folder: Path | None) -> list[Path]:
    if folder is not None and folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {os.fspath(folder)!r} is not a folder")
    targets = [parquet_path(f) if folder is None else folder / parquet_path(f).name
               for f in files]
    seen: dict[Path, Path] = {}
    for f, t in zip(files, targets, strict=True):
        if t in seen:
            raise ConfigError(f"{os.fspath(seen[t])} and {os.fspath(f)} would both be written "
                              f"to {os.fspath(t)}")
        seen[t] = f
    return targets


def compact_traces(paths: StrPath | Sequence[StrPath], out: StrPath | None = None
                   ) -> list[tuple[Path, Path, int, int]]:
    """:func:`compact_trace` for many JSONL traces (paths, folders — their ``*.jsonl`` — or
    globs), into ``out`` or next to each; every argument is checked before anything is
    written.

    Returns:
        ``(jsonl, parquet, tasks, sessions)`` per file, in order.

    Raises:
        ConfigError: nothing matches, a Parquet file is given, ``out`` is not a folder, or
            two files would be written to one place.
    """
    files = expand_paths(paths, pattern="*.jsonl")
    for f in files:
        if is_parquet(f):
            raise ConfigError(f"{os.fspath(f)} is Parquet already; convert reads JSONL traces")
    folder = None if out is None else Path(out)
    targets = _targets(files, folder)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    done = []
    for f, t in zip(files, targets, strict=True):
        target, snap = compact_trace(f, t)
        done.append((f, target, len(snap.task_id), len(snap.session_id)))
    return done


def load_traces(paths: StrPath | Sequence[StrPath]) -> Traces:
    """Load one or several trace files (paths, directories or globs) into one :class:`Traces`.

    JSONL traces and their Parquet forms (``.parquet``, from :meth:`Tracer.close` or
    ``rollout-kit convert``) load to the same frames; a directory gives its ``*.jsonl`` and
    ``*.parquet`` files, and of a JSONL trace and the Parquet compacted from it the Parquet
    is loaded, not both (the JSONL if it has grown since: :class:`StaleParquetWarning`).
    Files of different processes are aligned on their wall-clock anchors: times are seconds
    since the earliest anchor, which becomes ``Traces.wall_epoch``. Other tools' result files
    (``vllm bench serve --save-detailed`` JSON, aiperf's ``profile_export.jsonl``, guidellm's
    ``benchmarks.json``, AReaL's ``sessions-r*.jsonl``) are recognised by their content and read by
    the matching reader (:func:`read_vllm_bench`, :func:`read_aiperf`, :func:`read_guidellm`,
    :func:`read_areal_sessions_trace`), one kind of file per call.

    Raises:
        ConfigError: nothing matches ``paths`` or a named file does not exist.
        TraceSchemaError: a file is not a trace or is corrupt before its last line (a
            Parquet file: truncated, not a rollout_kit trace, or of a newer schema version,
            named in the message with both versions), or the files are of several kinds (a
            trace and a vllm bench serve result…).
    """
    files = _prefer_parquet(expand_paths(paths, pattern=TRACE_PATTERNS))
    kind = foreign_kind(files)  # another tool's result files, known by their content
    if kind is not None:
        return read_files(kind, files)
    per_file: list[tuple[Path, list[dict[str, Any]] | float]] = []
    for p in files:
        per_file.append((p, read_info(p).wall_epoch if is_parquet(p) else read_records(p)))
    anchor = min(min(float(r["wall_epoch"]) for r in data if r.get("kind") == "header")
                 if isinstance(data, list) else data for _, data in per_file)
    parts: list[Snapshot] = []
    store: Store | None = None  # consecutive JSONL files share one store
    for p, data in per_file:
        if isinstance(data, list):
            store = store or Store()
            store.ingest(data, 0, anchor, source=os.fspath(p))
            continue
        if store is not None:
            parts.append(store.snapshot())
            store = None
        parts.append(read_snapshot(p, round((data - anchor) * 1e9))[0])
    if store is not None:
        parts.append(store.snapshot())
    return build_traces(concat_snapshots(parts), 0, anchor)
