"""AReaL's code, run unchanged: its calling style, its trajectories and its agents.

- :class:`AReaLEngine`: AReaL's ``engine.submit / wait / rollout_batch / prepare_batch`` over
  a one-worker :class:`~rollout_kit.RolloutController`, returning what AReaL's return.
- Any engine a workflow is given answers AReaL's ``await engine.agenerate(req)`` (AReaL's
  ``ModelRequest`` too) and ``engine.get_version()``, so AReaL's ``RLVRWorkflow`` and
  ``MultiTurnWorkflow`` run through any controller; their ``perf_tracer`` calls become the
  task's sessions and phases.
- :class:`AReaLAgentWorkflow`: an AReaL agent (``async run(data, **extra_kwargs)``) as a
  workflow over :class:`~rollout_kit.agents.AgentEndpoint`, rewarded as AReaL's
  ``InteractionCache`` rewards.
- :func:`concat_padded_tensors`: AReaL's batch of trajectory tensors, without AReaL.

AReaL's names live here and at the workflow boundary (``agenerate``) only.
"""

from __future__ import annotations

from ._agent import AReaLAgentWorkflow
from ._engine import AReaLEngine
from ._tensors import concat_padded_tensors

__all__ = ["AReaLAgentWorkflow", "AReaLEngine", "concat_padded_tensors"]
