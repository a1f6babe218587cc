"""The ``sglang-chat`` flavour: SGLang's OpenAI-compatible ``/v1/chat/completions`` for
messages, its native ``/generate`` for ids and text.

SGLang returns token ids for chat only where asked and not in every version or mode: 0.5.23
answers a non-streamed request with ``return_token_ids`` with, per choice,
``prompt_token_ids`` and ``response_token_ids`` (vLLM's names are a top-level
``prompt_token_ids`` and per choice ``token_ids``; both are read), and refuses a streamed one
with HTTP 400 — so a streamed request does not ask, and its answer says it has no ids
(``token_source="none"``) rather than guessing them from text. It has no endpoint that
renders messages into ids; an agent in exact-ids mode passes a render function instead.
"""

from __future__ import annotations

from typing import Any

from ..._config import GenerationConfig
from .._backend import Segment
from .openai import OpenAIChat
from .sglang import SGLangBackend


class SGLangChatBackend(OpenAIChat, SGLangBackend):
    """SGLang's chat API beside its native API."""

    flavour = "sglang-chat"
    needs_model = True

    def build_chat_request(self, *, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]] | None, gconfig: GenerationConfig,
                           max_new_tokens: int, stream: bool, model: str | None,
                           template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        body = super().build_chat_request(
            messages=messages, tools=tools, gconfig=gconfig, max_new_tokens=max_new_tokens,
            stream=stream, model=model, template_kwargs=template_kwargs)
        if stream:  # "return_token_ids is not supported with streaming" (HTTP 400)
            body.pop("return_token_ids", None)
        return body

    def parse_chat_response(self, body: Any) -> Segment:
        if isinstance(body, dict) and isinstance(body.get("choices"), list) and body["choices"]:
            choice = body["choices"][0]
            ids = choice.get("response_token_ids") if isinstance(choice, dict) else None
            if ids is not None and choice.get("token_ids") is None:
                prompt = body.get("prompt_token_ids") or choice.get("prompt_token_ids")
                body = {**body, "prompt_token_ids": prompt,
                        "choices": [{**choice, "token_ids": ids}, *body["choices"][1:]]}
        return super().parse_chat_response(body)
