"""Agents: multi-turn, tool-calling conversations over the chat API, traced per turn.

- :class:`AgentClient`: ``client.chat.completions.create(...)`` as with
  ``openai.AsyncOpenAI``, bound to a task: each call a traced session (sticky-routed per
  conversation), each tool a ``tool.<name>`` phase, token ids kept per turn and checked for
  retokenization drift (``token_mode="exact"`` cannot drift).
- :class:`AgentWorkflow`: an agent function as a workflow, ``n_samples`` conversations per
  task, rewarded and discounted back over turns.
- :class:`AgentEndpoint`: the same client behind an OpenAI-compatible endpoint on 127.0.0.1,
  for agents in another process or SDKs that only take a ``base_url`` (a per-task key binds
  each call to its task).

The per-turn views (turns frame, drift table, group tail) are in :mod:`rollout_kit.analysis`
(:func:`~rollout_kit.analysis.turns`, :func:`~rollout_kit.analysis.drift_table`,
:func:`~rollout_kit.analysis.group_tail`).
"""

from __future__ import annotations

from ._client import AgentClient, Render, TokenMode, ToolErrors, Turn, first_divergence
from ._endpoint import AgentEndpoint
from ._workflow import Agent, AgentWorkflow

__all__ = [
    "Agent",
    "AgentClient",
    "AgentEndpoint",
    "AgentWorkflow",
    "Render",
    "TokenMode",
    "ToolErrors",
    "Turn",
    "first_divergence",
]
