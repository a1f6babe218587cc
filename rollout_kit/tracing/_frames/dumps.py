"""Trajectory dumps read back: rollout_kit's own (:func:`load_dump`) and AReaL's
(:func:`read_areal_dump`), as one frame shape indexed by ``(task_id, session_id, call)``.
The record format and its writer are :mod:`rollout_kit.tracing.dumps`."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..._errors import ConfigError, TraceSchemaError, truncate
from .._jsonl import jsonl_objects
from ..dumps import DUMP_FORMAT, DUMP_SCHEMA_VERSION, StrPath, call_index
from .files import expand_paths


def _rle_expand(runs: Sequence[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for v, n in runs:
        out.extend([int(v)] * int(n))
    return out


def _nan(x: object) -> float:
    return math.nan if x is None else float(x)  # type: ignore[arg-type]


def _row(rec: dict[str, Any], header: dict[str, Any], source: str) -> dict[str, Any]:
    sampling = rec["sampling"]
    if not isinstance(sampling, dict):
        raise TypeError("sampling is not an object")
    runs = rec.get("versions") or []
    versions = _rle_expand(runs)
    row: dict[str, Any] = {
        "task_id": rec["task_id"], "session_id": rec["session_id"], "call": int(rec["call"]),
        "sample": int(rec["sample"]), "rid": rec["rid"], "status": rec["status"],
        "error": rec.get("error"), "engine": rec["engine"], "flavour": rec["flavour"],
        "model": rec.get("model"), "server": rec.get("server"),
        "start_wall": float(rec["start_wall"]), "latency_s": _nan(rec.get("latency_s")),
        "ttft_s": _nan(rec.get("ttft_s")),
        "seed": sampling.get("seed"), "seed_source": rec.get("seed_source"),
        "temperature": _nan(sampling.get("temperature")),
        "max_new_tokens": sampling.get("max_new_tokens"), "sampling": sampling,
        "prompt_ids": [int(t) for t in rec["prompt_ids"]],
        "prompt_text": rec.get("prompt_text"),
        "prompt_tokens": len(rec["prompt_ids"]),
        "output_ids": [int(t) for t in rec["output_ids"]],
        "logprobs": [_nan(x) for x in rec["logprobs"]],
        "versions": versions, "version_start": versions[0] if versions else None,
        "version_end": versions[-1] if versions else None,
        "output_text": rec.get("output_text"), "completion_tokens": len(rec["output_ids"]),
        "stop_reason": rec.get("stop_reason"), "segments": list(rec.get("segments") or []),
        "n_segments": len(rec.get("segments") or []),
        "run_seed": header.get("run_seed"), "source": source,
    }
    return row


def load_dump(paths: StrPath | Sequence[StrPath]) -> pd.DataFrame:
    """Read trajectory dump files (paths, directories or globs) into one DataFrame.

    Indexed by ``(task_id, session_id, call)`` (``session_id`` NA for a call made outside a
    session); one row per recorded call with the columns of the record (token lists as
    Python lists, ``versions`` expanded to one per output token, ``sampling`` the full
    parameter dict, ``seed`` and ``temperature`` pulled out), plus ``source`` (the file).

    A task's calls are in the file once the task has ended; when no file holds a call yet
    (a run still in progress, or calls outside any task not flushed) the frame is empty and
    a :class:`UserWarning` says so.

    Raises:
        ConfigError: nothing matches ``paths``.
        TraceSchemaError: a file is not a rollout_kit dump, comes from another schema version
            (the message names the file and both versions), or a line other than the last
            is malformed (file and line number).
    """
    rows: list[dict[str, Any]] = []
    files = expand_paths(paths, pattern="trajectories-*.jsonl", what="dump")
    for path in files:
        where = os.fspath(path)
        records = jsonl_objects(path)
        first = next(records, None)
        if first is None or first[1].get("kind") != "header" \
                or first[1].get("format") != DUMP_FORMAT:
            raise TraceSchemaError(f"{where} is not a rollout_kit trajectory dump (no header)")
        header = first[1]
        if header.get("schema") != DUMP_SCHEMA_VERSION:
            raise TraceSchemaError(
                f"{where} has dump schema version {header.get('schema')!r}; this rollout_kit "
                f"reads version {DUMP_SCHEMA_VERSION}")
        for line, rec in records:
            if rec.get("kind") != "generation":
                continue
            try:
                rows.append(_row(rec, header, where))
            except (KeyError, TypeError, ValueError) as exc:
                raise TraceSchemaError(f"{where}: line {line} is not a generation record: "
                                       f"{truncate(repr(exc))}") from None
    if not rows:
        names = ", ".join(os.fspath(p) for p in files[:3]) + (" …" if len(files) > 3 else "")
        warnings.warn(f"no recorded calls in {names} yet: a call is written when its task "
                      "ends; calls made outside a task are written at Tracer.flush() or "
                      "close() (RolloutController.close())", UserWarning, stacklevel=2)
    return _frame(rows)


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    index = call_index([(r.pop("task_id"), r.pop("session_id"), r.pop("call")) for r in rows])
    return pd.DataFrame(rows, index=index).sort_index()


def read_areal_dump(root: StrPath) -> pd.DataFrame:
    """AReaL's trajectory dump (``{root}/{version}/{task_id}.jsonl``, one line per sample
    with ``task_id, sample_idx, seqlen, prompt_len, head_version, tail_version, reward,
    prompt, completion``) as a frame shaped like :func:`load_dump`'s.

    ``root`` is the ``rollout`` directory (or a directory holding one). AReaL records no
    token ids and no seed, so ``prompt_ids`` / ``output_ids`` are empty and ``seed`` is NA:
    a replay of it re-sends the prompt text unseeded, and the replay frame says so.

    Raises:
        ConfigError: no ``{version}/{task_id}.jsonl`` file under ``root``.
        TraceSchemaError: a malformed line or a missing key (file and line number).
    """
    base = Path(root)
    if (base / "rollout").is_dir():
        base = base / "rollout"
    files = sorted(p for p in base.glob("*/*.jsonl") if p.parent.name.lstrip("-").isdigit())
    if not files:
        raise ConfigError(f"no AReaL dump files ({{version}}/{{task_id}}.jsonl) under "
                          f"{os.fspath(root)!r}")
    rows: list[dict[str, Any]] = []
    for path in files:
        for line, rec in jsonl_objects(path):
            try:
                prompt_len, seqlen = int(rec["prompt_len"]), int(rec["seqlen"])
                rows.append({
                    "task_id": int(rec["task_id"]), "session_id": int(rec["sample_idx"]),
                    "call": 0, "sample": int(rec["sample_idx"]), "rid": None, "status": "ok",
                    "error": None, "engine": None, "flavour": None, "model": None,
                    "server": None, "start_wall": math.nan, "latency_s": math.nan,
                    "ttft_s": math.nan, "seed": None, "seed_source": None,
                    "temperature": math.nan, "max_new_tokens": seqlen - prompt_len,
                    "sampling": {"max_new_tokens": max(seqlen - prompt_len, 1)},
                    "prompt_ids": [], "prompt_text": str(rec["prompt"]),
                    "prompt_tokens": prompt_len, "output_ids": [], "logprobs": [],
                    "versions": [], "version_start": int(rec["head_version"]),
                    "version_end": int(rec["tail_version"]),
                    "output_text": str(rec["completion"]),
                    "completion_tokens": seqlen - prompt_len, "stop_reason": None,
                    "segments": [], "n_segments": 0, "run_seed": None,
                    "reward": float(rec["reward"]), "source": os.fspath(path),
                })
            except (KeyError, TypeError, ValueError) as exc:
                raise TraceSchemaError(f"{os.fspath(path)}: line {line} is not an AReaL dump "
                                       f"record: {truncate(repr(exc))}") from None
    return _frame(rows)
