"""Parquet form of a trace: the JSONL record stream in columns, written with pyarrow.

**Layout: one Parquet file per trace** (``X.jsonl`` compacts to ``X.parquet`` next to it),
**one row per record** like the JSONL lines — every task record first, then every late mark
record. The header is not a row but the file's key-value metadata under :data:`META_KEY`,
a JSON object: ``format``, ``schema`` (the trace schema version), ``wall_epoch`` (the anchor
every time in the file counts from), the row counts ``tasks`` / ``marks``, ``headers`` (the
JSONL header records it was built from, each with its own anchor, worker and pid) and
``source`` (name, path, size and first anchor of that JSONL, so a loader can tell whether
the Parquet is still current). Columns::

    kind      dictionary<string>  "task" | "mark"
    task_id   int64
    worker    dictionary<string>  (null: no worker name)
    status, reason, error          dictionary<string>          (task rows)
    marks     struct<submit, dispatch, start, end, consume: int64>   (null: never reached)
    attrs     struct<one field per task attribute>                     (only if any)
    sessions  large_list<struct<session_id: int64, status: dictionary<string>,
                                start: int64, end: int64, attrs: struct<…> (only if any)>>
    spans     large_list<struct<session: int64 (index in the task, -1: the task's own),
                                phase: dictionary<string>, start: int64, end: int64,
                                flags: int8>>
    events    large_list<struct<session: int64, kind: dictionary<string>, ts: int64,
                                version: int64>>
    event     dictionary<string>, ts: int64                          (mark rows)

Times are integer nanoseconds since ``wall_epoch``. An attribute field is ``int64``,
``double``, ``bool`` or ``dictionary<string>`` when all of its values have that one Python
type (strings load as a Categorical: no Python object per row); any other mix (types
mixed, explicit ``None`` values, NaN or infinities) is a
``string`` field of JSON-encoded values (field metadata ``rollout_kit.encoding: json``), the
very values the JSONL holds, so both forms load to the same frames.

Why one file of records, not one file per frame: a trace stays one file that is replaced
atomically and carries its header; the sessions, spans and events of a task are stored
contiguously exactly as :class:`~rollout_kit.tracing.store.Store` keeps them (the list
offsets *are* its ``n_sessions`` / ``n_spans``), so reading decodes columns straight into a
:class:`~rollout_kit.tracing.store.Snapshot` without one Python object per row; and the
frames are then built by the same :func:`~rollout_kit.tracing.frames.build_traces` as from
JSONL, so derived columns (per-phase seconds, the phases registered in the reading
process) cannot disagree between the two forms. Stored frames would have to be rebuilt
anyway when several files are loaded together.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.api.types import union_categoricals

from ..errors import TraceSchemaError
from . import phases
from .codes import EVENT_CODES, SESSION_EVENT_CODES, STATUS_CODES
from .schema import (
    LIFECYCLE_EVENTS,
    MIN_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SESSION_EVENTS,
    STATUSES,
)
from .store import FORMAT, MISSING, AttrValues, Snapshot

__all__ = [
    "COMPRESSION",
    "META_KEY",
    "ParquetInfo",
    "concat_snapshots",
    "read_info",
    "read_snapshot",
    "snapshot_table",
    "write_snapshot",
]

META_KEY = b"rollout_kit.trace"
COMPRESSION = "zstd"
_ENCODING = b"rollout_kit.encoding"
_JSON_FIELD = {_ENCODING: b"json"}
_KINDS = ("task", "mark")

StrPath = str | os.PathLike[str]
Attrs = dict[str, tuple[np.ndarray, AttrValues]]


class ParquetInfo:
    """The rollout_kit metadata of a trace Parquet file."""

    __slots__ = ("meta", "path")

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta

    @property
    def wall_epoch(self) -> float:
        """The wall-clock anchor (Unix seconds) the file's times count from."""
        return float(self.meta["wall_epoch"])

    @property
    def source(self) -> dict[str, Any] | None:
        """``{"name", "path", "size", "wall_epoch"}`` of the JSONL it was compacted from."""
        src = self.meta.get("source")
        return src if isinstance(src, dict) else None


def _fail(path: StrPath, what: str) -> TraceSchemaError:
    return TraceSchemaError(f"{os.fspath(path)}: {what}")


def _unreadable(path: StrPath, exc: BaseException) -> TraceSchemaError:
    return _fail(path, f"is not a readable Parquet file (truncated or corrupt?): {exc}")


def _check_meta(path: StrPath, raw: Mapping[bytes, bytes] | None) -> dict[str, Any]:
    blob = None if raw is None else raw.get(META_KEY)
    if blob is None:
        raise _fail(path, "is not a rollout_kit trace (a Parquet file without rollout_kit "
                    "trace metadata)")
    try:
        meta = orjson.loads(blob)
    except orjson.JSONDecodeError:
        raise _fail(path, "its rollout_kit metadata is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _fail(path, f"is not a rollout_kit trace (metadata format is not {FORMAT!r})")
    schema = meta.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise _fail(path, f"its metadata has no integer schema version (got {schema!r})")
    if schema > SCHEMA_VERSION:
        raise _fail(path, f"trace schema {schema} is newer than this rollout_kit reads "
                    f"(schema {SCHEMA_VERSION}); upgrade rollout_kit to load it")
    if schema < MIN_SCHEMA_VERSION:  # the layout is the same for schemas 1 and 2
        raise _fail(path, f"trace schema {schema}, expected {MIN_SCHEMA_VERSION}.."
                    f"{SCHEMA_VERSION}")
    wall = meta.get("wall_epoch")
    if not isinstance(wall, int | float) or isinstance(wall, bool):
        raise _fail(path, "its metadata has no numeric wall_epoch")
    for key in ("tasks", "marks"):
        count = meta.get(key)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise _fail(path, f"its metadata has no row count {key!r}")
    return meta


# -- writing --------------------------------------------------------------------------------

def _rel(ns: np.ndarray, epoch_ns: int) -> pa.Array:
    """int64 ns since ``epoch_ns``; null where MISSING."""
    missing = ns == MISSING
    return pa.array(ns - epoch_ns, type=pa.int64(), mask=missing if missing.any() else None)


def _dictionary(codes: np.ndarray, names: Sequence[str | None],
                null: np.ndarray | None = None) -> pa.Array:
    """dictionary<string> of ``names[codes]``: only the names used, in order of first use
    (so a reader registers phases in the order a JSONL reader meets them); a ``None`` name
    or a ``null`` row is a null."""
    codes = np.asarray(codes, dtype=np.int64)
    used = codes if null is None else codes[~null]
    uniq, first = np.unique(used, return_index=True)
    lut = np.full(len(names) + 1, -1, dtype=np.int32)  # index -1: null rows' placeholder
    kept: list[str] = []
    for c in uniq[np.argsort(first, kind="stable")].tolist():
        name = names[c]
        if name is not None:
            lut[c] = len(kept)
            kept.append(name)
    idx = lut[np.where(null, -1, codes)] if null is not None else lut[codes]
    miss = idx < 0
    return pa.DictionaryArray.from_arrays(
        pa.array(idx, type=pa.int32(), mask=miss if miss.any() else None),
        pa.array(kept, type=pa.string()))


def _strings(values: Sequence[str | None]) -> pa.Array:
    return pa.array(values, type=pa.string()).dictionary_encode()


def _attr_field(n: int, rows: np.ndarray, values: AttrValues) -> tuple[pa.Array, bool]:
    """An attribute as a dense length-``n`` column, and whether it is JSON-encoded."""
    mask = np.ones(n, dtype=bool)
    mask[rows] = False
    vals = values if isinstance(values, list) else values.tolist()
    kinds = set(map(type, vals))
    try:
        if kinds == {bool}:
            b = np.zeros(n, dtype=bool)
            b[rows] = np.asarray(vals, dtype=bool)
            return pa.array(b, type=pa.bool_(), mask=mask), False
        if kinds == {int}:
            i = np.zeros(n, dtype=np.int64)
            i[rows] = np.asarray(vals, dtype=np.int64)
            return pa.array(i, type=pa.int64(), mask=mask), False
        if kinds == {float}:
            f = np.zeros(n, dtype=np.float64)
            f[rows] = np.asarray(vals, dtype=np.float64)
            if np.isfinite(f[rows]).all():  # JSON has no NaN / inf: those go as JSON (null)
                return pa.array(f, type=pa.float64(), mask=mask), False
        if kinds == {str}:
            enc = pa.array(vals, type=pa.string()).dictionary_encode()
            idx = np.zeros(n, dtype=np.int32)
            idx[rows] = enc.indices.to_numpy()
            return pa.DictionaryArray.from_arrays(pa.array(idx, type=pa.int32(), mask=mask),
                                                  enc.dictionary), False
    except (OverflowError, ValueError, TypeError):
        pass  # e.g. an int beyond int64 from a hand-made JSONL: JSON keeps it as it is
    dense: list[str | None] = [None] * n
    for r, v in zip(rows.tolist(), vals, strict=True):
        dense[r] = orjson.dumps(v).decode()
    return pa.array(dense, type=pa.string()), True


def _attrs_struct(n: int, cols: Attrs, null: np.ndarray | None = None) -> pa.Array | None:
    if not cols:
        return None
    arrays, fields = [], []
    for name, (rows, values) in cols.items():
        arr, is_json = _attr_field(n, rows, values)
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, metadata=_JSON_FIELD if is_json else None))
    return pa.StructArray.from_arrays(arrays, fields=fields,
                                      mask=None if null is None else pa.array(null))


def _list(counts: np.ndarray, values: pa.Array, n_null: int) -> pa.Array:
    """A large_list of ``values`` cut by ``counts``, then ``n_null`` null lists."""
    ends = np.cumsum(counts, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    offsets = np.concatenate((np.zeros(1, np.int64), ends, np.full(n_null, total, np.int64)))
    mask = np.zeros(len(counts) + n_null, dtype=bool)
    mask[len(counts):] = True
    return pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), values,
                                         mask=pa.array(mask) if n_null else None)


def snapshot_table(snap: Snapshot, epoch_ns: int, wall_epoch: float,
                   meta: Mapping[str, Any] | None = None) -> pa.Table:
    """The Parquet table of ``snap``: times relative to ``epoch_ns``, which is
    ``wall_epoch`` on the wall clock; ``meta`` adds keys (headers, source) to the metadata."""
    n, m = len(snap.task_id), len(snap.mark_task)
    mark_rows = np.zeros(n + m, dtype=bool)
    mark_rows[n:] = True
    zeros = np.zeros(m, dtype=np.int64)

    def tasks_only(arr: pa.Array) -> pa.Array:
        return pa.concat_arrays([arr, pa.nulls(m, type=arr.type)])

    sess_cols = [pa.array(snap.session_id, type=pa.int64()),
                 _dictionary(snap.session_status, STATUSES),
                 _rel(snap.session_start, epoch_ns), _rel(snap.session_end, epoch_ns)]
    sess_names = ["session_id", "status", "start", "end"]
    sess_attrs = _attrs_struct(len(snap.session_id), snap.session_attrs)
    if sess_attrs is not None:
        sess_cols.append(sess_attrs)
        sess_names.append("attrs")
    span_struct = pa.StructArray.from_arrays([
        pa.array(snap.span_session, type=pa.int64()),
        _dictionary(snap.span_phase, phases.phase_names()),
        pa.array(snap.span_start - epoch_ns, type=pa.int64()),
        pa.array(snap.span_end - epoch_ns, type=pa.int64()),
        pa.array(snap.span_flags.astype(np.int8), type=pa.int8()),
    ], names=["session", "phase", "start", "end", "flags"])
    no_version = snap.event_value == MISSING
    event_struct = pa.StructArray.from_arrays([
        pa.array(snap.event_session, type=pa.int64()),
        _dictionary(snap.event_kind, SESSION_EVENTS),
        pa.array(snap.event_ts - epoch_ns, type=pa.int64()),
        pa.array(snap.event_value, type=pa.int64(),
                 mask=no_version if no_version.any() else None),
    ], names=["session", "kind", "ts", "version"])
    columns: dict[str, pa.Array] = {
        "kind": _dictionary(mark_rows.astype(np.int64), _KINDS),
        "task_id": pa.array(np.concatenate((snap.task_id, snap.mark_task)), type=pa.int64()),
        "worker": _dictionary(np.concatenate((snap.worker, snap.mark_worker)), snap.workers),
        "status": _dictionary(np.concatenate((snap.status, zeros)), STATUSES, mark_rows),
        "reason": tasks_only(_strings(snap.reason)),
        "error": tasks_only(_strings(snap.error)),
        "marks": tasks_only(pa.StructArray.from_arrays(
            [_rel(col, epoch_ns) for col in snap.marks], names=list(LIFECYCLE_EVENTS))),
    }
    task_attrs = _attrs_struct(n + m, snap.task_attrs, mark_rows)
    if task_attrs is not None:
        columns["attrs"] = task_attrs
    columns["sessions"] = _list(snap.n_sessions, pa.StructArray.from_arrays(
        sess_cols, names=sess_names), m)
    columns["spans"] = _list(snap.n_spans, span_struct, m)
    columns["events"] = _list(np.bincount(snap.event_task, minlength=n), event_struct, m)
    columns["event"] = _dictionary(np.concatenate((np.zeros(n, np.int64), snap.mark_event)),
                                   LIFECYCLE_EVENTS, ~mark_rows)
    columns["ts"] = pa.array(np.concatenate((np.zeros(n, np.int64), snap.mark_ts - epoch_ns)),
                             type=pa.int64(), mask=~mark_rows if n else None)
    header = {"format": FORMAT, "schema": SCHEMA_VERSION, "wall_epoch": float(wall_epoch),
              "tasks": n, "marks": m, **(meta or {})}
    return pa.table(columns).replace_schema_metadata({META_KEY: orjson.dumps(header)})


def _dictionary_paths(schema: pa.Schema) -> list[str]:
    """The Parquet column paths of the dictionary-typed leaves of ``schema``."""
    out: list[str] = []

    def walk(path: str, t: pa.DataType) -> None:
        if pa.types.is_dictionary(t):
            out.append(path)
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(f"{path}.{t.field(i).name}", t.field(i).type)
        elif pa.types.is_large_list(t) or pa.types.is_list(t):
            walk(f"{path}.list.element", t.value_type)

    for f in schema:
        walk(f.name, f.type)
    return out


def write_snapshot(path: StrPath, snap: Snapshot, epoch_ns: int, wall_epoch: float,
                   meta: Mapping[str, Any] | None = None) -> Path:
    """Write ``snap`` as a trace Parquet file, atomically (a temporary file, then a rename).

    Returns:
        The path written.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    table = snapshot_table(snap, epoch_ns, wall_epoch, meta)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Parquet dictionary encoding for the dictionary columns only: trying it on the
        # int64 times costs time at write and buys nothing at read
        pq.write_table(table, tmp, compression=COMPRESSION, use_dictionary=_dictionary_paths(
            table.schema), row_group_size=max(table.num_rows, 1))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# -- reading --------------------------------------------------------------------------------

def read_info(path: StrPath) -> ParquetInfo:
    """The rollout_kit metadata of a trace Parquet file (reads its footer only).

    Raises:
        TraceSchemaError: not a Parquet file (or a truncated one), not a rollout_kit trace,
            or a schema version this rollout_kit does not read.
    """
    import pyarrow.parquet as pq

    try:
        md = pq.read_metadata(path)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc) from None
    return ParquetInfo(Path(path), _check_meta(path, md.metadata))


def read_snapshot(path: StrPath, shift_ns: int = 0) -> tuple[Snapshot, ParquetInfo]:
    """The snapshot stored in a trace Parquet file, and its metadata; times are ns since
    the file's ``wall_epoch`` plus ``shift_ns``.

    Raises:
        TraceSchemaError: not a readable Parquet file, not a rollout_kit trace, a newer
            schema, or columns that do not follow the layout.
    """
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        info = ParquetInfo(Path(path), _check_meta(path, pf.metadata.metadata))
        table = pf.read()  # one chunk per row group; ``read_table`` cuts 128k-row batches
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc) from None
    n, m = int(info.meta["tasks"]), int(info.meta["marks"])
    if table.num_rows != n + m:
        raise _fail(path, f"has {table.num_rows} rows, its metadata says {n} tasks and {m} "
                    "marks")
    if any(col.num_chunks != 1 for col in table.columns):
        table = table.combine_chunks()  # several row groups
    try:
        return _decode(table, n, shift_ns, path), info
    except KeyError as exc:
        raise _fail(path, f"has no column or field {exc.args[0]!r}") from None
    except (pa.ArrowException, ValueError, TypeError, IndexError) as exc:
        raise _fail(path, f"its columns do not follow the rollout_kit trace layout: {exc}"
                    ) from None


def _ints(arr: pa.Array, shift: int = 0) -> np.ndarray:
    """An integer column as int64: nulls become MISSING, the others are shifted."""
    if arr.null_count:
        out: np.ndarray = pc.fill_null(arr, MISSING).to_numpy().astype(np.int64)
        if shift:
            out[out != MISSING] += shift
        return out
    out = arr.to_numpy()
    if out.dtype == np.int64 and not shift:
        return out  # a read-only view of the column: never written to
    out = out.astype(np.int64)  # a copy
    if shift:
        out += shift
    return out


def _lookup(arr: pa.Array, code_of: Callable[[Any], int], what: str, path: StrPath
            ) -> np.ndarray:
    """Codes of a dictionary (or plain) column: ``code_of(name)`` for each dictionary entry,
    ``code_of(None)`` for a null."""
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    names = arr.dictionary.to_pylist()
    idx = arr.indices
    try:
        lut = [code_of(name) for name in names]
        if idx.null_count:
            lut.append(code_of(None))
            idx = pc.fill_null(idx, len(names))
    except KeyError as exc:
        raise _fail(path, f"unknown {what} {exc.args[0]!r}") from None
    codes: np.ndarray = np.asarray(lut or [0], dtype=np.int64)[
        idx.to_numpy().astype(np.int64, copy=False)]
    return codes


def _strings_of(arr: pa.Array) -> list[str | None]:
    """A string column as a list (null: None), through its dictionary."""
    if not pa.types.is_dictionary(arr.type):
        return list(arr.to_pylist())
    words = np.asarray([*arr.dictionary.to_pylist(), None], dtype=object)
    idx = arr.indices
    if idx.null_count:
        idx = pc.fill_null(idx, len(words) - 1)
    return list(words[idx.to_numpy().astype(np.int64, copy=False)].tolist())


def _attr_values(arr: pa.Array, field: pa.Field, path: StrPath) -> AttrValues:
    """The present values of one attribute field: a typed numpy array, or a list."""
    present = arr.drop_null() if arr.null_count else arr
    t = arr.type
    if field.metadata and field.metadata.get(_ENCODING) == b"json":
        try:
            return [orjson.loads(s) for s in present.to_pylist()]
        except (orjson.JSONDecodeError, TypeError):
            raise _fail(path, f"attribute {field.name!r} holds a value that is not JSON"
                        ) from None
    if pa.types.is_int64(t):
        return np.asarray(present.to_numpy(), dtype=np.int64)
    if pa.types.is_float64(t):
        return np.asarray(present.to_numpy(), dtype=np.float64)
    if pa.types.is_boolean(t):
        return np.asarray(present.to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        present = pc.dictionary_encode(present)
        t = present.type
    if pa.types.is_dictionary(t) and pa.types.is_string(t.value_type):
        words = present.dictionary.to_numpy(zero_copy_only=False)
        codes = present.indices.to_numpy().astype(np.int64, copy=False)
        if len(set(words.tolist())) == len(words):
            return pd.Categorical.from_codes(codes, categories=pd.Index(words, dtype=object))
        return list(words[codes].tolist())
    raise _fail(path, f"attribute {field.name!r} has a type rollout_kit does not write: {t}")


def _attrs(struct: pa.Array | None, path: StrPath) -> Attrs:
    """Sparse attribute columns (rows, present values) of a struct column."""
    out: Attrs = {}
    if struct is None:
        return out
    for i in range(struct.type.num_fields):
        field = struct.type.field(i)
        arr = pc.struct_field(struct, [i])
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        out[field.name] = (np.flatnonzero(valid).astype(np.int64),
                           _attr_values(arr, field, path))
    return out


def _decode(table: pa.Table, n: int, shift: int, path: StrPath) -> Snapshot:
    def column(part: pa.Table, name: str) -> pa.Array:
        col = part.column(name)
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()

    def field(arr: pa.Array, name: str) -> pa.Array:
        if arr.type.get_field_index(name) < 0:
            raise KeyError(name)
        return pc.struct_field(arr, name)

    def counts(lists: pa.Array) -> np.ndarray:
        return _ints(pc.fill_null(pc.list_value_length(lists), 0))

    tasks, marks = table.slice(0, n), table.slice(n)
    kind = _lookup(column(table, "kind"), {"task": 0, "mark": 1}.__getitem__, "record kind",
                   path)
    if (kind[:n] != 0).any() or (kind[n:] != 1).any():
        raise _fail(path, "its rows must be the task records, then the mark records")
    workers: list[str | None] = []

    def worker_code(name: str | None) -> int:
        if name not in workers:
            workers.append(name)
        return workers.index(name)

    sessions, spans = column(tasks, "sessions"), column(tasks, "spans")
    sess, span = sessions.flatten(), spans.flatten()
    times = column(tasks, "marks")
    events = column(tasks, "events") if "events" in table.column_names else None
    n_events = counts(events) if events is not None else np.zeros(n, np.int64)
    ev = events.flatten() if events is not None else None
    no_events = np.empty(0, dtype=np.int64)
    return Snapshot(
        task_id=_ints(column(tasks, "task_id")),
        status=_lookup(column(tasks, "status"), STATUS_CODES.__getitem__, "status", path
                       ).astype(np.int8),
        worker=_lookup(column(tasks, "worker"), worker_code, "worker", path).astype(np.int16),
        workers=workers,
        marks=[_ints(field(times, name), shift) for name in LIFECYCLE_EVENTS],
        reason=_strings_of(column(tasks, "reason")), error=_strings_of(column(tasks, "error")),
        n_sessions=counts(sessions), n_spans=counts(spans),
        task_attrs=_attrs(column(tasks, "attrs") if "attrs" in table.column_names else None,
                          path),
        session_id=_ints(field(sess, "session_id")),
        session_status=_lookup(field(sess, "status"), STATUS_CODES.__getitem__, "status",
                               path).astype(np.int8),
        session_start=_ints(field(sess, "start"), shift),
        session_end=_ints(field(sess, "end"), shift),
        session_attrs=_attrs(field(sess, "attrs") if sess.type.get_field_index("attrs") >= 0
                             else None, path),
        span_session=_ints(field(span, "session")),
        span_phase=_lookup(field(span, "phase"), phases.phase_code, "phase", path),
        span_start=_ints(field(span, "start"), shift),
        span_end=_ints(field(span, "end"), shift),
        span_flags=_ints(field(span, "flags")),
        mark_task=_ints(column(marks, "task_id")),
        mark_worker=_lookup(column(marks, "worker"), worker_code, "worker", path
                            ).astype(np.int16),
        mark_event=_lookup(column(marks, "event"), EVENT_CODES.__getitem__,
                           "lifecycle event", path).astype(np.int8),
        mark_ts=_ints(column(marks, "ts"), shift),
        event_task=np.repeat(np.arange(n, dtype=np.int64), n_events),
        event_session=_ints(field(ev, "session")) if ev is not None else no_events,
        event_kind=_lookup(field(ev, "kind"), SESSION_EVENT_CODES.__getitem__,
                           "session event", path) if ev is not None else no_events,
        event_ts=_ints(field(ev, "ts"), shift) if ev is not None else no_events,
        event_value=_ints(field(ev, "version")) if ev is not None else no_events,
    )


# -- several files ----------------------------------------------------------------------------

def _concat_values(parts: Sequence[AttrValues]) -> AttrValues:
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    if len(arrays) == len(parts) and len({a.dtype for a in arrays}) == 1:
        return np.concatenate(arrays)
    cats = [p for p in parts if isinstance(p, pd.Categorical)]
    if len(cats) == len(parts):
        return union_categoricals(cats)
    out: list[Any] = []
    for p in parts:
        out.extend(p if isinstance(p, list) else p.tolist())
    return out


def _concat_attrs(parts: Sequence[Attrs], bases: Sequence[int]) -> Attrs:
    """Sparse columns of consecutive parts; names in order of first appearance."""
    rows: dict[str, list[np.ndarray]] = {}
    values: dict[str, list[AttrValues]] = {}
    for cols, base in zip(parts, bases, strict=True):
        for name, (r, v) in cols.items():
            rows.setdefault(name, []).append(r + base)
            values.setdefault(name, []).append(v)
    return {name: (np.concatenate(rows[name]), _concat_values(values[name])) for name in rows}


def concat_snapshots(parts: Sequence[Snapshot]) -> Snapshot:
    """One snapshot of ``parts`` in order, as if their records had been ingested into one
    store: worker codes renumbered into one list of names, attribute and event rows offset.
    """
    if len(parts) == 1:
        return parts[0]
    workers: list[str | None] = []
    luts = []
    for p in parts:
        for w in p.workers:
            if w not in workers:
                workers.append(w)
        luts.append(np.asarray([workers.index(w) for w in p.workers] or [0], dtype=np.int16))

    def cat(pick: Callable[[Snapshot], np.ndarray]) -> np.ndarray:
        return np.concatenate([pick(p) for p in parts])

    task_base = np.cumsum([0] + [len(p.task_id) for p in parts[:-1]]).tolist()
    sess_base = np.cumsum([0] + [len(p.session_id) for p in parts[:-1]]).tolist()
    return Snapshot(
        task_id=cat(lambda p: p.task_id), status=cat(lambda p: p.status),
        worker=np.concatenate([lut[p.worker] for lut, p in zip(luts, parts, strict=True)]),
        workers=workers,
        marks=[np.concatenate([p.marks[i] for p in parts])
               for i in range(len(LIFECYCLE_EVENTS))],
        reason=[r for p in parts for r in p.reason], error=[e for p in parts for e in p.error],
        n_sessions=cat(lambda p: p.n_sessions), n_spans=cat(lambda p: p.n_spans),
        task_attrs=_concat_attrs([p.task_attrs for p in parts], task_base),
        session_id=cat(lambda p: p.session_id),
        session_status=cat(lambda p: p.session_status),
        session_start=cat(lambda p: p.session_start),
        session_end=cat(lambda p: p.session_end),
        session_attrs=_concat_attrs([p.session_attrs for p in parts], sess_base),
        span_session=cat(lambda p: p.span_session), span_phase=cat(lambda p: p.span_phase),
        span_start=cat(lambda p: p.span_start), span_end=cat(lambda p: p.span_end),
        span_flags=cat(lambda p: p.span_flags),
        mark_task=cat(lambda p: p.mark_task),
        mark_worker=np.concatenate([lut[p.mark_worker]
                                    for lut, p in zip(luts, parts, strict=True)]),
        mark_event=cat(lambda p: p.mark_event), mark_ts=cat(lambda p: p.mark_ts),
        event_task=np.concatenate([p.event_task + base
                                   for p, base in zip(parts, task_base, strict=True)]),
        event_session=cat(lambda p: p.event_session), event_kind=cat(lambda p: p.event_kind),
        event_ts=cat(lambda p: p.event_ts), event_value=cat(lambda p: p.event_value),
    )
