"""What the readers of :mod:`rollout_kit.tracing._frames.readers` share: the kinds of file, the
columns they add, the small checks of a record's values and the builders of the task records
that become :class:`~rollout_kit.tracing.Traces`."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeGuard

from ...._errors import ConfigError
from ... import _phases as phases
from ... import schema as S
from ..._store import FORMAT, Store
from ..build import Traces, build_traces

StrPath = str | os.PathLike[str]
Kind = Literal["rollout_kit", "vllm_bench", "aiperf", "guidellm", "areal_sessions"]

#: what each kind of file is, in messages
KINDS: dict[Kind, str] = {
    "rollout_kit": "a rollout_kit trace",
    "vllm_bench": "a vllm bench serve result",
    "aiperf": "an aiperf per-request export",
    "guidellm": "a guidellm result (benchmarks.json)",
    "areal_sessions": "an AReaL session trace",
}

#: the tasks column naming the file a task was read from
SOURCE = "source"
#: sessions column: time per output token after the first, ``(e2e − ttft) / (out − 1)``
TPOT_S = "tpot_s"

REQUEST_ERROR = "request_error"  # the reason of a failed request of another tool
_WORST_FIRST = ("failed", "cancelled", "rejected", "pending", "accepted")
_RESERVED = frozenset({*S.SESSION_COLUMNS, *S.TASK_COLUMNS, S.TASK_ID, S.SESSION_ID, TPOT_S,
                       SOURCE})
Record = dict[str, Any]


# -- small checks --------------------------------------------------------------------------
def is_num(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def finite(v: object) -> float | None:
    """``v`` as a float when it is a finite number, else None."""
    return float(v) if is_num(v) and math.isfinite(v) else None


def is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


def json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)  # the json module: vllm's json.dump writes NaN as is
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None


def where_at(path: Path, line: int | None) -> str:
    return f"{os.fspath(path)}: line {line}: " if line is not None else f"{os.fspath(path)}: "


def input_files(path: StrPath | Sequence[StrPath]) -> list[Path]:
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


def worst(statuses: Iterable[str]) -> str:
    found = set(statuses)
    return next((s for s in _WORST_FIRST if s in found), "pending")


def present_attrs(**values: object) -> dict[str, Any]:
    """The attributes that have a value (a None would turn a typed column into objects)."""
    return {k: v for k, v in values.items() if v is not None}


def extra_name(name: str) -> str:
    """A tool's own column name, prefixed where it would shadow a rollout_kit column."""
    if name in _RESERVED or name.endswith(S.PHASE_SESSION_SUFFIX) or (
            name.endswith("_s") and phases.is_phase(name[:-2])):
        return f"x_{name}"
    return name


def build(tasks: list[Record], *, wall: bool, source: str) -> Traces:
    """The frames of task records whose times are int ns on the files' own clock."""
    starts = [t["marks"][0] for t in tasks if t["marks"][0] is not None]
    anchor = min(starts) if starts else 0
    header = {"kind": "header", "format": FORMAT, "schema": S.SCHEMA_VERSION,
              "wall_epoch": 0.0}
    store = Store()
    store.ingest([header, *tasks], -anchor, 0.0, source=source)  # times - anchor
    return build_traces(store.snapshot(), 0, anchor / 1e9 if wall and starts else math.nan)


def task_record(task_id: int, *, status: str, marks: list[int | None],
                sessions: list[Record], spans: list[list[Any]], attrs: dict[str, Any],
                worker: str | None = None, reason: str | None = None,
                error: str | None = None) -> Record:
    return {"kind": "task", "task_id": task_id, "worker": worker, "status": status,
            "reason": reason, "error": error, "marks": marks, "attrs": attrs,
            "sessions": sessions, "spans": spans}


def session_record(session_id: int, status: str, start: int | None, end: int | None,
                   attrs: dict[str, Any]) -> Record:
    return {"session_id": session_id, "status": status, "start": start, "end": end,
            "attrs": attrs}
