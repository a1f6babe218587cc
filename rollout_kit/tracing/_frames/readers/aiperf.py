"""Reading aiperf's per-request exports (``profile_export.jsonl``, :func:`read_aiperf`); the
column mapping is in :mod:`rollout_kit.tracing._frames.readers`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...._errors import TraceSchemaError, truncate
from ... import schema as S
from ..._jsonl import jsonl_objects
from ..._store import FLAG_RAISED
from ..build import Traces
from .common import (
    REQUEST_ERROR,
    SOURCE,
    TPOT_S,
    Record,
    StrPath,
    build,
    extra_name,
    input_files,
    is_int,
    is_num,
    present_attrs,
    session_record,
    task_record,
    where_at,
    worst,
)

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
_WALL_NS = 10**17  # epoch ns after 1973: a wall clock, not a perf counter
# aiperf metric -> (session column, how to read it)
_AIPERF_METRICS: dict[str, tuple[str | None, str]] = {
    "input_sequence_length": (S.PROMPT_TOKENS, "int"),
    "output_sequence_length": (S.COMPLETION_TOKENS, "int"),
    "time_to_first_token": (S.TTFT_S, "time"),
    "inter_token_latency": (TPOT_S, "time"),
    "inter_chunk_latency": (S.ITL_S, "times"),
    "request_latency": (None, "skip"),  # the session's end - start
}
_AIPERF_META = {"x_request_id": "request_id", "x_correlation_id": "correlation_id",
                "conversation_id": "conversation_id", "turn_index": "turn_index",
                "benchmark_phase": "benchmark_phase"}


def _aiperf_metrics(metrics: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, m in metrics.items():
        if not isinstance(m, dict) or "value" not in m:
            raise TraceSchemaError(f"{where}metric {name!r} is not a {{value, unit}} object, "
                                   f"got {truncate(m, 60)}")
        value, unit = m["value"], m.get("unit")
        column, how = _AIPERF_METRICS.get(name, (None, "extra"))
        scale = _TIME_UNITS.get(unit) if isinstance(unit, str) else None
        if how in ("time", "times") and scale is None:
            raise TraceSchemaError(f"{where}metric {name!r} has unit {unit!r}, expected one of "
                                   f"{', '.join(_TIME_UNITS)}")
        if how == "skip" or value is None:
            continue
        if how == "int":
            if not is_int(value) and not (is_num(value) and float(value).is_integer()):
                raise TraceSchemaError(f"{where}metric {name!r} must be a whole number of "
                                       f"tokens, got {truncate(value, 40)}")
            out[column or name] = int(value)
        elif how == "times":
            if not isinstance(value, list) or not all(is_num(x) for x in value):
                raise TraceSchemaError(f"{where}metric {name!r} must be a list of numbers")
            if value:
                out[column or name] = float(np.mean(value)) * (scale or 1.0)
        elif not is_num(value):
            if how == "time":
                raise TraceSchemaError(f"{where}metric {name!r} must be a number, got "
                                       f"{truncate(value, 40)}")
            continue  # a list or text metric of its own: not a column
        elif how == "time":
            out[column or name] = float(value) * (scale or 1.0)
        elif scale is not None:
            out[extra_name(f"{name}_s")] = float(value) * scale
        else:
            out[extra_name(name)] = value
    return out


class _Request(NamedTuple):
    """One aiperf record, read."""

    position: int  # its position over the files: its session id
    group: int | str  # its task: session_num, else x_correlation_id, else its line
    worker: str | None
    status: str
    start: int
    end: int | None
    credit: int | None
    error: str | None
    attrs: dict[str, Any]


def _aiperf_record(path: Path, no: int, rec: dict[str, Any], index: int) -> _Request:
    where = where_at(path, no)
    meta = rec.get("metadata")
    if not isinstance(meta, dict):
        raise TraceSchemaError(f"{where}no 'metadata' object: not an aiperf per-request "
                               "record (profile_export.jsonl), or one of an unknown version")
    start = meta.get("request_start_ns")
    if not is_int(start):
        raise TraceSchemaError(f"{where}'metadata.request_start_ns' is missing or not an "
                               f"integer (ns), got {truncate(start, 40)}")
    times: dict[str, int | None] = {}
    for key in ("request_end_ns", "cancellation_time_ns", "credit_issued_ns"):
        v = meta.get(key)
        if v is not None and not is_int(v):
            raise TraceSchemaError(f"{where}'metadata.{key}' must be an integer (ns) or null, "
                                   f"got {truncate(v, 40)}")
        times[key] = v
    metrics = rec.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise TraceSchemaError(f"{where}'metrics' must be an object, got {truncate(metrics, 40)}")
    error = rec.get("error")
    if error is not None and not isinstance(error, dict):
        raise TraceSchemaError(f"{where}'error' must be an object or null, got "
                               f"{truncate(error, 40)}")
    cancelled = meta.get("was_cancelled") is True
    status = "cancelled" if cancelled else "failed" if error is not None else "accepted"
    attrs = _aiperf_metrics(metrics, where)
    for key, column in _AIPERF_META.items():
        v = meta.get(key)
        if isinstance(v, str) or is_int(v):
            attrs[column] = v
    message = None
    if error is not None:
        etype, code = error.get("type"), error.get("code")
        attrs.update(present_attrs(error_type=etype if isinstance(etype, str) else None,
                            error_code=code if is_int(code) else None))
        message = ": ".join(str(x) for x in (etype, error.get("message")) if x is not None)
    end = times["request_end_ns"]
    if end is None and cancelled:
        end = times["cancellation_time_ns"]
    num, corr, worker = meta.get("session_num"), meta.get("x_correlation_id"), meta.get(
        "worker_id")
    group: int | str = num if is_int(num) else corr if isinstance(corr, str) else f"line {no}"
    return _Request(position=index, group=group,
                    worker=worker if isinstance(worker, str) else None, status=status,
                    start=start, end=end, credit=times["credit_issued_ns"],
                    error=message or (truncate(error, 200) if error is not None else None),
                    attrs=attrs)


def _aiperf_task(task_id: int, turns: list[_Request], source: str) -> Record:
    sessions = [session_record(r.position, r.status, r.start, r.end, r.attrs) for r in turns]
    spans = [[k, "generate", r.start, r.end, 0 if r.status == "accepted" else FLAG_RAISED]
             for k, r in enumerate(turns) if r.end is not None]
    first = min(r.start for r in turns)
    ends = [r.end for r in turns]
    credits = [r.credit for r in turns if r.credit is not None]
    status = worst(r.status for r in turns)
    return task_record(
        task_id, status=status, worker=turns[0].worker,
        error=next((r.error for r in turns if r.error is not None), None),
        reason=None if status == "accepted" else "cancelled" if status == "cancelled"
        else REQUEST_ERROR,
        marks=[min(credits) if credits else first, first if credits else None, first,
               max(e for e in ends if e is not None) if None not in ends else None, None],
        sessions=sessions, spans=spans, attrs={SOURCE: source})


def read_aiperf(path: StrPath | Sequence[StrPath]) -> Traces:
    """aiperf's per-request exports (``profile_export.jsonl``) as :class:`Traces`.

    Args:
        path: an export file or a list of them (the task ids of a later file follow the
            earlier file's).

    Returns:
        One session per request (``session_id``: its record's position over the files),
        one task per aiperf user session (``task_id``: ``session_num``, the request's index
        in a single-turn run); times since the earliest request start (or credit);
        ``wall_epoch`` from aiperf's epoch nanoseconds (NaN for a perf-counter clock).

    Raises:
        ConfigError: a file does not exist.
        TraceSchemaError: a line is not JSON (a torn last line is skipped with a warning)
            or not an aiperf record (no ``metadata.request_start_ns``), a time metric in
            an unknown unit, a bad value; the message names the file and the line.
    """
    files = input_files(path)
    tasks: list[Record] = []
    first_id = n_sessions = 0
    wall = True
    for p in files:
        groups: dict[int | str, list[_Request]] = {}
        for no, rec in jsonl_objects(p):
            r = _aiperf_record(p, no, rec, n_sessions)
            n_sessions += 1
            wall = wall and r.start >= _WALL_NS
            groups.setdefault(r.group, []).append(r)
        if not groups:
            raise TraceSchemaError(f"{where_at(p, None)}empty file (no aiperf record)")
        numbered = all(is_int(k) for k in groups)  # session_num: the task id
        keys: list[int | str] = sorted(groups, key=int) if numbered else list(groups)
        for k, key in enumerate(keys):
            tid = first_id + (int(key) if numbered else k)
            tasks.append(_aiperf_task(tid, groups[key], os.fspath(p)))
        first_id = max(t["task_id"] for t in tasks) + 1
    return build(tasks, wall=wall, source=os.fspath(files[0]))
