"""Reading trace Parquet files back into :class:`~rollout_kit.tracing._store.Snapshot` s
(one file, or several concatenated); see :mod:`rollout_kit.tracing._frames.parquet` for
the layout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.api.types import union_categoricals

from ... import _phases as phases
from ..._codes import EVENT_CODES, SESSION_EVENT_CODES, STATUS_CODES
from ..._store import MISSING, AttrValues, Snapshot
from ..._store.metrics import MetricRows
from ..._store.steps import StepRows
from ...schema import LIFECYCLE_EVENTS
from .meta import (
    ENCODING,
    Attrs,
    ParquetInfo,
    StrPath,
    check_meta,
    fail,
    unreadable,
)


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
        raise unreadable(path, exc) from None
    return ParquetInfo(Path(path), check_meta(path, md.metadata))


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
        info = ParquetInfo(Path(path), check_meta(path, pf.metadata.metadata))
        table = pf.read()  # one chunk per row group; ``read_table`` cuts 128k-row batches
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(path, exc) from None
    n, m = int(info.meta["tasks"]), int(info.meta["marks"])
    k = int(info.meta.get("server_metrics", 0))
    if table.num_rows != n + m + (k > 0):
        raise fail(path, f"has {table.num_rows} rows, its metadata says {n} tasks, {m} "
                    f"marks and {k} server metrics samples")
    if any(col.num_chunks != 1 for col in table.columns):
        table = table.combine_chunks()  # several row groups
    try:
        snap = _decode(table.slice(0, n + m), n, shift_ns, path)
        if k:
            snap.server_metrics = _metrics(table.slice(n + m), k, shift_ns, path)
        steps = info.meta.get("rl_steps")
        if steps is not None:
            snap.steps = StepRows.from_record(steps, shift_ns)
        return snap, info
    except KeyError as exc:
        raise fail(path, f"has no column or field {exc.args[0]!r}") from None
    except (pa.ArrowException, ValueError, TypeError, IndexError) as exc:
        raise fail(path, f"its columns do not follow the rollout_kit trace layout: {exc}"
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
        raise fail(path, f"unknown {what} {exc.args[0]!r}") from None
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
    if field.metadata and field.metadata.get(ENCODING) == b"json":
        try:
            return [orjson.loads(s) for s in present.to_pylist()]
        except (orjson.JSONDecodeError, TypeError):
            raise fail(path, f"attribute {field.name!r} holds a value that is not JSON"
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
    raise fail(path, f"attribute {field.name!r} has a type rollout_kit does not write: {t}")


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
    kind = _lookup(column(table, "kind"), {"task": 0, "mark": 1, "server_metrics": 2}.__getitem__,
                   "record kind",
                   path)
    if (kind[:n] != 0).any() or (kind[n:] != 1).any():
        raise fail(path, "its rows must be the task records, then the mark records")
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


def _metrics(row: pa.Table, k: int, shift: int, path: StrPath) -> MetricRows:
    """The server metrics samples of the last row (``k`` of them)."""
    kind = row.column("kind").chunk(0)
    if _lookup(kind, {"task": 0, "mark": 1, "server_metrics": 2}.__getitem__, "record kind",
               path).tolist() != [2]:
        raise fail(path, "its last row must be the server metrics record")
    col = row.column("server_metrics")
    items = (col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()).flatten()
    if len(items) != k:
        raise fail(path, f"holds {len(items)} server metrics samples, its metadata says {k}")
    names: list[list[str]] = []

    def codes(name: str) -> np.ndarray:
        arr = pc.struct_field(items, name)
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        words = [str(w) for w in arr.dictionary.to_pylist()]
        names.append(words)
        out: np.ndarray = arr.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        return out

    server, metric, labels = codes("server"), codes("metric"), codes("labels")
    value = pc.struct_field(items, "value").to_numpy(zero_copy_only=False)
    return MetricRows(ts=_ints(pc.struct_field(items, "ts"), shift), server=server,
                      metric=metric, labels=labels,
                      value=np.asarray(value, dtype=np.float64), servers=names[0],
                      metrics=names[1], label_sets=names[2])


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
        server_metrics=MetricRows.concat([p.server_metrics for p in parts]),
        steps=StepRows.concat([p.steps for p in parts]),
    )
