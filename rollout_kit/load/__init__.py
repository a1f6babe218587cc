"""Open-loop load from a notebook: arrivals, runs, metrics and sweeps over the controller.

Every request is a task of a :class:`~rollout_kit.RolloutController` (one id
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

Conversations are load too (:func:`run_conversations_async`): each arrives on the schedule and sends
its turns over the chat API a think time apart, one task per conversation, one session per
turn; the run's turns frame has TTFT and cached prompt tokens per turn::

    convs = synthetic_conversations(100, turns=4, input_len=128, output_len=64,
                                    think_time="exponential:1")
    crun = await run_conversations_async(ctl, convs, LoadSpec(arrivals=Arrivals(rate=5.0)))
    crun.by_turn()

"""

from __future__ import annotations

from ._arrivals import Arrivals
from ._conversations import ConversationWorkflow, run_conversations, run_conversations_async
from ._datasets.by_name import DATASET_NAMES, dataset_takes_path, load_dataset
from ._datasets.conversation import Conversation, ConversationTurn, ThinkTime, with_think_time
from ._datasets.multiturn import (
    read_agent_trace,
    read_multiturn_json,
    read_sharegpt_conversations,
    synthetic_conversations,
)
from ._datasets.recorded import SkippedTasksWarning, from_traces, read_areal_sessions
from ._datasets.request import LoadRequest
from ._datasets.synthetic import shared_prefix, synthetic
from ._datasets.text import read_jsonl, read_sharegpt
from ._datasets.traces import read_mooncake
from ._metrics import (
    accepted_samples_per_s,
    compute_metrics,
    parse_goodput,
    time_to_batch,
)
from ._results import LoadRun
from ._runner import run_load, run_load_async
from ._spec import LoadSpec
from ._sweep import Saturation, sweep, sweep_async
from ._turns import ConversationRun, turn_table
from ._workflow import GenerateRequest, Measured

__all__ = [
    "accepted_samples_per_s",
    "Arrivals",
    "compute_metrics",
    "Conversation",
    "ConversationRun",
    "ConversationTurn",
    "ConversationWorkflow",
    "DATASET_NAMES",
    "dataset_takes_path",
    "from_traces",
    "GenerateRequest",
    "load_dataset",
    "LoadRequest",
    "LoadRun",
    "LoadSpec",
    "Measured",
    "parse_goodput",
    "read_agent_trace",
    "read_areal_sessions",
    "read_jsonl",
    "read_mooncake",
    "read_multiturn_json",
    "read_sharegpt",
    "read_sharegpt_conversations",
    "run_conversations",
    "run_conversations_async",
    "run_load",
    "run_load_async",
    "Saturation",
    "shared_prefix",
    "SkippedTasksWarning",
    "sweep",
    "sweep_async",
    "synthetic",
    "synthetic_conversations",
    "ThinkTime",
    "time_to_batch",
    "turn_table",
    "with_think_time",
]
