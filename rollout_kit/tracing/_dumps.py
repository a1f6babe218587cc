"""Trajectory dumps: everything needed to re-issue each generate call, one JSONL line per call.

A :class:`TrajectoryDump` is given to a :class:`~rollout_kit.tracing.Tracer` (``dump=``);
while it is attached, every ``generate_async`` call of a remote engine inside a traced task
writes one ``generation`` record — its *replay coordinate*:

* where it ran: ``task_id``, ``session_id`` (the trace's), ``sample`` (the session's index
  within its task), ``call`` (the call's index within its session), ``rid``, the engine, its
  flavour (``sglang`` / ``vllm``), model and server;
* what was asked: the prompt's token ids (and its text unless ``text=False``), every
  sampling parameter of :class:`~rollout_kit.GenerationConfig`, including the
  **seed** — when the caller gave none, one derived from the dump's run seed, the task id,
  the sample and the call (:func:`derive_seed`) is sent and recorded (``seed_source``);
* what came back: output token ids, logprobs, the weight version of each output token
  (run-length encoded ``[[version, count], ...]``), the stop reason, latency / TTFT and each
  server response (``segments``: the output tokens before it, the budget it was sent with,
  its token count, stop reason, server and version) — so a generation continued after an
  abort is replayed request by request;
* a call that failed is recorded too (``status="failed"`` and the error).

Why one JSONL file per process (``trajectories-<worker>-<pid>.jsonl``) and not Parquet or a
file per weight version: lines are appended in batches with one ``write`` and survive a killed
process up to the last flush (a torn last line is skipped on load, as with traces); a
Parquet file is unreadable until its footer is written; and one file per version or per task
(AReaL's ``rollout/{version}/{task_id}.jsonl``, read by :func:`read_areal_dump`) means
thousands of small files for a long run, while the version is a column here.

:func:`load_dump` reads one or many files back into a DataFrame indexed by
``(task_id, session_id, call)``, which joins the traces' sessions frame on its first two
levels. ``text=False`` keeps prompt and output text out of the file (sensitive prompts): a
call sent as text whose server returned no prompt ids cannot then be replayed, and the replay
frame says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import operator
import os
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import pandas as pd

from .._config import GenerationConfig
from .._errors import ConfigError, TraceSchemaError, truncate
from ._jsonl import jsonl_objects
from ._persist import expand_paths

DUMP_FORMAT = "rollout_kit.trajectories"
DUMP_SCHEMA_VERSION = 1

#: the sampling parameters recorded per call (every ``GenerationConfig`` field)
GENERATION_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GenerationConfig))
_sampling_values = operator.attrgetter(*GENERATION_FIELDS)

_SEED_MASK = (1 << 31) - 1  # SGLang and vLLM both take a seed that fits a signed int32

StrPath = str | os.PathLike[str]
SeedSource = Literal["user", "derived"]


def derive_seed(run_seed: int, task_id: int | None, sample: int, call: int) -> int:
    """The seed sent for a call whose caller gave none: stable across processes and runs.

    ``blake2b`` of the four numbers, cut to 31 bits (both servers take an int32 seed).
    """
    key = f"{run_seed}:{-1 if task_id is None else task_id}:{sample}:{call}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & _SEED_MASK


def versions_rle(versions: Sequence[int]) -> list[list[int]]:
    """Run-length encode per-token weight versions: ``[3, 3, 4]`` → ``[[3, 2], [4, 1]]``."""
    if not versions:
        return []
    first = versions[0]
    if versions.count(first) == len(versions):  # the common case, at C speed
        return [[first, len(versions)]]
    out: list[list[int]] = []
    for v in versions:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def _rle_expand(runs: Sequence[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for v, n in runs:
        out.extend([int(v)] * int(n))
    return out


@dataclass(frozen=True, slots=True)
class Coordinate:
    """Where a call ran in the trace: task, session, the session's index, the call's index."""

    task_id: int | None
    session_id: int | None
    sample: int
    call: int


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """One server response of a call (a call continued after aborts has several)."""

    prefix: int  # output tokens already generated when it was sent
    max_new_tokens: int  # the budget it was sent with
    n_tokens: int
    stop_reason: str | None
    server: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "max_new_tokens": self.max_new_tokens,
                "n_tokens": self.n_tokens, "stop_reason": self.stop_reason,
                "server": self.server, "version": self.version}


def gconfig_of(sampling: dict[str, Any]) -> GenerationConfig:
    """Rebuild the recorded sampling parameters (unknown keys of a newer writer ignored)."""
    known = {k: v for k, v in sampling.items() if k in GENERATION_FIELDS}
    for k in ("stop", "stop_token_ids"):
        if k in known and known[k] is not None:
            known[k] = tuple(known[k])
    return GenerationConfig(**known)


class TrajectoryDump:
    """Writes one ``generation`` record per engine call into ``directory`` (opt-in).

    Args:
        directory: where the dump file goes (created if missing).
        seed: the run seed that per-call seeds are derived from when a call has none.
        text: record prompt and output text too; ``False`` keeps only token ids.
        flush_threshold: write once this many records are pending (and on
            :meth:`flush`, which the tracer calls when a task ends and on its ``flush()`` /
            ``close()``: a task's calls can be read back as soon as it ends).
        worker: a name for the file (default: ``main``).

    Attributes:
        path: the file written (``trajectories-<worker>-<pid>.jsonl``, numbered
            ``…-<pid>-<n>.jsonl`` when this process already wrote one there).

    Raises:
        ConfigError: a bad argument, or the directory cannot be written.
    """

    def __init__(self, directory: StrPath, *, seed: int = 0, text: bool = True,
                 flush_threshold: int = 256, worker: str | None = None) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be an int >= 0, got {seed!r}")
        if isinstance(flush_threshold, bool) or not isinstance(flush_threshold, int) \
                or flush_threshold < 1:
            raise ConfigError(f"flush_threshold must be an int >= 1, got {flush_threshold!r}")
        if not isinstance(directory, str | os.PathLike):
            raise ConfigError(f"directory must be a path, got {directory!r}")
        self.directory = Path(directory)
        self.seed = seed
        self.text = bool(text)
        self.flush_threshold = flush_threshold
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        header = {"kind": "header", "format": DUMP_FORMAT, "schema": DUMP_SCHEMA_VERSION,
                  "run_seed": seed, "text": self.text, "worker": worker, "pid": os.getpid(),
                  "wall_epoch": time.time()}
        self.path = self._create(worker or "main", orjson.dumps(header) + b"\n")

    def _create(self, name: str, header: bytes) -> Path:
        """A new file of its own (another dump of this process in the same folder — a
        re-run notebook cell — gets the next number, never overwrites)."""
        stem = f"trajectories-{name}-{os.getpid()}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for n in itertools.count():
                path = self.directory / (f"{stem}.jsonl" if n == 0 else f"{stem}-{n}.jsonl")
                try:
                    with open(path, "xb") as fh:
                        fh.write(header)
                    return path
                except FileExistsError:
                    continue
        except OSError as exc:
            raise ConfigError(f"cannot write a trajectory dump in {os.fspath(self.directory)!r}:"
                              f" {exc.strerror or exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def __repr__(self) -> str:
        return (f"TrajectoryDump(path={os.fspath(self.path)!r}, seed={self.seed}, "
                f"text={self.text})")

    def seed_for(self, where: Coordinate) -> int:
        """The seed to send for a call at ``where`` that has none (:func:`derive_seed`)."""
        return derive_seed(self.seed, where.task_id, where.sample, where.call)

    def record(self, where: Coordinate, *, rid: str, engine: str, flavour: str,
               model: str | None, gconfig: GenerationConfig, seed_source: SeedSource | None,
               prompt_ids: list[int], prompt_text: str | None, output_ids: list[int],
               logprobs: list[float], versions: list[int], output_text: str | None,
               stop_reason: str | None, server: str | None, start_wall: float,
               latency_s: float, ttft_s: float, segments: Sequence[SegmentRecord],
               error: str | None = None) -> None:
        """Queue one call's record; written at the flush threshold."""
        rec = {
            "kind": "generation", "task_id": where.task_id, "session_id": where.session_id,
            "sample": where.sample, "call": where.call, "rid": rid, "engine": engine,
            "flavour": flavour, "model": model, "server": server,
            "status": "failed" if error is not None else "ok", "error": error,
            "start_wall": start_wall, "latency_s": latency_s, "ttft_s": ttft_s,
            "sampling": dict(zip(GENERATION_FIELDS, _sampling_values(gconfig), strict=True)),
            "seed_source": seed_source,
            "prompt_ids": prompt_ids,  # serialized below, before the caller can change them
            "prompt_text": prompt_text if self.text else None,
            "output_ids": output_ids, "logprobs": logprobs,
            "versions": versions_rle(versions),
            "output_text": output_text if self.text else None,
            "stop_reason": stop_reason, "segments": [s.to_json() for s in segments],
        }
        line = orjson.dumps(rec) + b"\n"
        with self._lock:
            self._pending.append(line)
            full = len(self._pending) >= self.flush_threshold
        if full:
            self.flush()

    def flush(self) -> None:
        """Append every pending record to the file in one write."""
        with self._io_lock:
            with self._lock:
                data, self._pending = b"".join(self._pending), []
            if data:
                with open(self.path, "ab") as fh:
                    fh.write(data)

    @property
    def pending(self) -> int:
        """Records not yet written."""
        with self._lock:
            return len(self._pending)


# -- reading ---------------------------------------------------------------------------------

#: the index levels of a dump frame (and of a replay frame)
CALL_INDEX = ["task_id", "session_id", "call"]


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


def call_index(keys: Sequence[tuple[Any, Any, Any]]) -> pd.MultiIndex:
    """The ``(task_id, session_id, call)`` index of dump and replay frames (``Int64``
    levels: ``session_id`` and ``call`` are NA where unknown)."""
    cols = list(zip(*keys, strict=True)) if keys else [(), (), ()]
    return pd.MultiIndex.from_arrays([pd.array(list(c), dtype="Int64") for c in cols],
                                     names=CALL_INDEX)


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
