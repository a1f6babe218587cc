"""Asynchronous RL over a controller: the training loop AReaL runs, on one timeline.

::

    from rollout_kit.rl import RLConfig, SimulatedTrain, SimulatedUpdate, run_rl_async

    run = await run_rl_async(ctl, itertools.cycle(prompts), workflow,
                             RLConfig(steps=20, batch_size=16, max_staleness=2),
                             train=SimulatedTrain(per_token_s=2e-4),
                             update=SimulatedUpdate(seconds=0.3), progress=True)
    run.steps  # one row per step: waiting, training, weight sync

- :func:`run_rl_async` (:func:`run_rl` from sync code): rollouts admitted under AReaL's
  staleness formula (:class:`RLConfig`: ``max_staleness`` is AReaL's
  ``max_head_offpolicyness``; 0 is synchronous RL), each step training on a batch of
  accepted results, then ``pause_generation`` → weight update → ``set_version`` →
  ``continue_generation``.
- The trainer step and the weight update are coroutines of yours, or duration models:
  :class:`SimulatedTrain`, :class:`SimulatedUpdate`; :class:`WeightsFromDisk` calls
  ``update_weights_from_disk`` on every server.
- Steps land in the traces (``Traces.steps``, ``Traces.step_samples``);
  :func:`rollout_kit.analysis.rl_steps` and :func:`rollout_kit.plotting.rl_figure` read
  them.
"""

from __future__ import annotations

from ._config import RLConfig, SimulatedTrain, SimulatedUpdate, WeightsFromDisk, token_versions
from ._run import RLRun, TrainFn, UpdateFn, run_rl, run_rl_async

__all__ = [
    "RLConfig",
    "RLRun",
    "SimulatedTrain",
    "SimulatedUpdate",
    "TrainFn",
    "UpdateFn",
    "WeightsFromDisk",
    "run_rl",
    "run_rl_async",
    "token_versions",
]
