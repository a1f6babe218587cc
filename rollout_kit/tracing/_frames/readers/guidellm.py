"""Reading guidellm's result files (``guidellm run --output kind=json``: ``benchmarks.json``,
:func:`read_guidellm`); the column mapping is in :mod:`rollout_kit.tracing._frames.readers`.

The file (guidellm 0.8, ``metadata.version`` 2) is one JSON document: ``metadata``
(``guidellm_version``), ``config`` and ``benchmarks[]``; each benchmark holds its per-request
records in ``requests.successful`` / ``errored`` / ``incomplete``, each with ``info.timings``
(``time.time()`` epoch seconds: ``targeted_start``, ``request_start``,
``first_token_iteration``, ``last_token_iteration``, ``request_end``, ``resolve_end`` …),
``info.status`` / ``error`` / ``conversation_id`` / ``turn_index``, and token counts in
``input_metrics`` / ``output_metrics`` (``total_tokens``).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ...._errors import TraceSchemaError, truncate
from ... import schema as S
from ..._store import FLAG_RAISED
from ..build import Traces
from .common import (
    REQUEST_ERROR,
    SOURCE,
    TPOT_S,
    Record,
    StrPath,
    build,
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

#: guidellm's status groups of ``benchmarks[].requests`` and this project's status of each
GUIDELLM_GROUPS: dict[str, str] = {"successful": "accepted", "errored": "failed",
                                   "incomplete": "cancelled"}
#: sessions column: guidellm's own time per output token, ``(last token − start) / output``
#: (the first token included: not vLLM's TPOT, which is :data:`TPOT_S`)
GUIDELLM_TPOT_S = "time_per_output_token_s"
_TIMINGS = ("targeted_start", "queued", "dequeued", "scheduled_at", "resolve_start",
            "request_start", "first_token_iteration", "first_output_token_iteration",
            "last_token_iteration", "request_end", "resolve_end", "finalized")


class GuidellmSampleWarning(UserWarning):
    """A guidellm benchmark lists a sample of its requests (``--metrics sample_size=N``):
    statistics of the frames are of that sample, not of guidellm's totals."""


def is_guidellm(obj: object) -> bool:
    """Whether a parsed JSON document is a guidellm result (its ``benchmarks`` list beside a
    ``metadata`` that names guidellm, or of ``generative_benchmark`` objects)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("benchmarks"), list):
        return False
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "guidellm_version" in meta:
        return True
    return any(isinstance(b, dict) and b.get("type_") == "generative_benchmark"
               for b in obj["benchmarks"])


class _Request(NamedTuple):
    """One guidellm request record, read."""

    order: float  # when it was due (targeted_start), else sent: the order of sessions
    group: str | int  # its task: conversation_id, else its position
    status: str
    submit: int | None
    start: int | None
    end: int | None
    worker: str | None
    error: str | None
    attrs: dict[str, Any]


def _num(obj: dict[str, Any], key: str, where: str) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if not is_num(v):
        raise TraceSchemaError(f"{where}'{key}' must be a number or null, got {truncate(v, 40)}")
    return finite(v)


def _tokens(rec: dict[str, Any], key: str, where: str) -> int | None:
    m = rec.get(key)
    if m is None:
        return None
    if not isinstance(m, dict):
        raise TraceSchemaError(f"{where}'{key}' must be an object or null, got "
                               f"{truncate(m, 40)}")
    v = m.get("total_tokens")
    if v is not None and not is_int(v):
        raise TraceSchemaError(f"{where}'{key}.total_tokens' must be a whole number or null, "
                               f"got {truncate(v, 40)}")
    return v


def _request(rec: object, group: str, position: int, where: str) -> _Request:
    if not isinstance(rec, dict):
        raise TraceSchemaError(f"{where}a request record must be an object, got "
                               f"{truncate(rec, 40)}")
    info = rec.get("info")
    timings = info.get("timings") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not isinstance(timings, dict):
        raise TraceSchemaError(f"{where}no 'info.timings' object: not a guidellm request "
                               "record, or one of an unknown version")
    t = {k: _num(timings, k, f"{where}info.timings: ") for k in _TIMINGS}
    status = GUIDELLM_GROUPS[group]
    start = t["request_start"] if t["request_start"] is not None else t["resolve_start"]
    end = t["request_end"]
    if end is None and status != "accepted":
        end = t["resolve_end"]  # guidellm's request_end_time of a request that never ended
    if status == "accepted" and (start is None or end is None):
        raise TraceSchemaError(f"{where}a successful request needs 'info.timings."
                               "request_start' and 'request_end' (epoch seconds)")
    prompt = _tokens(rec, "input_metrics", where)
    output = _tokens(rec, "output_metrics", where)
    iters = timings.get("token_iterations")
    if output is None and is_int(iters) and iters:  # guidellm's fallback without usage
        output = iters
    first, last, rs, re_ = (t["first_token_iteration"], t["last_token_iteration"],
                            t["request_start"], t["request_end"])
    ttft = first - rs if first is not None and rs is not None else None
    itl = tpot = own_tpot = None
    if output is not None and output > 1 and first is not None:
        if last is not None:
            itl = (last - first) / (output - 1)
        if re_ is not None:
            tpot = (re_ - first) / (output - 1)
    last_or_end = last if last is not None else end
    if output and rs is not None and last_or_end is not None:
        own_tpot = (last_or_end - rs) / output
    ok = status == "accepted"
    error = info.get("error")
    sattrs = present_attrs(**{
        S.PROMPT_TOKENS: prompt if ok else None, S.COMPLETION_TOKENS: output if ok else None,
        S.TTFT_S: ttft if ok else None, S.ITL_S: itl if ok else None,
        TPOT_S: tpot if ok else None, GUIDELLM_TPOT_S: own_tpot if ok else None,
        "request_id": info.get("request_id") if isinstance(info.get("request_id"), str)
        else None,
        "turn_index": info.get("turn_index") if is_int(info.get("turn_index")) else None,
        "cached_tokens": _cached(rec),
        "token_iterations": iters if is_int(iters) else None})
    conv = info.get("conversation_id")
    proc = info.get("scheduler_process_id")
    order = next((x for x in (t["targeted_start"], start, end) if x is not None), 0.0)
    return _Request(
        order=order, group=conv if isinstance(conv, str) else position, status=status,
        submit=ns(t["targeted_start"]) if t["targeted_start"] is not None else None,
        start=ns(start) if start is not None else None, end=ns(end) if end is not None else None,
        worker=f"process {proc}" if is_int(proc) else None,
        error=None if ok else (str(error) if error is not None else
                               "cancelled before it finished" if status == "cancelled"
                               else "errored"),
        attrs=sattrs)


def _cached(rec: dict[str, Any]) -> int | None:
    m = rec.get("input_metrics")
    v = m.get("cached_tokens") if isinstance(m, dict) else None
    return v if is_int(v) else None


def _task(task_id: int, turns: list[_Request], first_session: int, source: str,
          extra: dict[str, Any]) -> Record:
    sessions = [session_record(first_session + k, r.status, r.start, r.end, r.attrs)
                for k, r in enumerate(turns)]
    spans = [[k, "generate", r.start, r.end, 0 if r.status == "accepted" else FLAG_RAISED]
             for k, r in enumerate(turns) if r.start is not None and r.end is not None]
    starts = [r.start for r in turns if r.start is not None]
    submits = [r.submit for r in turns if r.submit is not None]
    ends = [r.end for r in turns]
    status = worst(r.status for r in turns)
    first = min(starts) if starts else None
    submit = min(submits) if submits else first
    return task_record(
        task_id, status=status, worker=turns[0].worker,
        error=next((r.error for r in turns if r.error is not None), None),
        reason=None if status == "accepted" else "cancelled" if status == "cancelled"
        else REQUEST_ERROR,
        marks=[submit, first if submits else None, first,
               max(e for e in ends if e is not None) if None not in ends else None, None],
        sessions=sessions, spans=spans, attrs={SOURCE: source, **extra})


def _benchmark_extra(bench: dict[str, Any], run: int | None) -> dict[str, Any]:
    config = bench.get("config")
    strategy = config.get("strategy") if isinstance(config, dict) else None
    kind = strategy.get("type_") if isinstance(strategy, dict) else None
    rate = strategy.get("rate") if isinstance(strategy, dict) else None
    return present_attrs(run=run, strategy=kind if isinstance(kind, str) else None,
                         strategy_rate=float(rate) if is_num(rate) else None)


def _benchmark(path: Path, bench: object, index: int, several: bool, first_id: int,
               first_session: int) -> list[Record]:
    where = f"{where_at(path, None)}benchmarks[{index}]: "
    if not isinstance(bench, dict) or not isinstance(bench.get("requests"), dict):
        raise TraceSchemaError(f"{where}no 'requests' object: not a guidellm benchmark, or "
                               "one of an unknown version")
    reqs: dict[str, Any] = bench["requests"]
    read: list[_Request] = []
    for group in GUIDELLM_GROUPS:
        items = reqs.get(group) or []
        if not isinstance(items, list):
            raise TraceSchemaError(f"{where}'requests.{group}' must be a list, got "
                                   f"{truncate(items, 40)}")
        for i, rec in enumerate(items):
            read.append(_request(rec, group, len(read), f"{where}requests.{group}[{i}]: "))
    _check_sample(bench, len(read), where)
    read.sort(key=lambda r: r.order)
    groups: dict[str | int, list[_Request]] = {}
    for r in read:
        groups.setdefault(r.group, []).append(r)
    extra = _benchmark_extra(bench, index if several else None)
    out: list[Record] = []
    n = first_session
    for k, turns in enumerate(groups.values()):
        out.append(_task(first_id + k, turns, n, os.fspath(path), extra))
        n += len(turns)
    return out


def _check_sample(bench: dict[str, Any], listed: int, where: str) -> None:
    metrics = bench.get("metrics")
    totals = metrics.get("request_totals") if isinstance(metrics, dict) else None
    total = totals.get("total") if isinstance(totals, dict) else None
    if is_int(total) and listed < total:
        warnings.warn(f"{where}lists {listed} of its {total} requests (guidellm's "
                      "--metrics sample_size): the frames hold that sample",
                      GuidellmSampleWarning, stacklevel=5)


def _document(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except ValueError:
        raise TraceSchemaError(f"{where_at(path, None)}not JSON (guidellm's YAML and CSV "
                               "outputs are not read: write --output kind=json)") from None
    if not is_guidellm(doc):
        raise TraceSchemaError(f"{where_at(path, None)}not a guidellm result: no "
                               "'benchmarks' list beside a 'metadata.guidellm_version'")
    out: dict[str, Any] = doc
    return out


def read_guidellm(path: StrPath | Sequence[StrPath]) -> Traces:
    """guidellm's JSON result files (``benchmarks.json``) as :class:`Traces`.

    Args:
        path: a result file or a list of them; tasks are numbered from 0 over the files and
            their benchmarks, in order.

    Returns:
        One session per request record (``requests.successful`` → accepted, ``errored``
        → failed, ``incomplete`` → cancelled), one task per conversation
        (``info.conversation_id``: the request itself in a single-turn run), in the order
        the requests were due; times since the earliest of them, ``wall_epoch`` from
        guidellm's epoch seconds. A file with several benchmarks (a sweep) adds ``run``
        (the benchmark's index) to its tasks.

    Raises:
        ConfigError: a file does not exist.
        TraceSchemaError: not JSON, not a guidellm result, a benchmark without
            ``requests``, a record without ``info.timings``, a bad value; the message names
            the file, the benchmark and the record.
    """
    files = input_files(path)
    tasks: list[Record] = []
    n_sessions = 0
    for p in files:
        benches = _document(p)["benchmarks"]
        if not benches:
            raise TraceSchemaError(f"{where_at(p, None)}no benchmark in 'benchmarks'")
        for i, bench in enumerate(benches):
            got = _benchmark(p, bench, i, len(benches) > 1, len(tasks), n_sessions)
            n_sessions += sum(len(t["sessions"]) for t in got)
            tasks += got
    if not tasks:
        raise TraceSchemaError(f"{where_at(files[0], None)}no request record in any benchmark")
    return build(tasks, wall=True, source=os.fspath(files[0]))
