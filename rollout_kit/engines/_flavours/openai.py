"""OpenAI-compatible bodies shared by the flavours that speak them: the sampling fields and
options of ``/v1/completions`` and ``/v1/chat/completions`` requests, the usage of their
answers, and the chat API itself.

:func:`openai_sampling` and :func:`add_openai_options` build the fields both endpoints share
(:mod:`.vllm`'s completions, the chat flavours); :func:`fill_usage` reads the prompt ids, the
``usage`` counts, SGLang's ``meta_info.cached_tokens`` and the simulator's ``sim_timing`` of any
answer or stream chunk of either.

The chat half (:class:`OpenAIChat`, mixed into :mod:`.vllm_chat` and :mod:`.sglang_chat`): the
server renders the messages with its chat template and parses tool calls; this module keeps
what a trainer needs of the answer — the exact token ids (``return_token_ids``: top-level
``prompt_token_ids``, per choice ``token_ids``, per streamed delta ``token_ids``), their
logprobs (``logprobs.content[*].logprob``), the parsed ``tool_calls``, the finish reason and
``usage.prompt_tokens_details.cached_tokens``. Streamed tool calls arrive as pieces
(``delta.tool_calls[*]`` with an ``index``; the name first, the arguments in fragments) and
are joined here into whole calls.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..._config import GenerationConfig
from .._backend import (
    Segment,
    StreamParser,
    as_stop_reason,
    float_timings,
    logprob,
    sampling_fields,
    token_ids,
)


def openai_sampling(g: GenerationConfig, max_new_tokens: int, stream: bool) -> dict[str, Any]:
    """The sampling fields the OpenAI-compatible bodies share (completions and chat), with
    vLLM's extensions (``top_k``, ``ignore_eos``, ``skip_special_tokens``) and the token ids
    asked for."""
    return {"max_tokens": max_new_tokens, **sampling_fields(g), "return_token_ids": True,
            "stream": stream}


def add_openai_options(body: dict[str, Any], g: GenerationConfig, model: str | None,
                       stream: bool) -> dict[str, Any]:
    """The optional fields the OpenAI-compatible bodies share (completions and chat): the
    model, stop strings and ids, the least output, the seed, usage in the stream."""
    if model:
        body["model"] = model
    if g.stop:
        body["stop"] = list(g.stop)
    if g.stop_token_ids:
        body["stop_token_ids"] = list(g.stop_token_ids)
    if g.min_new_tokens:
        body["min_tokens"] = min(g.min_new_tokens, body["max_tokens"])
    if g.seed is not None:
        body["seed"] = g.seed
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def fill_usage(seg: Segment, body: dict[str, Any], choice: dict[str, Any] | None = None) -> None:
    """Read what an answer or stream chunk says of its request into ``seg``: the prompt ids
    (``choice``'s, else the top-level ones), ``usage`` (prompt, completion and cached token
    counts), SGLang's ``meta_info.cached_tokens`` and the simulator's ``sim_timing``."""
    ids = (choice.get("prompt_token_ids") if choice is not None else None) \
        or body.get("prompt_token_ids")
    if ids:
        seg.prompt_ids = token_ids(ids)
    usage = body.get("usage")
    if isinstance(usage, dict):
        if usage.get("prompt_tokens") is not None:
            seg.prompt_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            seg.completion_tokens = int(usage["completion_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            seg.cached_tokens = int(details["cached_tokens"])
    meta = body.get("meta_info")  # SGLang
    if isinstance(meta, dict) and meta.get("cached_tokens") is not None:
        seg.cached_tokens = int(meta["cached_tokens"])
    seg.server_timing.update(float_timings(body.get("sim_timing")))


CHAT_ENDPOINT = "/v1/chat/completions"


def build_chat_request(*, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       gconfig: GenerationConfig, max_new_tokens: int, stream: bool,
                       model: str | None,
                       template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of one chat request, with the vLLM/SGLang sampling extensions
    (``top_k``, ``ignore_eos``, ``skip_special_tokens``) and token ids asked for."""
    g = gconfig
    body = {"messages": messages, **openai_sampling(g, max_new_tokens, stream)}
    if tools:
        body["tools"] = tools
    if template_kwargs:
        body["chat_template_kwargs"] = template_kwargs
    if g.logprobs:
        body["logprobs"] = True
        body["return_tokens_as_token_ids"] = True
    return add_openai_options(body, g, model, stream)


def _logprobs(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Token ids named by ``token_id:N`` logprob entries (only looked at when the choice has
    no ``token_ids``), and the logprobs."""
    content = (choice.get("logprobs") or {}).get("content") or []
    if choice.get("token_ids") is not None:  # the hot case: only the floats are needed
        try:
            return [], [float(e["logprob"]) for e in content]
        except TypeError:  # a null logprob
            return [], [logprob(e.get("logprob")) for e in content]
    ids: list[int] = []
    lps: list[float] = []
    for entry in content:
        lps.append(logprob(entry.get("logprob")))
        tok = entry.get("token")
        if isinstance(tok, str) and tok.startswith("token_id:"):
            ids.append(int(tok[9:]))
    return (token_ids(ids) if len(ids) == len(lps) else []), lps


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = call["function"]
    args = fn.get("arguments")
    return {"id": str(call.get("id") or ""), "type": "function",
            "function": {"name": str(fn["name"]),
                         "arguments": args if isinstance(args, str) else ""}}


def parse_chat_response(body: Any) -> Segment:
    """One non-streamed chat completion as a :class:`Segment` (``ids_returned`` says whether
    the server sent token ids)."""
    if not isinstance(body, dict):
        raise TypeError(f"expected one JSON object, got {type(body).__name__}")
    choice = body["choices"][0]
    message = choice["message"]
    lp_ids, lps = _logprobs(choice)
    ids = choice.get("token_ids")
    tokens = token_ids(ids) if ids is not None else lp_ids
    seg = Segment(tokens=tokens, logprobs=lps if len(lps) == len(tokens) else [])
    seg.ids_returned = ids is not None or bool(lp_ids)
    content = message.get("content")
    seg.text = content if isinstance(content, str) else ""
    seg.tool_calls = [_tool_call(c) for c in message.get("tool_calls") or []]
    if choice.get("finish_reason") is None:
        raise ValueError("choices[0].finish_reason is null in a finished response")
    seg.finish = as_stop_reason(str(choice["finish_reason"]))
    fill_usage(seg, body)
    return seg.check()


class ChatStreamParser(StreamParser):
    """Accumulates chat completion chunks: content deltas, token ids, tool-call pieces."""

    def __init__(self) -> None:
        super().__init__()
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._args: dict[int, list[str]] = {}
        self.segment.ids_returned = False  # until an event carries ids

    def feed(self, event: Any, t_ns: int) -> None:
        choices = event.get("choices")
        seg = self.segment
        if not choices:
            fill_usage(seg, event)
            return
        choice = choices[0]
        ids = choice.get("token_ids")
        lp_ids, lps = _logprobs(choice) if choice.get("logprobs") else ([], [])
        if ids is not None:
            seg.ids_returned = True
            self._add(token_ids(ids), lps, t_ns)
        elif lp_ids:
            seg.ids_returned = True
            self._add(lp_ids, lps, t_ns)
        delta = choice.get("delta") or {}
        content = delta.get("content")
        pieces = delta.get("tool_calls") or ()
        if isinstance(content, str) and content:
            self._text.append(content)
        for piece in pieces:
            self._tool_piece(piece)
        if ids is None and not lp_ids and (content or pieces):
            seg.chunks.append((t_ns, 0))  # output without ids still times the stream
        if choice.get("finish_reason") is not None:
            seg.finish = as_stop_reason(str(choice["finish_reason"]))
        if "prompt_token_ids" in event or event.get("usage") is not None or "sim_timing" in event:
            fill_usage(seg, event)
            if event.get("prompt_token_ids"):
                seg.ids_returned = True

    def _tool_piece(self, piece: dict[str, Any]) -> None:
        i = int(piece.get("index", 0))
        call = self._calls.setdefault(i, {"id": "", "type": "function",
                                          "function": {"name": "", "arguments": ""}})
        if piece.get("id"):
            call["id"] = str(piece["id"])
        fn = piece.get("function") or {}
        if fn.get("name"):
            call["function"]["name"] = str(fn["name"])
        if isinstance(fn.get("arguments"), str):
            self._args.setdefault(i, []).append(fn["arguments"])

    def result(self) -> Segment:
        seg = self.segment
        seg.text = "".join(self._text)
        for i, call in sorted(self._calls.items()):
            call["function"]["arguments"] = "".join(self._args.get(i, ()))
            seg.tool_calls.append(call)
        return super().result()


class OpenAIChat:
    """The chat half of a flavour: mixed in before its completions :class:`~.._backend.Backend`
    (``class VLLMChatBackend(OpenAIChat, VLLMBackend)``)."""

    chat_endpoint: ClassVar[str | None] = CHAT_ENDPOINT

    def build_chat_request(self, *, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]] | None, gconfig: GenerationConfig,
                           max_new_tokens: int, stream: bool, model: str | None,
                           template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON body of one chat request."""
        return build_chat_request(messages=messages, tools=tools, gconfig=gconfig,
                                  max_new_tokens=max_new_tokens, stream=stream, model=model,
                                  template_kwargs=template_kwargs)

    def parse_chat_response(self, body: Any) -> Segment:
        """Parse one non-streamed chat response."""
        return parse_chat_response(body)

    def chat_stream_parser(self) -> StreamParser:
        """A fresh parser for one streamed chat response."""
        return ChatStreamParser()
