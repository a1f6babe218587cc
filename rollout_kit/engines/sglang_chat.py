"""The ``sglang-chat`` flavour: SGLang's OpenAI-compatible ``/v1/chat/completions`` for
messages, its native ``/generate`` for ids and text.

SGLang returns token ids for chat only where asked and not in every version or mode
(streamed chat carries none): a response without them says so (``token_source="none"``)
rather than guessing ids from text. It has no endpoint that renders messages into ids; an
agent in exact-ids mode passes a render function instead.
"""

from __future__ import annotations

from typing import Any

from ..config import GenerationConfig
from .backend import Segment, StreamParser
from .openai_chat import (
    CHAT_ENDPOINT,
    ChatStreamParser,
    build_chat_request,
    parse_chat_response,
)
from .sglang import SGLangBackend

__all__ = ["SGLangChatBackend"]


class SGLangChatBackend(SGLangBackend):
    """SGLang's chat API beside its native API."""

    flavour = "sglang-chat"
    chat_endpoint = CHAT_ENDPOINT
    needs_model = True

    def build_chat_request(self, *, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]] | None, gconfig: GenerationConfig,
                           max_new_tokens: int, stream: bool, model: str | None,
                           template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        return build_chat_request(messages=messages, tools=tools, gconfig=gconfig,
                                  max_new_tokens=max_new_tokens, stream=stream, model=model,
                                  template_kwargs=template_kwargs)

    def parse_chat_response(self, body: Any) -> Segment:
        return parse_chat_response(body)

    def chat_stream_parser(self) -> StreamParser:
        return ChatStreamParser()
