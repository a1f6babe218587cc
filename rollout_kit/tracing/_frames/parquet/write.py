"""Writing a :class:`~rollout_kit.tracing._store.Snapshot` as a trace Parquet file (pyarrow);
see :mod:`rollout_kit.tracing._frames.parquet` for the layout."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ... import _phases as phases
from ..._store import FORMAT, MISSING, AttrValues, Snapshot
from ..._store.metrics import MetricRows
from ...schema import (
    LIFECYCLE_EVENTS,
    SCHEMA_VERSION,
    SESSION_EVENTS,
    STATUSES,
)
from .meta import COMPRESSION, JSON_FIELD, KINDS, META_KEY, Attrs, StrPath


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
        fields.append(pa.field(name, arr.type, metadata=JSON_FIELD if is_json else None))
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


def _metrics_column(rows: MetricRows, epoch_ns: int, n_before: int) -> pa.Array:
    """The ``server_metrics`` column: null on the ``n_before`` task and mark rows, then one
    row holding every sample as a list of structs."""
    struct = pa.StructArray.from_arrays([
        pa.array(rows.ts - epoch_ns, type=pa.int64()),
        _dictionary(rows.server, rows.servers),
        _dictionary(rows.metric, rows.metrics),
        _dictionary(rows.labels, rows.label_sets),
        pa.array(rows.value, type=pa.float64()),
    ], names=["ts", "server", "metric", "labels", "value"])
    offsets = np.concatenate((np.zeros(n_before + 1, np.int64), [len(rows)]))
    mask = np.ones(n_before + 1, dtype=bool)
    mask[-1] = False
    return pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), struct,
                                         mask=pa.array(mask))


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
        "kind": _dictionary(mark_rows.astype(np.int64), KINDS),
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
    steps = snap.steps.record(epoch_ns)
    if steps is not None:  # a few rows: kept in the metadata, as the JSONL record
        header["rl_steps"] = steps
    k = len(snap.server_metrics)
    if k:  # one more row: the server metrics record
        header["server_metrics"] = k
        columns = {name: pa.concat_arrays([arr, pa.nulls(1, type=arr.type)])
                   for name, arr in columns.items()}
        columns["kind"] = _dictionary(np.concatenate((mark_rows.astype(np.int64), [2])),
                                      KINDS)
        columns["server_metrics"] = _metrics_column(snap.server_metrics, epoch_ns, n + m)
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
