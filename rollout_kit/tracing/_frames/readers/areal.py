"""Reading AReaL's session traces (``sessions-r*.jsonl``,
:func:`read_areal_sessions_trace`); the column mapping is in
:mod:`rollout_kit.tracing._frames.readers`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...._errors import ConfigError, TraceSchemaError, truncate
from ... import _phases as phases
from ..._jsonl import jsonl_objects
from ..._store import FLAG_CLOSED_AT_FINALIZE, FLAG_RAISED
from ..build import Traces
from .common import (
    SOURCE,
    Record,
    StrPath,
    build,
    extra_name,
    finite,
    input_files,
    is_int,
    is_num,
    ns,
    present_attrs,
    session_record,
    task_record,
    where_at,
    worst,
)

#: the statuses of AReaL's session records
AREAL_STATUSES = ("pending", "accepted", "rejected", "failed", "dropped")

_AREAL_KEYS = ("task_id", "session_id", "status", "submit_ts")
_AREAL_OWN = frozenset({*_AREAL_KEYS, "rank", "role", "reason", "finalized_ts", "phases",
                        "counters", "total_s"})


def _areal_spans(phases_obj: object, finalized: int | None, failed: bool, where: str
                 ) -> list[tuple[str, int, int, int]]:
    """``(phase, start, end, flags)`` of a record's ``phases``; an open span is closed at
    ``finalized_ts`` (and left out when the record has none); in a failed session it is
    the call that raised."""
    open_flags = FLAG_CLOSED_AT_FINALIZE | (FLAG_RAISED if failed else 0)
    if phases_obj is None:
        return []
    if not isinstance(phases_obj, dict):
        raise TraceSchemaError(f"{where}'phases' must be an object, got "
                               f"{truncate(phases_obj, 40)}")
    out: list[tuple[str, int, int, int]] = []
    for name, spans in phases_obj.items():
        try:
            phases.phase_code(name)
        except ConfigError as exc:
            raise TraceSchemaError(f"{where}phase {truncate(name, 40)}: {exc}") from None
        if not isinstance(spans, list):
            raise TraceSchemaError(f"{where}phases[{name!r}] must be a list of spans")
        for j, span in enumerate(spans):
            start = finite(span.get("start_ts")) if isinstance(span, dict) else None
            if start is None or not isinstance(span, dict):
                raise TraceSchemaError(f"{where}phases[{name!r}][{j}] needs a numeric "
                                       f"'start_ts', got {truncate(span, 60)}")
            end = _number_or_null(span.get("end_ts"), f"{where}phases[{name!r}][{j}]: 'end_ts'")
            if end is not None:
                out.append((name, ns(start), ns(end), 0))
            elif finalized is not None:
                out.append((name, ns(start), finalized, open_flags))
    return out


def _number_or_null(value: object, what: str) -> float | None:
    """A finite number, or ``None`` for a JSON null; anything else is an error naming ``what``."""
    out = finite(value)
    if out is None and value is not None:
        raise TraceSchemaError(f"{what} must be a number or null, got {truncate(value, 40)}")
    return out


def _areal_session(path: Path, no: int, rec: dict[str, Any]
                   ) -> tuple[tuple[int, str | None, int], str, str | None, Record,
                              list[tuple[str, int, int, int]]]:
    """``((rank, role, task_id), areal status, reason, session, spans)`` of one record."""
    where = where_at(path, no)
    missing = [k for k in _AREAL_KEYS if k not in rec]
    if missing:
        raise TraceSchemaError(f"{where}missing {', '.join(repr(k) for k in missing)}: not an "
                               "AReaL SessionRecord (task_id, session_id, status, submit_ts)")
    for key in ("task_id", "session_id"):
        if not is_int(rec[key]) or rec[key] < 0:
            raise TraceSchemaError(f"{where}{key!r} must be an int >= 0, got "
                                   f"{truncate(rec[key], 40)}")
    status = rec["status"]
    if status not in AREAL_STATUSES:
        raise TraceSchemaError(f"{where}'status' must be one of {', '.join(AREAL_STATUSES)}, "
                               f"got {truncate(status, 40)}")
    submit = finite(rec["submit_ts"])
    if submit is None:
        raise TraceSchemaError(f"{where}'submit_ts' must be a number (seconds), got "
                               f"{truncate(rec['submit_ts'], 40)}")
    fin = _number_or_null(rec.get("finalized_ts"), f"{where}'finalized_ts'")
    rank, role, reason = rec.get("rank", 0), rec.get("role"), rec.get("reason")
    if not is_int(rank):
        raise TraceSchemaError(f"{where}'rank' must be an int, got {truncate(rank, 40)}")
    role = role if isinstance(role, str) else None
    reason = reason if isinstance(reason, str) else None
    end = ns(fin) if fin is not None else None
    attrs: dict[str, Any] = {}
    counters = rec.get("counters") or {}
    if not isinstance(counters, dict):
        raise TraceSchemaError(f"{where}'counters' must be an object, got "
                               f"{truncate(counters, 40)}")
    for name, v in counters.items():
        if is_num(v):
            attrs[extra_name(str(name))] = v
    for name, v in rec.items():  # a newer AReaL's scalar fields ride along
        if name not in _AREAL_OWN and not name.endswith("_s") and (
                isinstance(v, str | bool) or is_num(v)):
            attrs[extra_name(name)] = v
    ours = "cancelled" if status == "dropped" else status
    session = session_record(rec["session_id"], ours, ns(submit), end, attrs)
    return ((rank, role, rec["task_id"]), status, reason, session,
            _areal_spans(rec.get("phases"), end, status == "failed", where))


def read_areal_sessions_trace(path: StrPath | Sequence[StrPath]) -> Traces:
    """AReaL's session traces (``sessions-r*.jsonl``) as :class:`Traces`.

    Args:
        path: a session file or a list of them (one per rank; one wall clock).

    Returns:
        One session per ``SessionRecord``, one task per ``(rank, role, task_id)`` with the
        worker ``rank<r>`` (``<role>/rank<r>``); times since the earliest ``submit_ts``,
        which is ``wall_epoch``. AReaL's ``dropped`` is ``cancelled`` (reason ``dropped``).

    Raises:
        ConfigError: a file does not exist.
        TraceSchemaError: a line is not JSON (a torn last line is skipped with a warning),
            lacks a SessionRecord key, or has a bad value; the message names the file and
            the line.
    """
    files = input_files(path)
    groups: dict[tuple[int, str | None, int], list[tuple[str, str | None, Record,
                                                         list[tuple[str, int, int, int]]]]] = {}
    sources: dict[tuple[int, str | None, int], str] = {}
    for p in files:
        n = 0
        for no, rec in jsonl_objects(p):
            key, status, reason, session, found = _areal_session(p, no, rec)
            groups.setdefault(key, []).append((status, reason, session, found))
            sources.setdefault(key, os.fspath(p))
            n += 1
        if not n:
            raise TraceSchemaError(f"{where_at(p, None)}empty file (no AReaL session record)")
    tasks: list[Record] = []
    for key in sorted(groups, key=lambda k: (k[2], k[0], k[1] or "")):
        rank, role, task_id = key
        members = groups[key]
        sessions = [m[2] for m in members]
        spans: list[list[Any]] = [[k, name, start, end, flags] for k, m in enumerate(members)
                                  for name, start, end, flags in m[3]]
        status = worst(s["status"] for s in sessions)
        reason = next((m[1] for m in members if m[1] is not None), None)
        if reason is None and any(m[0] == "dropped" for m in members):
            reason = "dropped"
        submit = min(s["start"] for s in sessions)
        ends = [s["end"] for s in sessions if s["end"] is not None]
        tasks.append(task_record(
            task_id, status=status, reason=reason,
            worker=f"{role}/rank{rank}" if role else f"rank{rank}",
            marks=[submit, None, submit, max(ends) if ends else None, None],
            sessions=sessions, spans=spans,
            attrs=present_attrs(**{SOURCE: sources[key], "rank": rank, "role": role})))
    return build(tasks, wall=True, source=os.fspath(files[0]))
