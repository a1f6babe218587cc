"""The chat template with tools, the deterministic tool mode, /tokenize of messages, and
SGLang's chat endpoint, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from rollout_kit.sim import ByteTokenizer, SimCluster, serve
from rollout_kit.sim._chat_template import (
    evaluate,
    find_expression,
    parse_tool_calls,
    render,
    tool_reply,
)

from .helpers import post, sse

TOK = ByteTokenizer()
pytestmark = pytest.mark.timeout(60)
CALC = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an integer expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}
QUESTION = [{"role": "user", "content": "What is 12*(3+4)?"}]
CALL_TEXT = ('<tool_call>{"name": "calculator", "arguments": {"expression": "12*(3+4)"}}'
             "</tool_call>")


@pytest.fixture(params=["plain", "drop_think"])
async def vl(request: pytest.FixtureRequest
             ) -> AsyncIterator[tuple[SimCluster, aiohttp.ClientSession, str]]:
    async with serve("vllm", time_scale=0.001, chat_template=request.param,
                     prompt_tokens_details=True) as c, aiohttp.ClientSession() as s:
        yield c, s, request.param


def _turn2(turn1: dict[str, Any], result: str = "84") -> list[dict[str, Any]]:
    m = turn1["choices"][0]["message"]
    return [*QUESTION,
            {"role": "assistant", "content": m["content"], "tool_calls": m["tool_calls"]},
            {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": result}]


async def _chat(s: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]],
                **extra: Any) -> dict[str, Any]:
    st, body = await post(s, url + "/v1/chat/completions", {
        "model": "sim-model", "messages": messages, "tools": [CALC], "return_token_ids": True,
        **extra})
    assert st == 200, body
    out: dict[str, Any] = body
    return out


async def _streamed(s: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]]
                    ) -> dict[str, Any]:
    """A streamed chat folded into the non-streamed fields it must equal."""
    st, events = await sse(s, url + "/v1/chat/completions", {
        "messages": messages, "tools": [CALC], "return_token_ids": True, "stream": True,
        "stream_options": {"include_usage": True}})
    assert st == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    first = chunks[0]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    ids: list[int] = []
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for ch in chunks[1:-1]:
        choice = ch["choices"][0]
        ids += choice["token_ids"]
        delta = choice["delta"]
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls") or []:
            if "id" in tc:
                assert tc["type"] == "function" and tc["function"]["arguments"] == ""
                assert tc["id"].startswith("chatcmpl-tool-")
                calls[tc["index"]] = {"name": tc["function"]["name"], "arguments": ""}
            else:
                assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
                calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
        finish = choice["finish_reason"] or finish
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    return {"prompt_token_ids": first["prompt_token_ids"], "token_ids": ids,
            "content": content or None, "calls": [calls[i] for i in sorted(calls)],
            "finish": finish, "usage": usage}


async def test_two_turns_tool_call_then_answer(vl) -> None:
    c, s, template = vl
    think = template == "drop_think"
    t1 = await _chat(s, c.url, QUESTION)
    ch = t1["choices"][0]
    msg = ch["message"]
    assert ch["finish_reason"] == "tool_calls"
    assert msg["content"] == ("<think>I will use the calculator.</think>" if think else None)
    [call] = msg["tool_calls"]
    assert set(call) == {"id", "type", "function"} and call["type"] == "function"
    assert call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "calculator"
    assert json.loads(call["function"]["arguments"]) == {"expression": "12*(3+4)"}
    text = TOK.decode(ch["token_ids"])
    assert text == ("<think>I will use the calculator.</think>" if think else "") + CALL_TEXT
    assert ch["token_ids"][-1] == TOK.eos_token_id
    assert t1["usage"]["completion_tokens"] == len(ch["token_ids"])
    # the agent runs the tool and sends the result back
    result = str(evaluate(json.loads(call["function"]["arguments"])["expression"]))
    t2 = await _chat(s, c.url, _turn2(t1, result))
    ch2 = t2["choices"][0]
    assert ch2["finish_reason"] == "stop" and ch2["message"]["tool_calls"] == []
    assert ch2["message"]["content"] == (
        "<think>The tool said 84.</think>The answer is 84." if think else "The answer is 84.")
    # the second turn reuses the first turn's prompt blocks
    assert t2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert t1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_streamed_equals_non_streamed(vl) -> None:
    c, s, _template = vl
    t1 = await _chat(s, c.url, QUESTION)
    for messages in (QUESTION, _turn2(t1)):
        plain = await _chat(s, c.url, messages)
        streamed = await _streamed(s, c.url, messages)
        ch = plain["choices"][0]
        assert streamed["prompt_token_ids"] == plain["prompt_token_ids"]
        assert streamed["token_ids"] == ch["token_ids"]
        assert streamed["content"] == ch["message"]["content"]
        assert streamed["calls"] == [{"name": tc["function"]["name"],
                                      "arguments": tc["function"]["arguments"]}
                                     for tc in ch["message"]["tool_calls"]]
        assert streamed["finish"] == ch["finish_reason"]
        assert streamed["usage"]["completion_tokens"] == len(ch["token_ids"])
        assert streamed["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def test_tokenize_and_completions_with_rendered_ids(vl) -> None:
    c, s, _template = vl
    t1 = await _chat(s, c.url, QUESTION)
    for messages in (QUESTION, _turn2(t1)):
        chat = await _chat(s, c.url, messages)
        st, tok = await post(s, c.url + "/tokenize", {"model": "sim-model", "messages": messages,
                                                       "tools": [CALC],
                                                       "add_generation_prompt": True})
        assert st == 200 and tok["tokens"] == chat["prompt_token_ids"]
        assert tok["count"] == len(tok["tokens"]) and tok["token_strs"] is None
        assert tok["max_model_len"] == 4096
        st, cmpl = await post(s, c.url + "/v1/completions", {
            "prompt": tok["tokens"], "max_tokens": 300, "return_token_ids": True})
        assert st == 200
        choice = cmpl["choices"][0]
        assert choice["token_ids"] == chat["choices"][0]["token_ids"]
        assert choice["finish_reason"] == "stop"
        assert TOK.decode(choice["token_ids"]) == choice["text"]
        # the same prompt as text behaves the same
        st, by_text = await post(s, c.url + "/v1/completions", {
            "prompt": TOK.decode(tok["tokens"]), "max_tokens": 300})
        assert by_text["choices"][0]["text"] == choice["text"]
    st, no_gen = await post(s, c.url + "/tokenize", {"messages": QUESTION,
                                                     "add_generation_prompt": False})
    assert TOK.decode(no_gen["tokens"]) == "<|user|>\nWhat is 12*(3+4)?\n"


async def test_drift_with_drop_think_only(vl) -> None:
    c, s, template = vl
    t1 = await _chat(s, c.url, QUESTION)
    produced = t1["choices"][0]["token_ids"]
    assert produced[-1] == TOK.eos_token_id
    # what the model saw and produced (the EOS ends the turn; the template writes "\n")
    history = t1["prompt_token_ids"] + produced[:-1]
    t2 = await _chat(s, c.url, _turn2(t1))
    ids2 = t2["prompt_token_ids"]
    if template == "plain":
        assert ids2[:len(history)] == history
    else:
        assert ids2[:len(history)] != history
        # the drift starts where the assistant's content starts: its <think> part is gone
        n1 = len(t1["prompt_token_ids"])
        assert ids2[:n1] == t1["prompt_token_ids"]
        assert TOK.decode(ids2[n1:]).startswith(CALL_TEXT + "\n<|tool|>\n84\n")


async def test_max_tokens_truncates_the_call() -> None:
    async with serve("vllm", zero_latency=True) as c, aiohttp.ClientSession() as s:
        body = await _chat(s, c.url, QUESTION, max_tokens=20)
        ch = body["choices"][0]
        assert ch["finish_reason"] == "length" and len(ch["token_ids"]) == 20
        assert ch["message"]["tool_calls"] == [] and ch["message"]["content"] == CALL_TEXT[:20]


async def test_other_prompts_generate_as_before() -> None:
    other = {"type": "function", "function": {"name": "search", "parameters": {}}}
    async with serve("vllm", zero_latency=True, seed=3) as c, aiohttp.ClientSession() as s:
        st, body = await post(s, c.url + "/v1/chat/completions", {
            "messages": QUESTION, "tools": [other], "max_tokens": 50})
        assert st == 200 and "<tool_call>" not in body["choices"][0]["message"]["content"]
        st, body = await post(s, c.url + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hello"}], "tools": [CALC],
            "max_tokens": 50})
        assert st == 200 and body["choices"][0]["message"]["tool_calls"] == []
        assert body["choices"][0]["finish_reason"] in ("stop", "length")


async def test_timing_applies_to_forced_outputs() -> None:
    async with serve("vllm", time_scale=0.1, itl_s=0.01, jitter_cv=0.0) as c, \
            aiohttp.ClientSession() as s:
        body = await _chat(s, c.url, QUESTION)
        n = len(body["choices"][0]["token_ids"])
        assert body["sim_timing"]["decode_s"] >= 0.9 * (n - 1) * 0.001


@pytest.mark.parametrize(("body", "loc"), [
    ({"messages": []}, "body.messages"),
    ({"messages": "hi"}, "body.messages"),
    ({}, "body.messages"),
    ({"messages": ["hi"]}, "body.messages.0"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "body.messages.0.role"),
    ({"messages": QUESTION, "tools": {"a": 1}}, "body.tools"),
    ({"messages": QUESTION, "tools": [{"type": "retrieval"}]}, "body.tools.0"),
    ({"messages": QUESTION, "tools": [{"type": "function", "function": {"parameters": {}}}]},
     "body.tools.0.function.name"),
    ({"messages": QUESTION, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": 3}}}]}, "body.tools.0.function.parameters"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {
        "name": "f", "arguments": "{not json"}}]}]},
     "body.messages.0.tool_calls.0.function.arguments"),
])
async def test_validation_errors(body: dict[str, Any], loc: str) -> None:
    async with serve("vllm", zero_latency=True) as c, aiohttp.ClientSession() as s:
        for path in ("/v1/chat/completions", "/tokenize"):
            if path == "/tokenize" and "messages" not in body:
                continue
            st, err = await post(s, c.url + path, body)
            assert st == 400, (path, err)
            e = err["error"]
            assert e["type"] == "Bad Request" and e["code"] == 400 and e["param"] == loc
            assert "validation error" in e["message"]


async def test_openai_client_parses_tool_calls() -> None:
    async with serve("vllm", zero_latency=True) as c:
        client = AsyncOpenAI(base_url=c.url + "/v1", api_key="x")
        try:
            r = await client.chat.completions.create(
                model="sim-model", messages=QUESTION, tools=[CALC])  # type: ignore[list-item]
            call = r.choices[0].message.tool_calls[0]  # type: ignore[index]
            assert r.choices[0].finish_reason == "tool_calls"
            assert call.function.name == "calculator"  # type: ignore[union-attr]
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            stream = await client.chat.completions.create(
                model="sim-model", messages=QUESTION, tools=[CALC],  # type: ignore[list-item]
                stream=True)
            pieces: list[str] = []
            names: list[str] = []
            finish = None
            async for chunk in stream:
                if not chunk.choices:
                    continue
                for tc in chunk.choices[0].delta.tool_calls or []:
                    if tc.function and tc.function.name:
                        names.append(tc.function.name)
                    if tc.function and tc.function.arguments:
                        pieces.append(tc.function.arguments)
                finish = chunk.choices[0].finish_reason or finish
            assert names == ["calculator"] and finish == "tool_calls"
            assert json.loads("".join(pieces)) == args == {"expression": "12*(3+4)"}
            messages = [*QUESTION, r.choices[0].message.model_dump(exclude_none=True),
                        {"role": "tool", "tool_call_id": call.id,
                         "content": str(evaluate(args["expression"]))}]
            r2 = await client.chat.completions.create(
                model="sim-model", messages=messages, tools=[CALC])  # type: ignore[arg-type,list-item]
            assert r2.choices[0].message.content == "The answer is 84."
        finally:
            await client.close()


async def test_sglang_chat_completions() -> None:
    async with serve("sglang", zero_latency=True, prompt_tokens_details=True) as c, \
            aiohttp.ClientSession() as s:
        st, body = await post(s, c.url + "/v1/chat/completions", {
            "model": "default", "messages": QUESTION, "tools": [CALC],
            "return_token_ids": True})
        assert st == 200, body
        ch = body["choices"][0]
        # SGLang 0.5.23's names, per choice (seen on the real CPU server)
        assert set(ch) == {"index", "message", "logprobs", "finish_reason", "matched_stop",
                           "prompt_token_ids", "response_token_ids"}
        assert body["usage"]["prompt_tokens"] == len(ch["prompt_token_ids"]) > 0
        assert ch["finish_reason"] == "tool_calls" and ch["matched_stop"] is None
        msg = ch["message"]
        assert set(msg) == {"role", "content", "reasoning_content", "tool_calls"}
        assert msg["content"] is None
        [call] = msg["tool_calls"]
        assert call["id"].startswith("call_") and call["index"] == 0
        assert json.loads(call["function"]["arguments"]) == {"expression": "12*(3+4)"}
        assert TOK.decode(ch["response_token_ids"]) == CALL_TEXT
        assert body["usage"]["reasoning_tokens"] == 0
        assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        assert body["metadata"] == {"weight_version": "default"}
        # streamed, 0.5.23 refuses to return ids
        st, err = await post(s, c.url + "/v1/chat/completions", {
            "messages": QUESTION, "tools": [CALC], "return_token_ids": True, "stream": True})
        assert st == 400 and "not supported with streaming" in err["message"]
        st, events = await sse(s, c.url + "/v1/chat/completions", {
            "messages": QUESTION, "tools": [CALC], "stream": True})
        chunks = events[:-1]
        assert events[-1] == "[DONE]"
        assert all("token_ids" not in ch["choices"][0] and "prompt_token_ids" not in ch
                   for ch in chunks)
        args = "".join(tc["function"]["arguments"] for ch in chunks
                       for tc in ch["choices"][0]["delta"]["tool_calls"] or [])
        assert args == call["function"]["arguments"]
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        st, body = await post(s, c.url + "/v1/chat/completions", {"messages": [
            {"role": "user", "content": "hi"}], "max_tokens": 5, "stop_token_ids": []})
        assert st == 200 and body["choices"][0]["message"]["tool_calls"] is None
        st, err = await post(s, c.url + "/v1/chat/completions", {"messages": []})
        assert st == 400 and err["object"] == "error" and err["code"] == 400


async def test_prompt_tokens_details_on_completions() -> None:
    prompt = "x" * 100
    async with serve("vllm", zero_latency=True, prompt_tokens_details=True) as c, \
            aiohttp.ClientSession() as s:
        _st, b1 = await post(s, c.url + "/v1/completions", {"prompt": prompt, "max_tokens": 2})
        _st, b2 = await post(s, c.url + "/v1/completions", {"prompt": prompt, "max_tokens": 2})
        assert b1["usage"]["prompt_tokens_details"] == {
            "cached_tokens": 0, "created_cache_tokens": None, "multimodal_tokens": None}
        assert b2["usage"]["prompt_tokens_details"]["cached_tokens"] == 96
        _st, ev = await sse(s, c.url + "/v1/completions", {
            "prompt": prompt, "max_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True}})
        assert ev[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 96}


def test_template_and_tool_mode_units() -> None:
    text = render(QUESTION, [CALC])
    assert text.startswith('<|tools|>\n[{"name":"calculator","description":')
    assert text.endswith("<|user|>\nWhat is 12*(3+4)?\n<|assistant|>\n")
    assert tool_reply(text) == CALL_TEXT
    assert tool_reply(text, "drop_think") == "<think>I will use the calculator.</think>" + CALL_TEXT
    assert tool_reply(render(QUESTION)) is None  # no tools block
    assert find_expression("What is 17 + 25?") == "17 + 25"
    assert find_expression("Call me at 5 pm") is None
    assert evaluate("-(2+3)*4-1") == -21
    with pytest.raises(ValueError):
        evaluate("2+(3")
    parsed = parse_tool_calls("hi " + CALL_TEXT)
    assert parsed is not None and parsed.content == "hi "
    assert parsed.calls[0].arguments == '{"expression": "12*(3+4)"}'
    assert parse_tool_calls("<tool_call>{broken</tool_call>") is None
    # the assistant's tool call re-renders as the text the model produced
    history = render([*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {
            "name": "calculator", "arguments": '{"expression":"12*(3+4)"}'}}]}], [CALC],
        add_generation_prompt=False)
    assert history.endswith("<|assistant|>\n" + CALL_TEXT + "\n")


def test_cli_flags() -> None:
    from rollout_kit.sim._cli import _config, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = _config(parser.parse_args(["--chat-template", "drop_think",
                                     "--enable-prompt-tokens-details"]))
    assert cfg.chat_template == "drop_think" and cfg.prompt_tokens_details
    assert _config(parser.parse_args([])).chat_template == "plain"
