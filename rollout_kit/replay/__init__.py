"""Exact replay of recorded rollouts: re-issue a dump's calls with their seeds, compare.

Record with a trajectory dump (``Tracer(dump="runs/a")`` or
``RolloutController(..., dump="runs/a")``: every engine call is sent with a seed and written
with its replay coordinate, see :mod:`rollout_kit.tracing.dumps`), then::

    from rollout_kit.replay import replay
    df = replay("runs/a", task_ids=[3, 17])          # to the recorded servers
    df = replay("runs/a", servers=["127.0.0.1:8001"], flavour="vllm")  # or other ones
    df[["status", "first_divergence", "logprob_max_abs_delta", "reason"]]

or ``await controller.replay_async("runs/a", task_ids=[3, 17])`` to run the replay as traced
tasks of a controller. The frame (:mod:`.compare`) says per call whether the output is
token-identical, where it first diverges, the logprob deltas, latency then and now, and why
a call could not be reproduced. Modules: :mod:`.calls` (rebuilding and re-sending one call),
:mod:`.compare` (one frame row), :mod:`.workflow` (a task's calls as a workflow), :mod:`.run`
(the functions).
"""

from __future__ import annotations

from .compare import FRAME_COLUMNS, first_divergence
from .run import ReplaySource, read_source, replay, replay_async, replay_frame
from .workflow import ReplayTask, ReplayWorkflow, replay_tasks

__all__ = [
    "FRAME_COLUMNS",
    "ReplaySource",
    "ReplayTask",
    "ReplayWorkflow",
    "first_divergence",
    "read_source",
    "replay",
    "replay_async",
    "replay_frame",
    "replay_tasks",
]
