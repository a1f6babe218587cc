"""The ``vllm-chat`` flavour: vLLM's ``/v1/chat/completions`` for messages, its
``/v1/completions`` for ids and text, ``/tokenize`` to render messages into ids.

Chat flavours route each conversation to one server (sticky routing unless ``EngineConfig``
says otherwise). One flavour for both endpoints of one server, so an agent that switches to
sending its conversation's exact ids (:mod:`rollout_kit.agents`, ``token_mode="exact"``)
stays on the same server and its prefix cache. Token ids come back with ``return_token_ids`` (vLLM ≥
0.10.2: top-level ``prompt_token_ids``, per choice and per streamed delta ``token_ids``).
"""

from __future__ import annotations

from typing import Any

from .._backend import ControlRequest
from .openai import OpenAIChat
from .vllm import VLLMBackend


class VLLMChatBackend(OpenAIChat, VLLMBackend):
    """vLLM's chat API beside its completions API."""

    flavour = "vllm-chat"
    render_endpoint = "/tokenize"

    def render_request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       *, add_generation_prompt: bool, model: str | None,
                       template_kwargs: dict[str, Any] | None = None) -> ControlRequest:
        body: dict[str, Any] = {"messages": messages,
                                "add_generation_prompt": add_generation_prompt}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        if tools:
            body["tools"] = tools
        if model:
            body["model"] = model
        return ControlRequest("POST", "/tokenize", body)
