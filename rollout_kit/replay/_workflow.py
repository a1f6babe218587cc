"""Replay as a workflow: one task per recorded task, its calls re-sent session by session.

:class:`ReplayWorkflow` runs under a controller (``RolloutController.replay_async``) or
directly (:func:`~rollout_kit.replay.replay_async`): the recorded sessions of a task run
concurrently, each in its own traced session, and the calls of one session in their recorded
order (a multi-turn session's later turns were sent after the earlier ones came back).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from .._errors import ConfigError
from .._workflows import RolloutWorkflow
from ..tracing import trace_phase, trace_session
from ._calls import replay_call
from ._compare import compare_call, matches_recording, missing_row

if TYPE_CHECKING:
    from ..engines import InferenceEngine

#: ``(task_id, session_id, call)`` of a recorded call
CallKey = tuple[int, Any, Any]


@dataclass(frozen=True, slots=True)
class ReplayTask:
    """The recorded calls of one task, keyed by ``(task_id, session_id, call)``."""

    task_id: int
    calls: tuple[tuple[CallKey, Mapping[str, Any]], ...]


class ReplayWorkflow(RolloutWorkflow):
    """Re-sends a :class:`ReplayTask`'s calls; the trajectory is its comparison rows.

    Args:
        check_determinism: replay a diverged call once more, to tell a server that ignores
            seeds from one that reproduces itself but not the recording.
    """

    def __init__(self, *, check_determinism: bool = True) -> None:
        self.check_determinism = check_determinism

    def validate(self, data: Any) -> None:
        if not isinstance(data, ReplayTask):
            raise ConfigError(f"ReplayWorkflow takes a ReplayTask, got {type(data).__name__}")

    async def _call(self, engine: InferenceEngine, key: CallKey, call: Mapping[str, Any]
                    ) -> tuple[CallKey, dict[str, Any]]:
        try:
            with trace_phase("generate"):
                now = await replay_call(engine, call)
        except ConfigError as exc:  # nothing could be sent
            return key, missing_row(str(exc), call)
        again = None
        if self.check_determinism and now.error is None and not matches_recording(call, now):
            again = await replay_call(engine, call)  # tells "ignores seeds" from "differs"
        return key, compare_call(call, now, again, engine.get_version())

    async def _session(self, engine: InferenceEngine,
                       calls: list[tuple[CallKey, Mapping[str, Any]]]
                       ) -> list[tuple[CallKey, dict[str, Any]]]:
        with trace_session():
            return [await self._call(engine, key, call) for key, call in calls]

    async def arun_episode(self, engine: InferenceEngine, data: Any
                           ) -> list[tuple[CallKey, dict[str, Any]]]:
        self.validate(data)
        sessions: dict[Any, list[tuple[CallKey, Mapping[str, Any]]]] = {}
        for key, call in data.calls:
            sessions.setdefault(key[1], []).append((key, call))
        parts = await asyncio.gather(*(self._session(engine, c) for c in sessions.values()))
        return [row for part in parts for row in part]


def _not_in_dump(task_id: object) -> str:
    return (f"task {task_id} is not in the dump (a task's calls are written when it ends: "
            "a task still running is not there yet)")


def replay_tasks(dump: pd.DataFrame, task_ids: Any = None
                 ) -> tuple[list[ReplayTask], list[tuple[CallKey, dict[str, Any]]]]:
    """The tasks to replay from a dump frame, and a ``not_replayed`` row per asked task id
    that the dump does not hold."""
    if dump.empty:
        return [], [((int(t), pd.NA, pd.NA), missing_row(_not_in_dump(t)))
                    for t in (task_ids or ())]
    by_task: dict[int, list[tuple[CallKey, Mapping[str, Any]]]] = {}
    for key, call in zip(dump.index, dump.to_dict("records"), strict=True):
        by_task.setdefault(int(key[0]), []).append(
            ((int(key[0]), key[1], key[2]), {str(k): v for k, v in call.items()}))
    wanted = list(by_task) if task_ids is None else [int(t) for t in task_ids]
    missing = [((t, pd.NA, pd.NA), missing_row(_not_in_dump(t)))
               for t in wanted if t not in by_task]
    tasks = [ReplayTask(t, tuple(by_task[t])) for t in wanted if t in by_task]
    return tasks, missing
