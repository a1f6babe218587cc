"""Remote inference engines: SGLang and vLLM servers over aiohttp.

Usage::

    from rollout_kit.engines import RemoteSGLangEngine

    async with RemoteSGLangEngine("127.0.0.1:30000") as engine:
        resp = await engine.generate_async(ModelRequest(input_ids=[1, 2, 3]))
"""

from __future__ import annotations

from .backend import Backend, ControlRequest, Segment, StreamParser
from .base import InferenceEngine
from .remote import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine
from .routing import ROUTE_KEY_SEPARATOR, Router, route_key
from .sglang import SGLangBackend
from .vllm import VLLMBackend

__all__ = [
    "ROUTE_KEY_SEPARATOR",
    "Backend",
    "ControlRequest",
    "InferenceEngine",
    "RemoteInfEngine",
    "RemoteSGLangEngine",
    "RemotevLLMEngine",
    "Router",
    "SGLangBackend",
    "Segment",
    "StreamParser",
    "VLLMBackend",
    "route_key",
]
