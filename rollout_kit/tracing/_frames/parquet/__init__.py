"""Parquet form of a trace: the JSONL record stream in columns, written with pyarrow.

**Layout: one Parquet file per trace** (``X.jsonl`` compacts to ``X.parquet`` next to it),
**one row per record** like the JSONL lines — every task record first, then every late mark
record, then (when samples were scraped from the servers) one row holding every server
metrics sample. The header is not a row but the file's key-value metadata under
:data:`META_KEY`, a JSON object: ``format``, ``schema`` (the trace schema version),
``wall_epoch`` (the anchor every time in the file counts from), the row counts ``tasks`` /
``marks`` (and ``server_metrics``, the number of samples, when there are any), ``headers``
(the JSONL header records it was built from, each with its own anchor, worker and pid) and
``source`` (name, path, size and first anchor of that JSONL, so a loader can tell whether
the Parquet is still current). Columns::

    kind      dictionary<string>  "task" | "mark" | "server_metrics"
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
    server_metrics  large_list<struct<ts: int64, server, metric, labels: dictionary<string>,
                                      value: double>>     (the server metrics row)

Times are integer nanoseconds since ``wall_epoch``. An attribute field is ``int64``,
``double``, ``bool`` or ``dictionary<string>`` when all of its values have that one Python
type (strings load as a Categorical: no Python object per row); any other mix (types
mixed, explicit ``None`` values, NaN or infinities) is a
``string`` field of JSON-encoded values (field metadata ``rollout_kit.encoding: json``), the
very values the JSONL holds, so both forms load to the same frames.

Why one file of records, not one file per frame: a trace stays one file that is replaced
atomically and carries its header; the sessions, spans and events of a task are stored
contiguously exactly as :class:`~rollout_kit.tracing._store.Store` keeps them (the list
offsets *are* its ``n_sessions`` / ``n_spans``), so reading decodes columns straight into a
:class:`~rollout_kit.tracing._store.Snapshot` without one Python object per row; and the
frames are then built by the same :func:`~rollout_kit.tracing._frames.build.build_traces` as from
JSONL, so derived columns (per-phase seconds, the phases registered in the reading
process) cannot disagree between the two forms. Stored frames would have to be rebuilt
anyway when several files are loaded together.
"""

from .meta import COMPRESSION, META_KEY, ParquetInfo
from .read import concat_snapshots, read_info, read_snapshot
from .write import snapshot_table, write_snapshot

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
