"""``CallRecording``: what one ``generate_async`` call writes into a trajectory dump.

While a dump records the current task (:func:`rollout_kit.tracing.dump_call`), every call is
sent with a seed (the user's, else one derived from the call's coordinate), its server
responses are kept as segments, and one record is written when the call ends, failed ones
included, so :mod:`rollout_kit.replay` can send it again.
"""

from __future__ import annotations

import math
import time

from .._config import GenerationConfig
from .._io import ModelRequest
from ..tracing.dumps import Coordinate, SeedSource, SegmentRecord, TrajectoryDump
from ._output import Output


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
