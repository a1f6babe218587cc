"""An in-process ``InferenceEngine`` for executor/controller unit tests (no HTTP).

Like httpx's ``MockTransport``: ``agenerate`` computes a response locally. The completion is
``answer_fn(prompt_text)`` (default: echo), tokenized by the simulator's byte tokenizer, after
an optional ``asyncio.sleep(delay)``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pandas as pd

from rollout_kit import ModelRequest, ModelResponse
from rollout_kit.engines import InferenceEngine
from rollout_kit.sim import ByteTokenizer

__all__ = ["LocalEngine"]


class LocalEngine(InferenceEngine):
    def __init__(self, name: str = "local", *, delay: float = 0.0,
                 answer_fn: Callable[[str], str] | None = None) -> None:
        self.name = name
        self.delay = delay
        self.answer_fn = answer_fn or (lambda p: p)
        self.tok = ByteTokenizer()
        self.version = 0
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.gen_paused = False

    async def initialize_async(self) -> None:
        pass

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            prompt = req.text if req.text is not None else self.tok.decode(req.input_ids)
            ids = list(req.input_ids) or self.tok.encode(prompt)
            out = self.tok.encode(self.answer_fn(prompt))[: req.gconfig.max_new_tokens]
            return ModelResponse(input_tokens=ids, output_tokens=out,
                                 output_logprobs=[-0.5] * len(out),
                                 output_versions=[self.version] * len(out),
                                 stop_reason="stop", text=self.tok.decode(out),
                                 latency=self.delay, ttft=math.nan, server=self.name)
        finally:
            self.in_flight -= 1

    async def close_async(self) -> None:
        pass

    def get_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    async def pause_generation_async(self) -> None:
        self.gen_paused = True

    async def continue_generation_async(self) -> None:
        self.gen_paused = False

    async def health_async(self) -> dict[str, bool]:
        return {self.name: True}

    async def server_metrics_async(self) -> pd.DataFrame:
        return pd.DataFrame()
