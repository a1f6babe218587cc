"""Helpers for the engine tests: engines over simulated servers on 127.0.0.1."""

from __future__ import annotations

import socket
from typing import Any

from rollout_kit.config import GenerationConfig, Timeouts
from rollout_kit.engines import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine
from rollout_kit.io import ModelRequest
from rollout_kit.sim import ByteTokenizer
from rollout_kit.testing import fast_engine_config

FAST_TIMEOUTS = Timeouts(request=5.0, total=20.0, setup=5.0, health=1.0)
#: what the engine tests send: byte-tokenized prompts, a sim answer of a fixed text
TOK = ByteTokenizer()
FLAVOURS = ["sglang", "vllm"]


def answer(text: str) -> Any:
    return lambda _prompt: text


def req(prompt: str = "What is 2+2?", **g: Any) -> ModelRequest:
    return ModelRequest(input_ids=TOK.encode(prompt), gconfig=GenerationConfig(**g))


def make_engine(flavour: str, addresses: Any, **config: Any) -> RemoteInfEngine:
    """An engine of ``flavour`` with fast retries and timeouts unless overridden."""
    config.setdefault("timeouts", FAST_TIMEOUTS)
    cls = RemoteSGLangEngine if flavour == "sglang" else RemotevLLMEngine
    return cls(addresses, config=fast_engine_config(**config))


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
