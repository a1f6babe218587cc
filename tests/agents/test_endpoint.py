"""The local OpenAI-compatible endpoint, driven by the real ``openai`` package: per-task keys,
401 for unknown ones with nothing recorded, streaming, loopback only."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

import rollout_kit as rk
from rollout_kit import ConfigError
from rollout_kit.agents import AgentEndpoint, AgentWorkflow
from rollout_kit.sim import serve

from .test_agent_client import DATA, TOOLS, calculator, exact


async def sdk_agent(client: Any, data: Any) -> str | None:
    """The agent of another process: only a base_url and a key, the openai SDK's own loop."""
    sdk = openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key, max_retries=0)
    try:
        messages: list[Any] = [{"role": "user", "content": data["prompt"]}]
        for _ in range(4):
            r = await sdk.chat.completions.create(model="any", messages=messages, tools=TOOLS,
                                                  max_tokens=256)  # type: ignore[arg-type]
            msg = r.choices[0].message
            messages.append(msg.model_dump(exclude_none=True))
            if not msg.tool_calls:
                return msg.content
            for call in msg.tool_calls:
                args = json.loads(call.function.arguments)  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": calculator(**args)})
        return None
    finally:
        await sdk.close()


async def test_an_sdk_agent_runs_through_the_endpoint_as_its_task() -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster, AgentEndpoint() as ep:
        assert ep.url.startswith("http://127.0.0.1:")
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses})
        try:
            wf = AgentWorkflow(sdk_agent, exact, n_samples=2, endpoint=ep)
            results = await ctl.rollout_batch_async(DATA, wf)
            sessions = ctl.sessions()
        finally:
            await ctl.close_async()
        assert [r.status for r in results] == ["accepted", "accepted"]
        assert [r.trajectory["rewards"] for r in results] == [[1.0, 1.0], [1.0, 1.0]]
        # every call of the SDK became a session of the task its key was bound to
        assert len(sessions) == 8
        assert sorted(set(sessions.index.get_level_values("task_id"))) == [0, 1]
        assert not ep._keys  # the keys ended with their tasks


async def test_an_unknown_key_is_401_and_records_nothing() -> None:
    async with AgentEndpoint() as ep:
        sdk = openai.AsyncOpenAI(base_url=ep.url, api_key="rk-not-a-key", max_retries=0)
        try:
            with pytest.raises(openai.AuthenticationError) as info:
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
            assert info.value.status_code == 401
            with pytest.raises(openai.AuthenticationError):
                await sdk.models.list()
        finally:
            await sdk.close()


async def test_a_request_without_a_bearer_key_is_401_while_a_task_is_bound() -> None:
    """No ``Authorization`` header, or one that is not ``Bearer <key>``, never runs as the
    task whose key is bound at that moment (nor as any other): 401, nothing recorded."""
    refused: list[tuple[str, int]] = []
    served: list[int] = []

    async def prober(client: Any, data: Any) -> str:
        key = client.api_key
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        async with aiohttp.ClientSession() as http:
            for auth in (None, key, f"Basic {key}", f"Token {key}", "Bearer ", "Bearer",
                         f"Bearer{key}", f"Bearer {key}x"):
                headers = {} if auth is None else {"Authorization": auth}
                for method, path in (("POST", "/chat/completions"), ("GET", "/models")):
                    async with http.request(method, client.base_url + path, json=body,
                                            headers=headers) as r:
                        refused.append((f"{method} {path} {auth!r}", r.status))
            async with http.post(client.base_url + "/chat/completions", json=body,
                                 headers={"Authorization": f"bearer {key}"}) as r:
                served.append(r.status)  # the scheme is case-insensitive (RFC 7235)
        return "ok"

    async with serve("vllm", n=1, zero_latency=True) as cluster, AgentEndpoint() as ep:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses})
        try:
            [r] = await ctl.rollout_batch_async(DATA[:1], AgentWorkflow(prober, endpoint=ep))
            sessions = ctl.sessions()
        finally:
            await ctl.close_async()
    assert r.ok, r.error
    assert [what for what, status in refused if status != 401] == []
    assert served == [200]
    assert len(sessions) == 1  # the one call with the task's key, nothing for the others


async def test_streaming_through_the_endpoint() -> None:
    async def streamer(client: Any, data: Any) -> str:
        sdk = openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key)
        try:
            stream = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": data["prompt"]}],
                tools=TOOLS, max_tokens=256, stream=True)  # type: ignore[arg-type]
            chunks = [c async for c in stream]
        finally:
            await sdk.close()
        names = [tc.function.name for c in chunks if c.choices
                 for tc in c.choices[0].delta.tool_calls or () if tc.function]
        assert names == ["calculator"]
        return "ok"

    async with serve("vllm", n=1, zero_latency=True) as cluster, AgentEndpoint() as ep:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses})
        try:
            [r] = await ctl.rollout_batch_async(DATA[:1], AgentWorkflow(streamer, endpoint=ep))
        finally:
            await ctl.close_async()
    assert r.ok, r.error


async def test_bad_requests_get_openai_errors() -> None:
    async def bad(client: Any, data: Any) -> str:
        sdk = openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key,
                                 max_retries=0)
        try:
            with pytest.raises(openai.BadRequestError, match="role 'robot'"):
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "robot", "content": "x"}])  # type: ignore[list-item, misc]
        finally:
            await sdk.close()
        return "ok"

    async with serve("vllm", n=1, zero_latency=True) as cluster, AgentEndpoint() as ep:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses})
        try:
            [r] = await ctl.rollout_batch_async(DATA[:1], AgentWorkflow(bad, endpoint=ep))
            assert r.ok, r.error
            assert len(ctl.sessions()) == 0  # refused before any session began
        finally:
            await ctl.close_async()


def test_the_endpoint_listens_on_loopback_only() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        AgentEndpoint(host="0.0.0.0")
