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

:func:`~rollout_kit.tracing.load_dump` (on the read side, ``_frames``) reads one or many
files back into a DataFrame indexed by ``(task_id, session_id, call)``, which joins the
traces' sessions frame on its first two
levels. ``text=False`` keeps prompt and output text out of the file (sensitive prompts): a
call sent as text whose server returned no prompt ids cannot then be replayed, and the replay
frame says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import operator
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import pandas as pd

from .._config import GenerationConfig
from .._errors import ConfigError

__all__ = ["CALL_INDEX", "DUMP_FORMAT", "DUMP_SCHEMA_VERSION", "GENERATION_FIELDS", "Coordinate",
           "SeedSource", "SegmentRecord", "TrajectoryDump", "call_index", "derive_seed",
           "gconfig_of", "versions_rle"]

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


def call_index(keys: Sequence[tuple[Any, Any, Any]]) -> pd.MultiIndex:
    """The ``(task_id, session_id, call)`` index of dump and replay frames (``Int64``
    levels: ``session_id`` and ``call`` are NA where unknown)."""
    cols = list(zip(*keys, strict=True)) if keys else [(), (), ()]
    return pd.MultiIndex.from_arrays([pd.array(list(c), dtype="Int64") for c in cols],
                                     names=CALL_INDEX)
