"""The vLLM 0.32 chat contract that agent rollouts rely on, pinned against the real server.

Raw aiohttp, no rollout_kit client. The server (the ``vllm_cpu_server`` fixture) runs the tiny
random Llama with :data:`~rollout_kit.testing._tiny_model.CHAT_TEMPLATE` and
:data:`~rollout_kit.testing._vllm_cpu.AGENT_ARGS` (``--enable-auto-tool-choice --tool-call-parser
hermes --enable-prompt-tokens-details --enable-prefix-caching --trust-request-chat-template``).

Checked here: ``return_token_ids`` on ``/v1/chat/completions`` (top-level ``prompt_token_ids``,
per-choice ``token_ids``; streamed: ``prompt_token_ids`` on the first chunk, ``token_ids`` on
every delta), logprobs aligned with the token ids, ``usage.prompt_tokens_details.cached_tokens``,
``/tokenize`` with ``messages`` giving the chat endpoint's prompt ids, the template's rendering,
and re-tokenization drift: with a think-dropping template (per request, ``"chat_template"``, or
``"chat_template_kwargs": {"drop_think": true}``) turn 2's prompt ids stop extending turn 1's
prompt + assistant ids exactly where the assistant's content starts; with the plain template they
extend it.

Observed on vLLM 0.32 CPU: the two-turn conversation below has turn-1 prompt 29 ids, assistant
text 33 ids, turn-2 prompt 94 ids (plain) / 70 ids (think dropped, first difference at index 29);
prefix caching counts whole blocks of 128 tokens (a 468-token prompt repeated with another last
message: ``cached_tokens`` 384). Sampled completions of the random model are mostly invalid UTF-8
byte tokens, so their ids do not survive decode + re-tokenize (0 of 20 did): re-sending
``message.content`` instead of ``token_ids`` drifts.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from rollout_kit.testing import VLLMCPUServer
from rollout_kit.testing._tiny_model import CHAT_TEMPLATE, DROP_THINK_TEMPLATE, chat_template

pytestmark = pytest.mark.vllm_cpu

USER1: dict[str, Any] = {"role": "user", "content": "What is 2 + 2?"}
THINKING = "<think>The sum is easy.</think>The answer is 4."
ASSISTANT1: dict[str, Any] = {"role": "assistant", "content": THINKING}
USER2: dict[str, Any] = {"role": "user", "content": "And 3 + 3?"}
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "add", "description": "Add two numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "integer"}}}}}]


# ----------------------------------------------------------------------------------- helpers


@pytest.fixture
async def http(vllm_cpu_server: VLLMCPUServer) -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base_url=vllm_cpu_server.url, timeout=timeout) as session:
        yield session


async def post(http: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(path, json={"model": "tiny", **body}) as resp:
        data: dict[str, Any] = await resp.json()
        assert resp.status == 200, data
        return data


async def chat(http: aiohttp.ClientSession, messages: list[dict[str, Any]],
               **body: Any) -> dict[str, Any]:
    payload = {"messages": messages, "max_tokens": 4, "return_token_ids": True, **body}
    return await post(http, "/v1/chat/completions", payload)


async def chat_stream(http: aiohttp.ClientSession, messages: list[dict[str, Any]],
                      **body: Any) -> list[dict[str, Any]]:
    payload = {"model": "tiny", "messages": messages, "max_tokens": 6, "return_token_ids": True,
               "stream": True, "stream_options": {"include_usage": True}, **body}
    chunks: list[dict[str, Any]] = []
    async with http.post("/v1/chat/completions", json=payload) as resp:
        assert resp.status == 200
        done = False
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ") and not done
            if line == "data: [DONE]":
                done = True
                continue
            chunks.append(json.loads(line.removeprefix("data: ")))
    assert done
    return chunks


async def tokenize_chat(http: aiohttp.ClientSession, messages: list[dict[str, Any]], *,
                        add_generation_prompt: bool = True, **body: Any) -> list[int]:
    data = await post(http, "/tokenize", {"messages": messages,
                                          "add_generation_prompt": add_generation_prompt, **body})
    assert data["count"] == len(data["tokens"])
    return list(data["tokens"])


async def tokenize_text(http: aiohttp.ClientSession, text: str) -> list[int]:
    data = await post(http, "/tokenize", {"prompt": text, "add_special_tokens": False})
    return list(data["tokens"])


async def detokenize(http: aiohttp.ClientSession, ids: list[int]) -> str:
    data = await post(http, "/detokenize", {"tokens": ids})
    return str(data["prompt"])


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (``None`` when one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) for t in value)


# ------------------------------------------------------------------------------ the template


def test_templates_differ_only_in_the_default() -> None:
    assert CHAT_TEMPLATE == chat_template()
    assert DROP_THINK_TEMPLATE == chat_template(drop_think=True)
    assert CHAT_TEMPLATE != DROP_THINK_TEMPLATE
    assert CHAT_TEMPLATE.replace("else false", "else true") == DROP_THINK_TEMPLATE


def test_model_folder_carries_the_template(vllm_cpu_server: VLLMCPUServer) -> None:
    config = json.loads((vllm_cpu_server.model_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE
    assert not (vllm_cpu_server.model_dir / "chat_template.jinja").exists()
    for flag in ("--enable-auto-tool-choice", "--enable-prompt-tokens-details",
                 "--enable-prefix-caching", "--trust-request-chat-template"):
        assert flag in vllm_cpu_server.command()


async def test_template_renders_roles_tools_and_tool_calls(http: aiohttp.ClientSession) -> None:
    assert await detokenize(http, await tokenize_chat(http, [USER1])) == (
        "<|user|>\nWhat is 2 + 2?\n<|assistant|>\n")
    assert await detokenize(http, await tokenize_chat(
        http, [USER1], add_generation_prompt=False)) == "<|user|>\nWhat is 2 + 2?\n"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."}, USER1,
        {"role": "assistant", "content": "Let me add.", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    ]
    text = await detokenize(http, await tokenize_chat(http, messages, tools=TOOLS))
    assert text == (
        "<|tools|>\n" + json.dumps(TOOLS) + "\n"
        "<|system|>\nBe brief.\n<|user|>\nWhat is 2 + 2?\n"
        '<|assistant|>\nLet me add.<tool_call>{"name": "add", "arguments": {"a": 2, "b": 2}}'
        "</tool_call>\n<|tool|>\n4\n<|assistant|>\n")


async def test_tools_with_auto_tool_choice_are_accepted(http: aiohttp.ClientSession) -> None:
    # without --enable-auto-tool-choice, "auto" is a 400; the random model never calls a tool
    body = await chat(http, [USER1], tools=TOOLS, tool_choice="auto")
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["prompt_token_ids"] == await tokenize_chat(http, [USER1], tools=TOOLS)


# --------------------------------------------------------------------------------- token ids


async def test_chat_returns_prompt_and_completion_token_ids(http: aiohttp.ClientSession,
                                                            vllm_cpu_server: VLLMCPUServer) -> None:
    body = await chat(http, [USER1], max_tokens=6, ignore_eos=True, logprobs=True)
    assert is_token_ids(body["prompt_token_ids"])  # top-level for chat
    assert body["prompt_token_ids"] == await tokenize_chat(http, [USER1])
    assert len(body["prompt_token_ids"]) == body["usage"]["prompt_tokens"] == 29
    (choice,) = body["choices"]
    ids = choice["token_ids"]
    assert is_token_ids(ids) and len(ids) == body["usage"]["completion_tokens"] == 6
    assert all(0 <= t < vllm_cpu_server.vocab_size for t in ids)
    content = choice["logprobs"]["content"]
    assert len(content) == len(ids)  # one entry per token id, even for partial UTF-8 bytes
    for entry in content:
        assert set(entry) >= {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["logprob"] == pytest.approx(-math.log(vllm_cpu_server.vocab_size), abs=0.01)


async def test_logprob_tokens_as_ids_match_token_ids(http: aiohttp.ClientSession) -> None:
    body = await chat(http, [USER1], max_tokens=6, ignore_eos=True, logprobs=True,
                      return_tokens_as_token_ids=True)
    (choice,) = body["choices"]
    assert [e["token"] for e in choice["logprobs"]["content"]] == [
        f"token_id:{t}" for t in choice["token_ids"]]


async def test_streamed_chat_carries_token_ids(http: aiohttp.ClientSession) -> None:
    chunks = await chat_stream(http, [USER1], ignore_eos=True, logprobs=True,
                               return_tokens_as_token_ids=True)
    first, *deltas, last = chunks
    assert first["prompt_token_ids"] == await tokenize_chat(http, [USER1])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "token_ids" not in first["choices"][0]
    streamed: list[int] = []
    for chunk in deltas:
        assert "prompt_token_ids" not in chunk
        (choice,) = chunk["choices"]
        assert is_token_ids(choice["token_ids"]) and choice["token_ids"]
        # a delta may hold back text (partial UTF-8) but never its token ids
        assert [e["token"] for e in choice["logprobs"]["content"]] == [
            f"token_id:{t}" for t in choice["token_ids"]]
        streamed += choice["token_ids"]
    assert deltas[-1]["choices"][0]["finish_reason"] == "length"
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == len(streamed) == 6
    assert isinstance(last["usage"]["prompt_tokens_details"]["cached_tokens"], int)


async def test_stream_and_non_stream_agree_on_prompt_ids(http: aiohttp.ClientSession) -> None:
    messages = [USER1, ASSISTANT1, USER2]
    body = await chat(http, messages)
    chunks = await chat_stream(http, messages)
    assert chunks[0]["prompt_token_ids"] == body["prompt_token_ids"]


# ----------------------------------------------------------------------------- prefix cache


async def test_cached_tokens_count_a_repeated_long_prefix(http: aiohttp.ClientSession) -> None:
    nonce = uuid.uuid4().hex  # no earlier request shares this prefix
    system = {"role": "system",
              "content": nonce + " Rollouts send prompts to an inference server. " * 12}
    usages = [(await chat(http, [system, {"role": "user", "content": f"question {i}"}],
                          max_tokens=1))["usage"] for i in range(2)]
    details = [u["prompt_tokens_details"] for u in usages]
    assert all(isinstance(d["cached_tokens"], int) for d in details)
    assert details[0]["cached_tokens"] == 0
    assert 0 < details[1]["cached_tokens"] < usages[1]["prompt_tokens"]
    assert details[1]["cached_tokens"] % 128 == 0  # whole KV blocks (128 tokens on CPU)


# ------------------------------------------------------------------------------------- drift


async def test_plain_template_extends_turn_one(http: aiohttp.ClientSession) -> None:
    turn1 = await tokenize_chat(http, [USER1])
    turn2 = await tokenize_chat(http, [USER1, ASSISTANT1, USER2])
    assistant = await tokenize_text(http, THINKING)
    assert (len(turn1), len(assistant), len(turn2)) == (29, 33, 94)
    assert turn2[:len(turn1) + len(assistant)] == turn1 + assistant
    assert await detokenize(http, turn2[len(turn1) + len(assistant):]) == (
        "\n<|user|>\nAnd 3 + 3?\n<|assistant|>\n")


@pytest.mark.parametrize("select", [
    {"chat_template": DROP_THINK_TEMPLATE},
    {"chat_template_kwargs": {"drop_think": True}},
], ids=["request-template", "template-kwargs"])
async def test_think_dropping_template_breaks_the_prefix(http: aiohttp.ClientSession,
                                                         select: dict[str, Any]) -> None:
    turn1 = await tokenize_chat(http, [USER1], **select)
    turn2 = await tokenize_chat(http, [USER1, ASSISTANT1, USER2], **select)
    assistant = await tokenize_text(http, THINKING)
    assert turn1 == await tokenize_chat(http, [USER1])  # same first turn
    assert len(turn2) == 70
    # the drift starts exactly where the assistant's content starts: "<think>…" is gone
    assert first_difference(turn1 + assistant, turn2) == len(turn1) == 29
    assert await detokenize(http, turn2[len(turn1):]) == (
        "The answer is 4.\n<|user|>\nAnd 3 + 3?\n<|assistant|>\n")
    # the chat endpoint renders the same ids as /tokenize for the selected template
    body = await chat(http, [USER1, ASSISTANT1, USER2], max_tokens=1, **select)
    assert body["prompt_token_ids"] == turn2


async def test_last_assistant_turn_keeps_its_thinking(http: aiohttp.ClientSession) -> None:
    # only turns before the last user message lose their thinking (Qwen3 style)
    messages = [USER1, ASSISTANT1]
    plain = await tokenize_chat(http, messages, add_generation_prompt=False)
    dropped = await tokenize_chat(http, messages, add_generation_prompt=False,
                                  chat_template=DROP_THINK_TEMPLATE)
    assert plain == dropped


async def test_sampled_turn_extends_the_prompt_with_the_plain_template(
        http: aiohttp.ClientSession) -> None:
    body = await chat(http, [USER1], max_tokens=8, ignore_eos=True)
    turn1 = body["prompt_token_ids"]
    sampled = body["choices"][0]["message"]["content"]
    turn2 = await tokenize_chat(http, [USER1, {"role": "assistant", "content": sampled}, USER2])
    assert turn2[:len(turn1)] == turn1
    # the sampled ids themselves need not survive decode + re-tokenize (random byte tokens);
    # whether they do is not asserted here: with a random model they almost never do.
