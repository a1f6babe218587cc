"""Other tools' result files as :class:`~rollout_kit.tracing.Traces`: the same frames, the
same column names where the meaning is the same, so :mod:`rollout_kit.analysis` and every
plot of :mod:`rollout_kit.plotting` work on them as on this project's own traces.

Three readers, each taking a file or a list of files (``load_traces`` takes globs and
directories too, and picks the reader by each file's content, not its name):

* :func:`read_vllm_bench`: ``vllm bench serve --save-result --save-detailed`` JSON (one
  result object; several, one a line, with ``--append-result``; also what
  ``rollout-kit load --save-result --save-detailed`` writes). One task per request, with one
  session and one ``generate`` span from the request's send to its last token.
* :func:`read_aiperf`: aiperf's per-request export (``profile_export.jsonl``: one
  ``{metadata, metrics, error}`` record a line). One session per request; one task per
  aiperf *user session* (``metadata.session_num``: the request of a single-turn benchmark,
  the turns of a multi-turn conversation).
* :func:`read_areal_sessions_trace`: AReaL's session trace (``sessions-r*.jsonl``, one
  ``SessionRecord`` a line). One session per record, one task per ``(rank, task_id)``, its
  ``phases`` as spans.

Column mapping, where the meaning is the same (tasks frame ``T``, sessions frame ``S``):

* vllm bench serve (request ``i``): T ``submit_ts`` = ``start_times − queue_times`` (its
  arrival; ``queue_s`` is vllm's client queue time), ``dispatch_ts`` = ``start_ts`` =
  ``start_times`` (sent), ``end_ts`` = ``start + latencies``; ``status`` accepted, or failed
  when ``errors[i]`` is set (``error`` = that text, ``reason`` = ``request_error``).
  S ``prompt_tokens`` / ``completion_tokens`` = ``input_lens`` / ``output_lens``,
  ``ttft_s`` = ``ttfts``, ``itl_s`` = the mean of ``itls[i]`` (the chunk gaps), ``tpot_s``
  = ``(latency − ttft) / (output − 1)``.
* aiperf (one record): S ``start_ts`` / ``end_ts`` = ``request_start_ns`` /
  ``request_end_ns``, ``prompt_tokens`` / ``completion_tokens`` = ``input_sequence_length``
  / ``output_sequence_length``, ``ttft_s`` = ``time_to_first_token``, ``itl_s`` = the mean
  of ``inter_chunk_latency``, ``tpot_s`` = ``inter_token_latency`` (aiperf's ITL is a
  TPOT). T ``start_ts`` / ``end_ts``: the first start / last end of the task's requests;
  ``submit_ts`` = ``credit_issued_ns`` when the record has it (then ``dispatch_ts`` = the
  start and ``queue_s`` the credit's wait), else the start (``dispatch_ts`` NaN);
  ``status`` accepted, failed (``error``: ``"<type>: <message>"``, ``reason``
  ``request_error``) or cancelled (``was_cancelled``); ``worker`` = ``worker_id``.
* AReaL (one SessionRecord): S ``start_ts`` = ``submit_ts`` (when the sample *started*:
  AReaL's queueing delay is not in the file), ``end_ts`` = ``finalized_ts``, ``status``
  (``dropped`` → cancelled). T ``submit_ts`` = ``start_ts`` = the first session's
  ``submit_ts``, ``end_ts`` = ``finalized_ts``, ``dispatch_ts`` NaN, ``reason``,
  ``worker`` = ``rank<r>`` (``<role>/rank<r>``). Spans: every phase of ``phases``.
* Spans and ``generate_s``: vllm and aiperf requests are one ``generate`` span from the
  request's start to its end.

Extras: every task has ``source`` (the file); vllm adds ``model_id`` (and ``run``, the
result's index, when a file holds several) and ``generated_text``; aiperf adds
``request_id``, ``correlation_id``, ``conversation_id``, ``turn_index``, ``benchmark_phase``,
``error_type`` / ``error_code`` and every other scalar metric (time metrics in seconds as
``<name>_s``, the rest as ``<name>``); AReaL adds ``rank`` (and ``role``), its ``counters``
and any other scalar key (a tool's name that would shadow one of this project's columns gets
an ``x_`` prefix). A failed aiperf request's span has ``raised=True``; a failed vllm
request has no span (the file does not say when it ended), and neither tool's failures have
token counts or a TTFT (vllm writes 0 for them). AReaL's ``<phase>_s`` keys are recomputed
from ``phases`` (a span left open, ``end_ts: null``, is closed at ``finalized_ts`` and
flagged ``closed_at_finalize``; AReaL's own sums leave it out).

Times are rebased as :func:`~rollout_kit.tracing.load_traces` does: seconds since the
earliest time in the files, which becomes ``Traces.wall_epoch`` where the file has wall
times (aiperf's epoch nanoseconds, AReaL's ``time.time()``). ``vllm bench serve`` records
``time.perf_counter()`` only: its ``wall_epoch`` is NaN, and the files of one call are on
that clock as written (comparable when recorded on one machine since one boot).

Bad input raises :class:`~rollout_kit.errors.TraceSchemaError` naming the file (and the
1-based line): a result of an unknown version or saved without ``--save-detailed`` names the
keys it lacks; a torn last line of a JSONL export is skipped with a
:class:`~rollout_kit.tracing.TornTraceWarning`, as for this project's own traces.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeGuard

import numpy as np

from ..errors import ConfigError, TraceSchemaError, truncate
from . import phases
from . import schema as S
from .frames import Traces, build_traces
from .jsonl import jsonl_objects
from .store import FLAG_CLOSED_AT_FINALIZE, FLAG_RAISED, FORMAT, Store

__all__ = [
    "AREAL_STATUSES",
    "KINDS",
    "SOURCE",
    "TPOT_S",
    "VLLM_ARRAYS",
    "Kind",
    "file_kind",
    "foreign_kind",
    "read_aiperf",
    "read_areal_sessions_trace",
    "read_files",
    "read_vllm_bench",
]

StrPath = str | os.PathLike[str]
Kind = Literal["rollout_kit", "vllm_bench", "aiperf", "areal_sessions"]

#: what each kind of file is, in messages
KINDS: dict[Kind, str] = {
    "rollout_kit": "a rollout_kit trace",
    "vllm_bench": "a vllm bench serve result",
    "aiperf": "an aiperf per-request export",
    "areal_sessions": "an AReaL session trace",
}

#: the tasks column naming the file a task was read from
SOURCE = "source"
#: sessions column: time per output token after the first, ``(e2e − ttft) / (out − 1)``
TPOT_S = "tpot_s"

#: the statuses of AReaL's session records
AREAL_STATUSES = ("pending", "accepted", "rejected", "failed", "dropped")

_REQUEST_ERROR = "request_error"  # the reason of a failed request of another tool
_WORST_FIRST = ("failed", "cancelled", "rejected", "pending", "accepted")
_SNIFF_LIMIT = 64 << 20  # the most read of a file (its first line or JSON) to tell its kind
_RESERVED = frozenset({*S.SESSION_COLUMNS, *S.TASK_COLUMNS, S.TASK_ID, S.SESSION_ID, TPOT_S,
                       SOURCE})
_Record = dict[str, Any]


# -- small checks --------------------------------------------------------------------------
def _is_num(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _finite(v: object) -> float | None:
    """``v`` as a float when it is a finite number, else None."""
    return float(v) if _is_num(v) and math.isfinite(v) else None


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _where(path: Path, line: int | None) -> str:
    return f"{os.fspath(path)}: line {line}: " if line is not None else f"{os.fspath(path)}: "


def _files(path: StrPath | Sequence[StrPath]) -> list[Path]:
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike | Sequence):
        raise ConfigError(f"path must be a file or a list of files, got {path!r}")
    items = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not items or not all(isinstance(p, str | os.PathLike) for p in items):
        raise ConfigError(f"path must be a file or a list of files, got {path!r}")
    out = [Path(p) for p in items]
    for p in out:
        if not p.is_file():
            raise ConfigError(f"result file {os.fspath(p)!r} does not exist")
    return out


def _worst(statuses: Iterable[str]) -> str:
    found = set(statuses)
    return next((s for s in _WORST_FIRST if s in found), "pending")


def _attrs(**values: object) -> dict[str, Any]:
    """The attributes that have a value (a None would turn a typed column into objects)."""
    return {k: v for k, v in values.items() if v is not None}


def _extra_name(name: str) -> str:
    """A tool's own column name, prefixed where it would shadow a rollout_kit column."""
    if name in _RESERVED or name.endswith(S.PHASE_SESSION_SUFFIX) or (
            name.endswith("_s") and phases.is_phase(name[:-2])):
        return f"x_{name}"
    return name


def _build(tasks: list[_Record], *, wall: bool, source: str) -> Traces:
    """The frames of task records whose times are int ns on the files' own clock."""
    starts = [t["marks"][0] for t in tasks if t["marks"][0] is not None]
    anchor = min(starts) if starts else 0
    header = {"kind": "header", "format": FORMAT, "schema": S.SCHEMA_VERSION,
              "wall_epoch": 0.0}
    store = Store()
    store.ingest([header, *tasks], -anchor, 0.0, source=source)  # times - anchor
    return build_traces(store.snapshot(), 0, anchor / 1e9 if wall and starts else math.nan)


def _task(task_id: int, *, status: str, marks: list[int | None], sessions: list[_Record],
          spans: list[list[Any]], attrs: dict[str, Any], worker: str | None = None,
          reason: str | None = None, error: str | None = None) -> _Record:
    return {"kind": "task", "task_id": task_id, "worker": worker, "status": status,
            "reason": reason, "error": error, "marks": marks, "attrs": attrs,
            "sessions": sessions, "spans": spans}


def _session(session_id: int, status: str, start: int | None, end: int | None,
             attrs: dict[str, Any]) -> _Record:
    return {"session_id": session_id, "status": status, "start": start, "end": end,
            "attrs": attrs}


# -- vllm bench serve ----------------------------------------------------------------------
#: the per-request arrays this reader needs (``--save-detailed`` adds all but latencies)
VLLM_ARRAYS = ("start_times", "latencies", "ttfts", "itls", "input_lens", "output_lens",
               "errors")


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)  # the json module: vllm's json.dump writes NaN as is
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None


def _vllm_results(path: Path) -> list[tuple[int | None, dict[str, Any]]]:
    """``(line or None, result)`` of each result object in a vllm bench serve file."""
    raw = path.read_bytes()
    doc = _json_or_none(raw)
    if isinstance(doc, dict):
        return [(None, doc)]
    if doc is not None:
        raise TraceSchemaError(f"{_where(path, None)}not a vllm bench serve result (a JSON "
                               f"{type(doc).__name__}, not an object)")
    out: list[tuple[int | None, dict[str, Any]]] = []
    for no, line in enumerate(raw.split(b"\n"), 1):  # --append-result: one result a line
        if not line.strip():
            continue
        obj = _json_or_none(line)
        if obj is None:
            raise TraceSchemaError(f"{_where(path, no)}not JSON")
        if not isinstance(obj, dict):
            raise TraceSchemaError(f"{_where(path, no)}not a JSON object")
        out.append((no, obj))
    if not out:
        raise TraceSchemaError(f"{_where(path, None)}empty file (no vllm bench serve result)")
    return out


def _vllm_arrays(res: dict[str, Any], where: str) -> int:
    """Check the per-request arrays; returns their length."""
    missing = [k for k in VLLM_ARRAYS if k not in res]
    if missing:
        raise TraceSchemaError(
            f"{where}a vllm bench serve result of an unknown version, or saved without "
            f"--save-detailed: it lacks {', '.join(repr(k) for k in missing)} (this reader "
            f"needs the per-request arrays {', '.join(VLLM_ARRAYS)})")
    lens = {k: len(res[k]) if isinstance(res[k], list) else -1
            for k in (*VLLM_ARRAYS, "queue_times", "generated_texts") if k in res}
    bad = [k for k, n in lens.items() if n < 0]
    if bad:
        raise TraceSchemaError(f"{where}{', '.join(repr(k) for k in bad)} must be a list, "
                               f"got {type(res[bad[0]]).__name__}")
    n = lens["start_times"]
    if any(m != n for m in lens.values()):
        raise TraceSchemaError(f"{where}the per-request arrays differ in length: "
                               + ", ".join(f"{k} {m}" for k, m in lens.items()))
    return n


def _vllm_value(res: dict[str, Any], i: int, where: str, key: str,
                kind: Literal["number", "int", "str", "list"]) -> Any:
    v = res[key][i]
    if kind == "list":
        ok = isinstance(v, list) and all(_is_num(x) for x in v)
    else:
        ok = v is None or (_is_num(v) if kind == "number" else _is_int(v) if kind == "int"
                           else isinstance(v, str))
    if not ok:
        raise TraceSchemaError(f"{where}{key}[{i}] must be a {kind}, got {truncate(v, 40)}")
    return v


def _vllm_tasks(path: Path, line: int | None, res: dict[str, Any], first_id: int,
                run: int | None) -> list[_Record]:
    where = _where(path, line)
    n = _vllm_arrays(res, where)
    model = res.get("model_id") if isinstance(res.get("model_id"), str) else None
    texts = "generated_texts" in res
    out: list[_Record] = []
    for i in range(n):
        get = functools.partial(_vllm_value, res, i, where)
        start_s = _finite(get("start_times", "number"))
        if start_s is None:
            raise TraceSchemaError(f"{where}start_times[{i}] must be a finite number")
        err = get("errors", "str")
        ok = not err
        start = _ns(start_s)
        queue = _finite(get("queue_times", "number")) if "queue_times" in res else None
        latency = _finite(get("latencies", "number"))
        ttft = _finite(get("ttfts", "number"))
        gaps = get("itls", "list")
        prompt, output = get("input_lens", "int"), get("output_lens", "int")
        end = start + _ns(latency) if ok and latency is not None else None
        tpot = None
        if ok and latency is not None and ttft is not None and output is not None and output > 1:
            tpot = (latency - ttft) / (output - 1)
        status = "accepted" if ok else "failed"
        tid = first_id + i
        sattrs = _attrs(**{S.PROMPT_TOKENS: prompt if ok else None,
                           S.COMPLETION_TOKENS: output if ok else None,
                           S.TTFT_S: ttft if ok else None,
                           S.ITL_S: float(np.mean(gaps)) if ok and gaps else None,
                           TPOT_S: tpot,
                           "generated_text": get("generated_texts", "str") if texts else None})
        out.append(_task(
            tid, status=status, reason=None if ok else _REQUEST_ERROR,
            error=None if ok else str(err),
            marks=[start - _ns(queue or 0.0), start, start, end, None],
            sessions=[_session(tid, status, start, end, sattrs)],
            spans=[[0, "generate", start, end, 0]] if end is not None else [],
            attrs=_attrs(**{SOURCE: os.fspath(path), "model_id": model, "run": run})))
    return out


def read_vllm_bench(path: StrPath | Sequence[StrPath]) -> Traces:
    """``vllm bench serve --save-result --save-detailed`` result files as :class:`Traces`.

    Args:
        path: a result file (one JSON object, or one a line from ``--append-result``), or
            a list of them; tasks are numbered from 0 in file and request order.

    Returns:
        One task per request (see the module docstring for the columns); ``wall_epoch`` is
        NaN (vllm records ``perf_counter`` times only).

    Raises:
        ConfigError: a file does not exist.
        TraceSchemaError: not a result object, a result lacking the per-request arrays
            (an unknown version, or saved without ``--save-detailed``: the message names
            the file and the keys), arrays of different lengths, a bad value.
    """
    tasks: list[_Record] = []
    files = _files(path)
    for p in files:
        results = _vllm_results(p)
        for run, (line, res) in enumerate(results):
            tasks += _vllm_tasks(p, line, res, len(tasks), run if len(results) > 1 else None)
    return _build(tasks, wall=False, source=os.fspath(files[0]))


# -- aiperf --------------------------------------------------------------------------------
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
            if not _is_int(value) and not (_is_num(value) and float(value).is_integer()):
                raise TraceSchemaError(f"{where}metric {name!r} must be a whole number of "
                                       f"tokens, got {truncate(value, 40)}")
            out[column or name] = int(value)
        elif how == "times":
            if not isinstance(value, list) or not all(_is_num(x) for x in value):
                raise TraceSchemaError(f"{where}metric {name!r} must be a list of numbers")
            if value:
                out[column or name] = float(np.mean(value)) * (scale or 1.0)
        elif not _is_num(value):
            if how == "time":
                raise TraceSchemaError(f"{where}metric {name!r} must be a number, got "
                                       f"{truncate(value, 40)}")
            continue  # a list or text metric of its own: not a column
        elif how == "time":
            out[column or name] = float(value) * (scale or 1.0)
        elif scale is not None:
            out[_extra_name(f"{name}_s")] = float(value) * scale
        else:
            out[_extra_name(name)] = value
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
    where = _where(path, no)
    meta = rec.get("metadata")
    if not isinstance(meta, dict):
        raise TraceSchemaError(f"{where}no 'metadata' object: not an aiperf per-request "
                               "record (profile_export.jsonl), or one of an unknown version")
    start = meta.get("request_start_ns")
    if not _is_int(start):
        raise TraceSchemaError(f"{where}'metadata.request_start_ns' is missing or not an "
                               f"integer (ns), got {truncate(start, 40)}")
    times: dict[str, int | None] = {}
    for key in ("request_end_ns", "cancellation_time_ns", "credit_issued_ns"):
        v = meta.get(key)
        if v is not None and not _is_int(v):
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
        if isinstance(v, str) or _is_int(v):
            attrs[column] = v
    message = None
    if error is not None:
        etype, code = error.get("type"), error.get("code")
        attrs.update(_attrs(error_type=etype if isinstance(etype, str) else None,
                            error_code=code if _is_int(code) else None))
        message = ": ".join(str(x) for x in (etype, error.get("message")) if x is not None)
    end = times["request_end_ns"]
    if end is None and cancelled:
        end = times["cancellation_time_ns"]
    num, corr, worker = meta.get("session_num"), meta.get("x_correlation_id"), meta.get(
        "worker_id")
    group: int | str = num if _is_int(num) else corr if isinstance(corr, str) else f"line {no}"
    return _Request(position=index, group=group, worker=worker if isinstance(worker, str) else None,
                    status=status, start=start, end=end, credit=times["credit_issued_ns"],
                    error=message or (truncate(error, 200) if error is not None else None),
                    attrs=attrs)


def _aiperf_task(task_id: int, turns: list[_Request], source: str) -> _Record:
    sessions = [_session(r.position, r.status, r.start, r.end, r.attrs) for r in turns]
    spans = [[k, "generate", r.start, r.end, 0 if r.status == "accepted" else FLAG_RAISED]
             for k, r in enumerate(turns) if r.end is not None]
    first = min(r.start for r in turns)
    ends = [r.end for r in turns]
    credits = [r.credit for r in turns if r.credit is not None]
    status = _worst(r.status for r in turns)
    return _task(
        task_id, status=status, worker=turns[0].worker,
        error=next((r.error for r in turns if r.error is not None), None),
        reason=None if status == "accepted" else "cancelled" if status == "cancelled"
        else _REQUEST_ERROR,
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
    files = _files(path)
    tasks: list[_Record] = []
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
            raise TraceSchemaError(f"{_where(p, None)}empty file (no aiperf record)")
        numbered = all(_is_int(k) for k in groups)  # session_num: the task id
        keys: list[int | str] = sorted(groups, key=int) if numbered else list(groups)
        for k, key in enumerate(keys):
            tid = first_id + (int(key) if numbered else k)
            tasks.append(_aiperf_task(tid, groups[key], os.fspath(p)))
        first_id = max(t["task_id"] for t in tasks) + 1
    return _build(tasks, wall=wall, source=os.fspath(files[0]))


# -- AReaL ---------------------------------------------------------------------------------
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
            start = _finite(span.get("start_ts")) if isinstance(span, dict) else None
            if start is None or not isinstance(span, dict):
                raise TraceSchemaError(f"{where}phases[{name!r}][{j}] needs a numeric "
                                       f"'start_ts', got {truncate(span, 60)}")
            end = _number_or_null(span.get("end_ts"), f"{where}phases[{name!r}][{j}]: 'end_ts'")
            if end is not None:
                out.append((name, _ns(start), _ns(end), 0))
            elif finalized is not None:
                out.append((name, _ns(start), finalized, open_flags))
    return out


def _number_or_null(value: object, what: str) -> float | None:
    """A finite number, or ``None`` for a JSON null; anything else is an error naming ``what``."""
    out = _finite(value)
    if out is None and value is not None:
        raise TraceSchemaError(f"{what} must be a number or null, got {truncate(value, 40)}")
    return out


def _areal_session(path: Path, no: int, rec: dict[str, Any]
                   ) -> tuple[tuple[int, str | None, int], str, str | None, _Record,
                              list[tuple[str, int, int, int]]]:
    """``((rank, role, task_id), areal status, reason, session, spans)`` of one record."""
    where = _where(path, no)
    missing = [k for k in _AREAL_KEYS if k not in rec]
    if missing:
        raise TraceSchemaError(f"{where}missing {', '.join(repr(k) for k in missing)}: not an "
                               "AReaL SessionRecord (task_id, session_id, status, submit_ts)")
    for key in ("task_id", "session_id"):
        if not _is_int(rec[key]) or rec[key] < 0:
            raise TraceSchemaError(f"{where}{key!r} must be an int >= 0, got "
                                   f"{truncate(rec[key], 40)}")
    status = rec["status"]
    if status not in AREAL_STATUSES:
        raise TraceSchemaError(f"{where}'status' must be one of {', '.join(AREAL_STATUSES)}, "
                               f"got {truncate(status, 40)}")
    submit = _finite(rec["submit_ts"])
    if submit is None:
        raise TraceSchemaError(f"{where}'submit_ts' must be a number (seconds), got "
                               f"{truncate(rec['submit_ts'], 40)}")
    fin = _number_or_null(rec.get("finalized_ts"), f"{where}'finalized_ts'")
    rank, role, reason = rec.get("rank", 0), rec.get("role"), rec.get("reason")
    if not _is_int(rank):
        raise TraceSchemaError(f"{where}'rank' must be an int, got {truncate(rank, 40)}")
    role = role if isinstance(role, str) else None
    reason = reason if isinstance(reason, str) else None
    end = _ns(fin) if fin is not None else None
    attrs: dict[str, Any] = {}
    counters = rec.get("counters") or {}
    if not isinstance(counters, dict):
        raise TraceSchemaError(f"{where}'counters' must be an object, got "
                               f"{truncate(counters, 40)}")
    for name, v in counters.items():
        if _is_num(v):
            attrs[_extra_name(str(name))] = v
    for name, v in rec.items():  # a newer AReaL's scalar fields ride along
        if name not in _AREAL_OWN and not name.endswith("_s") and (
                isinstance(v, str | bool) or _is_num(v)):
            attrs[_extra_name(name)] = v
    ours = "cancelled" if status == "dropped" else status
    session = _session(rec["session_id"], ours, _ns(submit), end, attrs)
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
    files = _files(path)
    groups: dict[tuple[int, str | None, int], list[tuple[str, str | None, _Record,
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
            raise TraceSchemaError(f"{_where(p, None)}empty file (no AReaL session record)")
    tasks: list[_Record] = []
    for key in sorted(groups, key=lambda k: (k[2], k[0], k[1] or "")):
        rank, role, task_id = key
        members = groups[key]
        sessions = [m[2] for m in members]
        spans: list[list[Any]] = [[k, name, start, end, flags] for k, m in enumerate(members)
                                  for name, start, end, flags in m[3]]
        status = _worst(s["status"] for s in sessions)
        reason = next((m[1] for m in members if m[1] is not None), None)
        if reason is None and any(m[0] == "dropped" for m in members):
            reason = "dropped"
        submit = min(s["start"] for s in sessions)
        ends = [s["end"] for s in sessions if s["end"] is not None]
        tasks.append(_task(
            task_id, status=status, reason=reason,
            worker=f"{role}/rank{rank}" if role else f"rank{rank}",
            marks=[submit, None, submit, max(ends) if ends else None, None],
            sessions=sessions, spans=spans,
            attrs=_attrs(**{SOURCE: sources[key], "rank": rank, "role": role})))
    return _build(tasks, wall=True, source=os.fspath(files[0]))


# -- recognising files ---------------------------------------------------------------------
_VLLM_KEYS = frozenset({"backend", "endpoint_type", "model_id", "num_prompts", "completed",
                        "duration", "latencies", "start_times", "ttfts",
                        "request_throughput"})


def _classify(obj: object) -> Kind | None:
    if not isinstance(obj, dict):
        return None
    if obj.get("format") == FORMAT or obj.get("kind") in ("header", "task", "mark", "columns"):
        return "rollout_kit"
    if isinstance(obj.get("metadata"), dict):
        return "aiperf"
    if "task_id" in obj and "session_id" in obj:
        return "areal_sessions"
    if len(_VLLM_KEYS & obj.keys()) >= 2:
        return "vllm_bench"
    return None


def file_kind(path: StrPath) -> Kind | None:
    """What a file holds, from its content: its first JSON line (or, for a JSON document
    spread over lines, the whole document); None when it is none of :data:`KINDS`."""
    with open(path, "rb") as fh:
        if not fh.read(4096).lstrip().startswith(b"{"):  # not JSON (Parquet, text): no line
            return None
        fh.seek(0)
        line = fh.readline(_SNIFF_LIMIT)
        while line and not line.strip():
            line = fh.readline(_SNIFF_LIMIT)
        obj = _json_or_none(line)
        if obj is None:  # a JSON document over several lines (pretty-printed)
            obj = _json_or_none(line + fh.read(_SNIFF_LIMIT))
    return _classify(obj)


def foreign_kind(files: Sequence[StrPath]) -> Kind | None:
    """The kind of another tool's files ``load_traces`` was given, or None for this project's
    traces (and for files of no known kind, which the trace reader reports).

    Raises:
        TraceSchemaError: files of several kinds (one ``load_traces`` call reads one kind:
            load each and put them side by side with ``analysis.compare``).
    """
    kinds = {os.fspath(p): file_kind(p) for p in files}
    found = set(kinds.values())
    if found <= {"rollout_kit", None}:
        return None
    if len(found) == 1:
        return next(iter(found))
    by_kind: dict[str, list[str]] = {}
    for name, kind in kinds.items():
        by_kind.setdefault(KINDS[kind] if kind else "a file of no known kind", []).append(name)
    raise TraceSchemaError(
        "load_traces reads files of one kind at a time, got "
        + "; ".join(f"{what}: {truncate(', '.join(names), 200)}" for what, names in by_kind.items())
        + ". Load each kind on its own and compare them with analysis.compare({name: "
          "traces.tasks, ...})")


def read_files(kind: Kind, files: Sequence[StrPath]) -> Traces:
    """Read ``files`` of another tool's ``kind`` (:func:`foreign_kind`)."""
    if kind == "vllm_bench":
        return read_vllm_bench(files)
    if kind == "aiperf":
        return read_aiperf(files)
    if kind == "areal_sessions":
        return read_areal_sessions_trace(files)
    raise ConfigError(f"not another tool's kind of file: {kind!r}")
