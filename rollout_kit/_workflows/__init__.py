"""Rollout workflows with AReaL's interface ``async arun_episode(engine, data)``.

- :class:`RolloutWorkflow`: the base class (any object with an async ``arun_episode`` works).
- :class:`SingleTurnWorkflow`: RLVR-style, ``n_samples`` traced sessions, sync/async reward.
- :class:`MultiTurnWorkflow`: retries with feedback, traced per turn.

See :mod:`rollout_kit._workflows.base` for writing your own workflow with a custom phase.
"""

from __future__ import annotations

from .base import RolloutWorkflow, WorkflowLike, is_workflow
from .multi_turn import MultiTurnWorkflow
from .reward import RewardMode, RewardRunner, call_reward
from .single_turn import SingleTurnWorkflow, Tokenizer, build_trajectory

__all__ = [
    "MultiTurnWorkflow",
    "RewardMode",
    "RewardRunner",
    "RolloutWorkflow",
    "SingleTurnWorkflow",
    "Tokenizer",
    "WorkflowLike",
    "build_trajectory",
    "call_reward",
    "is_workflow",
]
