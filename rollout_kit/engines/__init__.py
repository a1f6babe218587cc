"""Remote inference engines: SGLang and vLLM servers (native, completions and chat APIs).

Server flavours are a registry (:func:`register_flavour`): ``sglang``, ``vllm``, ``sglang-chat``,
``vllm-chat``; :func:`make_engine` builds an engine of any of them. :class:`RecordingEngine` shows
an engine to a caller that files each of its calls (the load runner's records).

Usage::

    from rollout_kit.engines import RemoteSGLangEngine

    async with RemoteSGLangEngine("127.0.0.1:30000") as engine:
        resp = await engine.generate_async(ModelRequest(input_ids=[1, 2, 3]))
"""

from __future__ import annotations

from ._backend import Backend
from ._base import InferenceEngine
from ._flavours import (
    FLAVOURS,
    SGLangBackend,
    SGLangChatBackend,
    VLLMBackend,
    VLLMChatBackend,
    backend_for,
    flavour_names,
    register_flavour,
)
from ._recording import RecordingEngine
from ._remote import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine, make_engine
from ._routing import Router
from ._scrape import MetricsScraper

__all__ = [
    "FLAVOURS",
    "Backend",
    "InferenceEngine",
    "MetricsScraper",
    "RecordingEngine",
    "RemoteInfEngine",
    "RemoteSGLangEngine",
    "RemotevLLMEngine",
    "Router",
    "SGLangBackend",
    "SGLangChatBackend",
    "VLLMBackend",
    "VLLMChatBackend",
    "backend_for",
    "flavour_names",
    "make_engine",
    "register_flavour",
]
