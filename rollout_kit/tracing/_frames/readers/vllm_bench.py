"""Reading ``vllm bench serve --save-result --save-detailed`` result files
(:func:`read_vllm_bench`); the column mapping is in :mod:`rollout_kit.tracing._frames.readers`."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...._errors import TraceSchemaError, truncate
from ... import schema as S
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
    json_or_none,
    ns,
    present_attrs,
    session_record,
    task_record,
    where_at,
)

#: the per-request arrays this reader needs (``--save-detailed`` adds all but latencies)
VLLM_ARRAYS = ("start_times", "latencies", "ttfts", "itls", "input_lens", "output_lens",
               "errors")


def _vllm_results(path: Path) -> list[tuple[int | None, dict[str, Any]]]:
    """``(line or None, result)`` of each result object in a vllm bench serve file."""
    raw = path.read_bytes()
    doc = json_or_none(raw)
    if isinstance(doc, dict):
        return [(None, doc)]
    if doc is not None:
        raise TraceSchemaError(f"{where_at(path, None)}not a vllm bench serve result (a JSON "
                               f"{type(doc).__name__}, not an object)")
    out: list[tuple[int | None, dict[str, Any]]] = []
    for no, line in enumerate(raw.split(b"\n"), 1):  # --append-result: one result a line
        if not line.strip():
            continue
        obj = json_or_none(line)
        if obj is None:
            raise TraceSchemaError(f"{where_at(path, no)}not JSON")
        if not isinstance(obj, dict):
            raise TraceSchemaError(f"{where_at(path, no)}not a JSON object")
        out.append((no, obj))
    if not out:
        raise TraceSchemaError(f"{where_at(path, None)}empty file (no vllm bench serve result)")
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
        ok = isinstance(v, list) and all(is_num(x) for x in v)
    else:
        ok = v is None or (is_num(v) if kind == "number" else is_int(v) if kind == "int"
                           else isinstance(v, str))
    if not ok:
        raise TraceSchemaError(f"{where}{key}[{i}] must be a {kind}, got {truncate(v, 40)}")
    return v


def _vllm_tasks(path: Path, line: int | None, res: dict[str, Any], first_id: int,
                run: int | None) -> list[Record]:
    where = where_at(path, line)
    n = _vllm_arrays(res, where)
    model = res.get("model_id") if isinstance(res.get("model_id"), str) else None
    texts = "generated_texts" in res
    out: list[Record] = []
    for i in range(n):
        get = functools.partial(_vllm_value, res, i, where)
        start_s = finite(get("start_times", "number"))
        if start_s is None:
            raise TraceSchemaError(f"{where}start_times[{i}] must be a finite number")
        err = get("errors", "str")
        ok = not err
        start = ns(start_s)
        queue = finite(get("queue_times", "number")) if "queue_times" in res else None
        latency = finite(get("latencies", "number"))
        ttft = finite(get("ttfts", "number"))
        gaps = get("itls", "list")
        prompt, output = get("input_lens", "int"), get("output_lens", "int")
        end = start + ns(latency) if ok and latency is not None else None
        tpot = None
        if ok and latency is not None and ttft is not None and output is not None and output > 1:
            tpot = (latency - ttft) / (output - 1)
        status = "accepted" if ok else "failed"
        tid = first_id + i
        sattrs = present_attrs(**{S.PROMPT_TOKENS: prompt if ok else None,
                           S.COMPLETION_TOKENS: output if ok else None,
                           S.TTFT_S: ttft if ok else None,
                           S.ITL_S: float(np.mean(gaps)) if ok and gaps else None,
                           TPOT_S: tpot,
                           "generated_text": get("generated_texts", "str") if texts else None})
        out.append(task_record(
            tid, status=status, reason=None if ok else REQUEST_ERROR,
            error=None if ok else str(err),
            marks=[start - ns(queue or 0.0), start, start, end, None],
            sessions=[session_record(tid, status, start, end, sattrs)],
            spans=[[0, "generate", start, end, 0]] if end is not None else [],
            attrs=present_attrs(**{SOURCE: os.fspath(path), "model_id": model, "run": run})))
    return out


def read_vllm_bench(path: StrPath | Sequence[StrPath]) -> Traces:
    """``vllm bench serve --save-result --save-detailed`` result files as :class:`Traces`.

    Args:
        path: a result file (one JSON object, or one a line from ``--append-result``), or
            a list of them; tasks are numbered from 0 in file and request order.

    Returns:
        One task per request (see the package docstring for the columns); ``wall_epoch`` is
        NaN (vllm records ``perf_counter`` times only).

    Raises:
        ConfigError: a file does not exist.
        TraceSchemaError: not a result object, a result lacking the per-request arrays
            (an unknown version, or saved without ``--save-detailed``: the message names
            the file and the keys), arrays of different lengths, a bad value.
    """
    tasks: list[Record] = []
    files = input_files(path)
    for p in files:
        results = _vllm_results(p)
        for run, (line, res) in enumerate(results):
            tasks += _vllm_tasks(p, line, res, len(tasks), run if len(results) > 1 else None)
    return build(tasks, wall=False, source=os.fspath(files[0]))
