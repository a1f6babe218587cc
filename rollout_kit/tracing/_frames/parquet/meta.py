"""The trace Parquet file's metadata (its header) and the errors naming the file; see
:mod:`rollout_kit.tracing._frames.parquet` for the layout."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ...._errors import TraceSchemaError
from ..._store import FORMAT, AttrValues
from ...schema import (
    MIN_SCHEMA_VERSION,
    SCHEMA_VERSION,
)

META_KEY = b"rollout_kit.trace"
COMPRESSION = "zstd"
ENCODING = b"rollout_kit.encoding"
JSON_FIELD = {ENCODING: b"json"}
KINDS = ("task", "mark", "server_metrics")

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


def fail(path: StrPath, what: str) -> TraceSchemaError:
    return TraceSchemaError(f"{os.fspath(path)}: {what}")


def unreadable(path: StrPath, exc: BaseException) -> TraceSchemaError:
    return fail(path, f"is not a readable Parquet file (truncated or corrupt?): {exc}")


def check_meta(path: StrPath, raw: Mapping[bytes, bytes] | None) -> dict[str, Any]:
    blob = None if raw is None else raw.get(META_KEY)
    if blob is None:
        raise fail(path, "is not a rollout_kit trace (a Parquet file without rollout_kit "
                    "trace metadata)")
    try:
        meta = orjson.loads(blob)
    except orjson.JSONDecodeError:
        raise fail(path, "its rollout_kit metadata is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise fail(path, f"is not a rollout_kit trace (metadata format is not {FORMAT!r})")
    schema = meta.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise fail(path, f"its metadata has no integer schema version (got {schema!r})")
    if schema > SCHEMA_VERSION:
        raise fail(path, f"trace schema {schema} is newer than this rollout_kit reads "
                    f"(schema {SCHEMA_VERSION}); upgrade rollout_kit to load it")
    if schema < MIN_SCHEMA_VERSION:  # the layout is the same for schemas 1 and 2
        raise fail(path, f"trace schema {schema}, expected {MIN_SCHEMA_VERSION}.."
                    f"{SCHEMA_VERSION}")
    wall = meta.get("wall_epoch")
    if not isinstance(wall, int | float) or isinstance(wall, bool):
        raise fail(path, "its metadata has no numeric wall_epoch")
    for key in ("tasks", "marks"):
        count = meta.get(key)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise fail(path, f"its metadata has no row count {key!r}")
    count = meta.get("server_metrics", 0)  # absent: none (files written before they were)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise fail(path, f"its metadata's server_metrics count is not an int >= 0: {count!r}")
    return meta
