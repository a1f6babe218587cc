"""Simulated SGLang and vLLM inference servers (aiohttp.web) for tests, demos and benchmarks.

::

    async with serve("vllm", 2, zero_latency=True) as cluster:
        cluster.urls  # ["http://127.0.0.1:PORT", ...]

Each server speaks one wire protocol (SGLang native ``/generate`` or vLLM's OpenAI-compatible
``/v1/completions``), models a GPU server's slots, queue and load-dependent latency, reports
its own timings (``sim_timing``), and can inject faults. See ``SimConfig`` for the versions
imitated.

What the model says (``answers``, ``generation``): arithmetic prompts (``"What is 17+25?"``)
get ``"The answer is 42."``, right with probability ``SimConfig.accuracy`` (0.7), so an
exact-match reward has a mean and a per-group variance; samples differ at temperature > 0,
repeat with the same ``seed``, and temperature 0 is one fixed draw per prompt. Other prompts
get seeded filler text. ``answer_fn`` replaces the model.
"""

from __future__ import annotations

from ._config import ApiName, SimConfig
from ._faults import FAULT_KINDS, Fault, FaultKind, FaultPlan
from ._server import SimCluster, SimServer, serve, serve_in_thread
from ._tokenizer import ByteTokenizer, FileTokenizer

__all__ = [
    "FAULT_KINDS",
    "ApiName",
    "ByteTokenizer",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FileTokenizer",
    "SimCluster",
    "SimConfig",
    "SimServer",
    "serve",
    "serve_in_thread",
]
