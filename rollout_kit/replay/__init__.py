"""Exact replay of recorded rollouts: re-issue a dump's calls with their seeds, compare.

Record with a trajectory dump (``Tracer(dump="runs/a")`` or
``RolloutController(..., dump="runs/a")``: every engine call is sent with a seed and written
with its replay coordinate, read back by :func:`~rollout_kit.tracing.load_dump`), then::

    from rollout_kit.replay import replay
    df = replay("runs/a", task_ids=[3, 17])          # to the recorded servers
    df = replay("runs/a", servers=["127.0.0.1:8001"], flavour="vllm")  # or other ones
    df[["status", "first_divergence", "logprob_max_abs_delta", "reason"]]

or ``await controller.replay_async("runs/a", task_ids=[3, 17])`` to run the replay as traced
tasks of a controller. The frame says per call whether the output is
token-identical, where it first diverges, the logprob deltas, latency then and now, and why
a call could not be reproduced.
"""

from __future__ import annotations

from ._compare import FRAME_COLUMNS, first_divergence
from ._run import ReplaySource, replay, replay_async, replay_through

__all__ = [
    "FRAME_COLUMNS",
    "ReplaySource",
    "first_divergence",
    "replay",
    "replay_async",
    "replay_through",
]
