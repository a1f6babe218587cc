"""Remote inference engines: SGLang and vLLM servers (native, completions and chat APIs).

Server flavours are a registry (:mod:`.flavours`): ``sglang``, ``vllm``, ``sglang-chat``,
``vllm-chat``; :func:`make_engine` builds an engine of any of them.

Usage::

    from rollout_kit.engines import RemoteSGLangEngine

    async with RemoteSGLangEngine("127.0.0.1:30000") as engine:
        resp = await engine.generate_async(ModelRequest(input_ids=[1, 2, 3]))
"""

from __future__ import annotations

from .backend import Backend, ControlRequest, Segment, StreamParser
from .base import InferenceEngine
from .flavours import FLAVOURS, backend_for, flavour_names, make_engine, register_flavour
from .remote import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine
from .routing import ROUTE_KEY_SEPARATOR, Router, route_key
from .scrape import MetricsScraper, ScrapeTarget
from .sglang import SGLangBackend
from .sglang_chat import SGLangChatBackend
from .vllm import VLLMBackend
from .vllm_chat import VLLMChatBackend

__all__ = [
    "FLAVOURS",
    "ROUTE_KEY_SEPARATOR",
    "Backend",
    "ControlRequest",
    "InferenceEngine",
    "MetricsScraper",
    "RemoteInfEngine",
    "RemoteSGLangEngine",
    "RemotevLLMEngine",
    "Router",
    "SGLangBackend",
    "SGLangChatBackend",
    "ScrapeTarget",
    "Segment",
    "StreamParser",
    "VLLMBackend",
    "VLLMChatBackend",
    "backend_for",
    "flavour_names",
    "make_engine",
    "register_flavour",
    "route_key",
]
