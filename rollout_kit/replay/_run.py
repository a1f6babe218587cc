"""``replay_async`` / ``replay``: re-issue recorded calls and compare, without a controller;
``replay_through``: the same through a controller's batch call."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .._errors import ConfigError
from .._loop import run_sync
from ..tracing import load_dump, read_areal_dump
from ..tracing.dumps import call_index
from ._compare import FRAME_COLUMNS, missing_row
from ._workflow import CallKey, ReplayTask, ReplayWorkflow, replay_tasks

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._config import EngineConfig
    from .._io import RolloutResult
    from ..engines import InferenceEngine, RemoteInfEngine

ReplaySource = pd.DataFrame | str | os.PathLike[str]


def read_source(source: ReplaySource) -> pd.DataFrame:
    """A dump frame from a frame, a dump file / directory / glob, or an AReaL dump root.

    Raises:
        ConfigError: nothing to read there; TraceSchemaError: a corrupt or foreign file.
    """
    if isinstance(source, pd.DataFrame):
        return source
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(f"a replay source is a dump frame or path, got {source!r}")
    path = Path(source)
    if path.is_dir() and not any(path.glob("trajectories-*.jsonl")):
        return read_areal_dump(path)
    return load_dump(source)


def replay_frame(rows: Iterable[tuple[CallKey, dict[str, Any]]]) -> pd.DataFrame:
    """The comparison frame (see :mod:`rollout_kit.replay._compare`) from keyed rows."""
    items = list(rows)
    df = pd.DataFrame([r for _, r in items], index=call_index([k for k, _ in items]),
                      columns=list(FRAME_COLUMNS))
    for col in ("first_divergence", "replay_task_id", "tokens_then", "tokens_now", "seed",
                "version_then", "version_now"):
        df[col] = df[col].astype("Int64")
    df["identical"] = df["status"] == "identical"
    return df.sort_index()


def _engines_for(dump: pd.DataFrame, config: EngineConfig | None
                 ) -> dict[str, RemoteInfEngine]:
    """One engine per recorded flavour, over the servers the dump names for it."""
    from ..engines import make_engine

    engines: dict[str, RemoteInfEngine] = {}
    for flavour, servers in dump.groupby("flavour", dropna=False)["server"]:
        addresses = sorted({s for s in servers if isinstance(s, str)})
        if not isinstance(flavour, str) or not addresses:
            raise ConfigError("the dump names no server for some calls (an AReaL dump?): "
                              "pass engine= (or servers= and flavour=)")
        engines[flavour] = make_engine(flavour, addresses, config=config)
    return engines


async def replay_async(source: ReplaySource, *, task_ids: Sequence[int] | None = None,
                       engine: InferenceEngine | None = None,
                       servers: str | Sequence[str] | None = None, flavour: str | None = None,
                       engine_config: EngineConfig | None = None, concurrency: int = 16,
                       check_determinism: bool = True) -> pd.DataFrame:
    """Re-issue recorded calls with their recorded seeds and compare (one row per call).

    Args:
        source: a dump frame (:func:`~rollout_kit.tracing.load_dump`), a dump path, or an
            AReaL dump root (``rollout/{version}/{task_id}.jsonl``).
        task_ids: the recorded tasks to replay (default: all); ids not in the dump get a
            ``not_replayed`` row.
        engine: where to send (kept open); default: the recorded servers of each flavour,
            or ``servers`` of ``flavour`` (engines made here are closed here).
        concurrency: recorded tasks replayed at once.
        check_determinism: replay a diverged call once more (see ``reason``).

    Returns:
        The comparison frame (columns :data:`FRAME_COLUMNS`), indexed by the recorded
        ``(task_id, session_id, call)``.

    Raises:
        ConfigError: a bad argument, or no server to send to.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
    dump = read_source(source)
    tasks, missing = replay_tasks(dump, task_ids)
    owned: dict[str, RemoteInfEngine] = {}
    if engine is None and servers is not None:
        from ..engines import make_engine

        if flavour is None:
            raise ConfigError("servers= needs flavour= (a server flavour name, e.g. 'vllm')")
        engine = owned[flavour] = make_engine(flavour, servers, config=engine_config)
    elif engine is None and tasks:
        owned = _engines_for(dump.loc[[t.task_id for t in tasks]], engine_config)
    workflow = ReplayWorkflow(check_determinism=check_determinism)
    gate = asyncio.Semaphore(concurrency)

    async def one(task: ReplayTask) -> list[tuple[CallKey, dict[str, Any]]]:
        target = engine if engine is not None else owned[str(task.calls[0][1]["flavour"])]
        async with gate:
            return await workflow.arun_episode(target, task)

    try:
        parts = await asyncio.gather(*(one(t) for t in tasks))
    finally:
        for e in owned.values():
            await e.close_async()
    return replay_frame([*missing, *(row for part in parts for row in part)])


def replay(source: ReplaySource, **kwargs: Any) -> pd.DataFrame:
    """Blocking twin of :func:`replay_async` (works inside a notebook's running loop)."""
    return run_sync(replay_async(source, **kwargs), what="replay()")


async def replay_through(rollout_batch: Callable[[list[ReplayTask], ReplayWorkflow],
                                                 Awaitable[list[RolloutResult]]],
                         source: ReplaySource, *, task_ids: Sequence[int] | None = None,
                         check_determinism: bool = True) -> pd.DataFrame:
    """Replay as traced tasks of a controller: one task per recorded task, run by
    ``rollout_batch`` (``RolloutController.rollout_batch_async``); the frame is
    :func:`replay_async`'s with ``replay_task_id`` set. A replay task that fails leaves
    ``failed`` rows for its calls."""
    tasks, rows = replay_tasks(read_source(source), task_ids)
    results = await rollout_batch(tasks, ReplayWorkflow(check_determinism=check_determinism))
    for task, result in zip(tasks, results, strict=True):
        if result.ok:
            for key, row in result.trajectory:
                rows.append((key, {**row, "replay_task_id": result.task_id}))
            continue
        why = f"replay task {result.task_id} {result.status}: {result.reason}"
        for key, call in task.calls:
            row = missing_row(why, call)
            rows.append((key, {**row, "status": "failed", "replay_task_id": result.task_id}))
    return replay_frame(rows)
