"""Open-loop load from a notebook: arrivals, runs, metrics and sweeps over the controller.

Every request is a task of a :class:`~rollout_kit.controller.RolloutController` (one id
counter, traced), paced on absolute deadlines, measured from the stream
(``EngineConfig(stream=True)``) with ``vllm bench serve``'s metric definitions::

    from rollout_kit.load import Arrivals, LoadSpec, run_load_async, synthetic
    reqs = synthetic(200, input_len=64, output_len=32)
    run = await run_load_async(ctl, reqs, LoadSpec(arrivals=Arrivals(rate=20.0)))
    run.metrics(goodput="ttft:200 tpot:50")
    df = await sweep_async(ctl, reqs, rates=[5, 10, 20, 40], spec_template=LoadSpec(...))

A recorded run replays as load (:func:`from_traces`; AReaL's session trace:
:func:`read_areal_sessions`): each task at its recorded arrival offset (times
``time_scale``), with as many samples as it had sessions, each asking for its recorded
completion length, on the same prompts (``dump=``, the trajectory dump) or seeded prompts of
the same lengths — yesterday's rollout against today's server settings::

    reqs = from_traces(ctl.tracer.frames(), prompts="lengths", time_scale=0.5)
    run = await run_load_async(ctl2, reqs, LoadSpec(arrivals=Arrivals.schedule(
        r.timestamp for r in reqs)))

Modules: :mod:`.arrivals` (when requests are due), :mod:`.datasets` (what they are),
:mod:`.spec` (what load to offer), :mod:`.runner` (sending and recording), :mod:`.results`
(a run's per-request frame, rates and window), :mod:`.metrics` (definitions), :mod:`.sweep`
(levels until saturation), :mod:`.workflow` (the per-task workflow and its timing),
:mod:`.alarm` (the sender's wake-ups, finer than the loop's millisecond timer).
"""

from __future__ import annotations

from .arrivals import Arrivals
from .datasets import (
    DATASET_NAMES,
    LoadRequest,
    SkippedTasksWarning,
    from_traces,
    load_dataset,
    read_areal_sessions,
    read_jsonl,
    read_mooncake,
    read_sharegpt,
    shared_prefix,
    synthetic,
)
from .metrics import (
    accepted_samples_per_s,
    compute_metrics,
    parse_goodput,
    time_to_batch,
)
from .results import LoadRun
from .runner import run_load, run_load_async
from .spec import LoadSpec
from .sweep import Saturation, sweep, sweep_async
from .workflow import GenerateRequest, Measured

__all__ = [
    "accepted_samples_per_s",
    "Arrivals",
    "compute_metrics",
    "DATASET_NAMES",
    "from_traces",
    "GenerateRequest",
    "load_dataset",
    "LoadRequest",
    "LoadRun",
    "LoadSpec",
    "Measured",
    "parse_goodput",
    "read_areal_sessions",
    "read_jsonl",
    "read_mooncake",
    "read_sharegpt",
    "run_load",
    "run_load_async",
    "Saturation",
    "shared_prefix",
    "SkippedTasksWarning",
    "sweep",
    "sweep_async",
    "synthetic",
    "time_to_batch",
]
