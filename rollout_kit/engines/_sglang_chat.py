"""The ``sglang-chat`` flavour: SGLang's OpenAI-compatible ``/v1/chat/completions`` for
messages, its native ``/generate`` for ids and text.

SGLang returns token ids for chat only where asked and not in every version or mode
(streamed chat carries none): a response without them says so (``token_source="none"``)
rather than guessing ids from text. It has no endpoint that renders messages into ids; an
agent in exact-ids mode passes a render function instead.
"""

from __future__ import annotations

from ._openai_chat import OpenAIChat
from ._sglang import SGLangBackend


class SGLangChatBackend(OpenAIChat, SGLangBackend):
    """SGLang's chat API beside its native API."""

    flavour = "sglang-chat"
    needs_model = True
