"""Recording calls: what a caller learns of each ``generate_async`` call, and what a dump keeps.

* :class:`RecordingEngine` is an engine's view that files every ``generate_async`` call in a
  :class:`CallLog` of the caller's (when it was sent, the response) while every other attribute
  is the engine's own: the load runner's per-task record and a conversation's per-turn record
  (:mod:`rollout_kit.load`) are filed this way.
* :class:`CallRecording` is what one call writes into a trajectory dump: while a dump records
  the current task (:func:`rollout_kit.tracing.dump_call`), every call is sent with a seed (the
  user's, else one derived from the call's coordinate), its server responses are kept as
  segments, and one record is written when the call ends, failed ones included, so
  :mod:`rollout_kit.replay` can send it again. The engine fills it from inside its call (the
  seed, the segments), which no view from outside sees.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Protocol

from .._config import GenerationConfig
from .._io import ModelRequest, ModelResponse
from ..tracing.dumps import Coordinate, SeedSource, SegmentRecord, TrajectoryDump
from ._output import Output

if TYPE_CHECKING:
    from ._base import InferenceEngine


class CallEntry(Protocol):
    """Where one call's answer is filed."""

    def add(self, t0: float, resp: ModelResponse) -> None:
        """File the response of the call sent at ``t0`` (``perf_counter`` seconds)."""
        ...


class CallLog(Protocol):
    """What a :class:`RecordingEngine` files its calls in."""

    def begin_call(self, t0: float) -> CallEntry:
        """A call is sent at ``t0`` (``perf_counter`` seconds): note it, and say where its
        answer goes."""
        ...


class RecordingEngine:
    """``engine`` as its caller sees it, with every ``generate_async`` call filed in ``log``;
    every other attribute is the engine's.

    Args:
        engine: the engine that answers.
        log: the caller's record (a ``CallLog``): ``log.begin_call(t0)`` is told when a call
            is sent (``perf_counter`` seconds) and returns where its answer goes, an object
            whose ``add(t0, response)`` is given the response (a call that raises gives none).
    """

    __slots__ = ("_engine", "_log")

    def __init__(self, engine: InferenceEngine, log: CallLog) -> None:
        self._engine = engine
        self._log = log

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        """The engine's ``generate_async``, filed."""
        t0 = time.perf_counter()
        entry = self._log.begin_call(t0)
        resp = await self._engine.generate_async(req)
        entry.add(t0, resp)
        return resp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class CallRecording:
    """The replay record of one call, from its start to :meth:`write`.

    ``gconfig`` is the call's generation config with its seed set: send that one.
    """

    __slots__ = ("_dump", "_where", "gconfig", "seed_source", "segments")

    def __init__(self, dumping: tuple[TrajectoryDump, Coordinate],
                 gconfig: GenerationConfig) -> None:
        self._dump, self._where = dumping
        self.seed_source: SeedSource = "user" if gconfig.seed is not None else "derived"
        self.gconfig = (gconfig if gconfig.seed is not None
                        else gconfig.with_seed(self._dump.seed_for(self._where)))
        self.segments: list[SegmentRecord] = []

    def write(self, *, engine: str, flavour: str, model: str | None, req: ModelRequest,
              prompt: list[int], out: Output, stop: str | None, server: str | None, t0: int,
              latency: float, error: str | None = None) -> None:
        """Write the call's record (``t0``: its ``perf_counter_ns`` start)."""
        ttft = (out.first_token_ns - t0) / 1e9 if out.first_token_ns is not None else math.nan
        self._dump.record(
            self._where, rid=req.rid, engine=engine, flavour=flavour, model=model,
            gconfig=self.gconfig, seed_source=self.seed_source, prompt_ids=prompt,
            prompt_text=req.text, output_ids=out.tokens, logprobs=out.logprobs,
            versions=out.versions, output_text=out.text if out.has_text else None,
            stop_reason=stop, server=server,
            start_wall=time.time() - (time.perf_counter_ns() - t0) / 1e9, latency_s=latency,
            ttft_s=ttft, segments=self.segments, error=error)
