"""The chat flavours and the flavour registry: bodies, parsed tool calls, token ids or an
honest ``token_source="none"``, and every part that builds an engine looking flavours up."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

import rollout_kit as rk
from rollout_kit import ConfigError, GenerationConfig, ModelRequest
from rollout_kit.engines import FLAVOURS, VLLMBackend, backend_for, flavour_names, register_flavour
from rollout_kit.engines._flavours.openai import ChatStreamParser, parse_chat_response
from rollout_kit.sim import serve

from .conftest import make_engine

MSGS = [{"role": "user", "content": "What is 5+7?"}]
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}}}}]
CALL = {"id": "call-1", "type": "function",
        "function": {"name": "calculator", "arguments": "{\"expression\": \"5+7\"}"}}


def chat(**choice: Any) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "12"}, **choice}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,
                      "prompt_tokens_details": {"cached_tokens": 4}}}


def test_a_chat_body_with_ids_logprobs_and_tool_calls() -> None:
    body = chat(token_ids=[7, 8], finish_reason="tool_calls",
                message={"role": "assistant", "content": None, "tool_calls": [CALL]},
                logprobs={"content": [{"token": "token_id:7", "logprob": -0.5},
                                      {"token": "token_id:8", "logprob": -1.5}]})
    body["prompt_token_ids"] = [1, 2, 3]
    seg = parse_chat_response(body)
    assert (seg.tokens, seg.logprobs, seg.prompt_ids) == ([7, 8], [-0.5, -1.5], [1, 2, 3])
    assert seg.finish == "tool_calls" and seg.tool_calls == [CALL] and seg.ids_returned
    assert (seg.cached_tokens, seg.prompt_tokens, seg.completion_tokens) == (4, 9, 2)


def test_a_chat_body_without_ids_says_so() -> None:
    seg = parse_chat_response(chat())
    assert seg.tokens == [] and not seg.ids_returned and seg.text == "12"


def test_streamed_tool_call_pieces_join_into_whole_calls() -> None:
    p = ChatStreamParser()
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
         "prompt_token_ids": [1, 2]},
        {"choices": [{"index": 0, "token_ids": [5], "delta": {"tool_calls": [
            {"index": 0, "id": "call-1", "type": "function",
             "function": {"name": "calculator", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "token_ids": [6], "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{\"expression\": "}}]}}]},
        {"choices": [{"index": 0, "token_ids": [7], "finish_reason": "tool_calls",
                      "delta": {"tool_calls": [
                          {"index": 0, "function": {"arguments": "\"5+7\"}"}}]}}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}},
    ]
    for i, e in enumerate(events):
        p.feed(e, i)
    seg = p.result()
    assert seg.tokens == [5, 6, 7] and seg.prompt_ids == [1, 2]
    assert seg.tool_calls == [CALL] and seg.finish == "tool_calls"
    assert [t for t, _ in seg.chunks] == [1, 2, 3]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_engine_over_a_server_that_returns_no_ids(server: Any, stream: bool) -> None:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert body["messages"] == MSGS and body["tools"] == TOOLS
        if not body["stream"]:
            return web.json_response(chat())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in ({"choices": [{"index": 0, "delta": {"content": "1"}}]},
                      {"choices": [{"index": 0, "delta": {"content": "2"},
                                    "finish_reason": "stop"}]},
                      {"choices": [], "usage": chat()["usage"]}):
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    await server("/health", models)
    await server("/v1/models", models)
    addr = await server("/v1/chat/completions", completions)
    async with make_engine("sglang-chat", addr, stream=stream) as engine:
        resp = await engine.generate_async(ModelRequest(messages=MSGS, tools=TOOLS))
    assert resp.token_source == "none" and resp.output_tokens == []
    assert (resp.prompt_tokens, resp.completion_tokens, resp.text) == (9, 2, "12")
    assert resp.cached_tokens == 4


async def test_the_simulator_chat_round_trip_keeps_the_exact_ids() -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        async with make_engine("vllm-chat", cluster.addresses) as engine:
            resp = await engine.generate_async(ModelRequest(messages=MSGS, tools=TOOLS,
                                                            gconfig=GenerationConfig(
                                                                max_new_tokens=256)))
            rendered = await engine.render_async(MSGS, TOOLS)
    assert resp.stop_reason == "tool_calls" and resp.tool_calls[0]["function"]["name"] == \
        "calculator"
    assert resp.input_tokens == rendered and resp.token_source == "server"
    assert len(resp.output_tokens) == len(resp.output_logprobs) > 0
    assert engine.router.policy == "sticky"


def test_requests_check_messages_and_tools() -> None:
    with pytest.raises(ConfigError, match="role 'robot'"):
        ModelRequest(messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(ConfigError, match="JSON Schema"):
        ModelRequest(messages=MSGS, tools=[{"type": "function", "function": {
            "name": "f", "parameters": {"type": 3}}}])
    with pytest.raises(ConfigError, match="needs messages"):
        ModelRequest(input_ids=[1], tools=TOOLS)
    with pytest.raises(ConfigError, match="non-empty list"):
        ModelRequest(messages=[])


async def test_a_completions_flavour_refuses_messages() -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        async with make_engine("vllm", cluster.addresses) as engine:
            with pytest.raises(ConfigError, match="vllm-chat"):
                await engine.generate_async(ModelRequest(messages=MSGS))


def test_the_registry_names_every_flavour_once() -> None:
    assert flavour_names() == ("sglang", "vllm", "sglang-chat", "vllm-chat")
    assert backend_for("vllm-chat").chat_endpoint == "/v1/chat/completions"
    with pytest.raises(ConfigError, match="known: sglang, vllm"):
        backend_for("tgi")

    class Mine(VLLMBackend):
        flavour = "mine"

    register_flavour(Mine)
    try:
        ctl = rk.RolloutController(servers={"mine": ["127.0.0.1:9"], "vllm": "127.0.0.1:8"})
        assert [w.name for w in ctl.workers] == ["mine", "vllm"]
        assert isinstance(ctl.engines[0].backend, Mine)  # type: ignore[attr-defined]
    finally:
        del FLAVOURS["mine"]


def test_servers_and_the_shortcuts_do_not_clash() -> None:
    with pytest.raises(ConfigError, match="unknown server flavour 'tgi'"):
        rk.RolloutController(servers={"tgi": ["127.0.0.1:9"]})
    with pytest.raises(ConfigError, match="given twice"):
        rk.RolloutController(servers={"vllm": ["127.0.0.1:9"]}, vllm=["127.0.0.1:8"])
    ctl = rk.RolloutController(sglang="127.0.0.1:7", servers={"vllm-chat": ["127.0.0.1:9"]})
    assert [w.name for w in ctl.workers] == ["vllm-chat", "sglang"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_sglang_chat_ids_come_back_unstreamed_only(stream: bool) -> None:
    """SGLang 0.5.23 returns ``prompt_token_ids`` / ``response_token_ids`` per choice to a
    plain chat request and answers a streamed one asking for ids with HTTP 400: the flavour
    asks only when not streaming, and a streamed answer says it carries no ids."""
    async with serve("sglang", n=1, zero_latency=True) as cluster:
        async with make_engine("sglang-chat", cluster.addresses, stream=stream) as engine:
            resp = await engine.generate_async(ModelRequest(
                messages=[{"role": "user", "content": "hi"}],
                gconfig=GenerationConfig(max_new_tokens=6, ignore_eos=True)))
    assert resp.completion_tokens == 6 and resp.text
    if stream:
        assert resp.token_source == "none" and resp.output_tokens == []
    else:
        assert resp.token_source == "server" and len(resp.output_tokens) == 6
        assert len(resp.input_tokens) == resp.prompt_tokens > 0
