"""Agents against the simulator's deterministic tool mode: turns traced as sessions, tools as
phases, drift found in server mode and absent in exact-ids mode, every bad input a clear error
or a recorded reason."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rollout_kit as rk
from rollout_kit import AgentClosedError, ConfigError
from rollout_kit.agents import AgentClient, AgentWorkflow, first_divergence
from rollout_kit.agents._client import turn_drift
from rollout_kit.sim import serve

TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]


def calculator(expression: str) -> str:
    return str(eval(expression, {"__builtins__": {}}))  # digits and + - * ( ) only here


async def agent(client: Any, data: Any) -> str | None:
    """A tool-using agent written against the openai client, as users write it."""
    messages: list[Any] = [{"role": "user", "content": data["prompt"]}]
    for _ in range(4):
        r = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                 max_tokens=256)
        msg = r.choices[0].message
        messages.append(msg)
        if not msg.tool_calls:
            return msg.content
        messages += await client.run_tool_calls(msg.tool_calls)
    return None


def exact(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any,
          answer: str) -> float:
    return float(answer in completion)


DATA = [{"prompt": "What is 12*(3+4)?", "answer": "84"},
        {"prompt": "What is 5+7?", "answer": "12"}]


async def run(workflow: AgentWorkflow, data: list[Any] = DATA, **sim: Any
              ) -> tuple[list[Any], Any, Any]:
    async with serve("vllm", n=1, **{"zero_latency": True, **sim}) as cluster:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses})
        try:
            results = await ctl.rollout_batch_async(data, workflow)
            return results, ctl.sessions(), ctl.spans()
        finally:
            await ctl.close_async()


@pytest.mark.parametrize("mode", ["server", "exact"])
async def test_a_tool_using_agent_is_traced_per_turn(mode: str) -> None:
    wf = AgentWorkflow(agent, exact, n_samples=2, tools={"calculator": calculator},
                       token_mode=mode)  # type: ignore[arg-type]
    results, sessions, spans = await run(wf)
    assert [r.status for r in results] == ["accepted", "accepted"]
    assert results[0].trajectory["rewards"] == [1.0, 1.0]
    turns = results[0].trajectory["conversations"][0]["turns"]
    assert [t["finish_reason"] for t in turns] == ["tool_calls", "stop"]
    assert turns[0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert turns[1]["parent"] == 0 and turns[0]["parent"] == -1
    assert turns[0]["completion_ids"] and turns[1]["prompt_ids"]
    # one session per chat call: 2 tasks x 2 conversations x 2 turns
    assert len(sessions) == 8
    assert sorted(sessions["turn"].tolist()) == [0] * 4 + [1] * 4
    assert set(sessions["parent_turn"]) == {-1, 0}
    assert (sessions["token_mode"] == mode).all()
    # the tool ran as its own phase in the session of the turn that asked for it
    tool = spans[spans["phase"] == "tool.calculator"]
    asked = sessions[sessions["tool_calls"] == 1].index.get_level_values("session_id")
    assert sorted(tool["session_id"]) == sorted(asked)
    # the reward is on every turn's session
    assert (sessions["reward"] == 1.0).all()
    # exact mode sends the conversation's own ids; the default template keeps the model's
    # ids (its end-of-turn newline stands where the reply's </s> was): neither drifts
    drift = sessions.loc[sessions["turn"] == 1, "drift_at"]
    assert (drift == -1).all()
    if mode == "exact":
        assert (sessions["token_source"] == "rendered").all()
    else:  # the reply's stop id is not in the re-rendered prompt: the template's marker is
        second = turns[1]["prompt_ids"]
        end = len(turns[0]["prompt_ids"]) + len(turns[0]["completion_ids"]) - 1
        assert turns[0]["completion_ids"][-1] == 2 and second[end] != 2
        assert second[:end] == turns[0]["prompt_ids"] + turns[0]["completion_ids"][:-1]


@pytest.mark.parametrize(("completion", "finish", "ids", "at"), [
    ([5, 6, 2], "stop", [1, 5, 6, 9, 7], -1),        # the stop id, the template's marker
    ([5, 6, 2], "tool_calls", [1, 5, 6, 9, 7], -1),
    ([5, 6, 2], "length", [1, 5, 6, 9, 7], 3),       # cut off: its last id is the model's
    ([5, 6, 2], "stop", [1, 5, 8, 2, 7], 2),         # inside the reply: drift
    ([5, 6, 2], "stop", [1, 5, 6], 3),               # a prompt that ends there: not checked
    ([5, 6, 2], "stop", [1, 5, 6, 2, 7], -1),        # the marker is the stop id (Qwen's)
    ([], "stop", [1, 4], -1),
])
def test_the_stop_id_where_the_template_writes_its_marker_is_not_drift(
        completion: list[int], finish: str, ids: list[int], at: int) -> None:
    assert turn_drift([1], completion, finish, ids) == at


async def test_the_think_dropping_template_drifts_and_exact_mode_does_not() -> None:
    found, starts = {}, {}
    for mode in ("server", "exact"):
        wf = AgentWorkflow(agent, exact, tools={"calculator": calculator}, token_mode=mode,
                           template="drop_think")  # type: ignore[arg-type]
        results, sessions, _ = await run(wf, DATA[:1], chat_template="drop_think")
        assert results[0].ok, results[0].error
        turns = results[0].trajectory["conversations"][0]["turns"]
        assert turns[0]["message"]["content"].startswith("<think>")  # the dropped part
        found[mode] = turns[1]["drift_at"]
        # the assistant's content: from the end of the first prompt, as long as the completion
        starts[mode] = range(len(turns[0]["prompt_ids"]), len(before := turns[0]["prompt_ids"]
                                                             + turns[0]["completion_ids"]))
        assert found[mode] == first_divergence(before, turns[1]["prompt_ids"])
        assert (sessions["template"] == "drop_think").all()
    assert found["server"] in starts["server"]  # the dropped think part
    assert found["exact"] == -1


async def test_streamed_calls_yield_openai_chunks() -> None:
    async def streaming(client: Any, data: Any) -> str:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": data["prompt"]}], tools=TOOLS,
            max_tokens=256, stream=True, stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        assert calls[0].function.name == "calculator"
        assert chunks[-2].choices[0].finish_reason == "tool_calls"
        assert chunks[-1].usage.completion_tokens > 0
        return "done"

    results, _, _ = await run(AgentWorkflow(streaming), DATA[:1])
    assert results[0].ok, results[0].error


async def test_a_timed_out_turn_fails_the_task_with_its_own_reason() -> None:
    wf = AgentWorkflow(agent, exact, turn_timeout=0.05)
    results, sessions, _ = await run(wf, DATA[:1], zero_latency=False, prefill_overhead_s=30.0)
    assert results[0].status == "failed" and results[0].reason == "turn_timeout"
    assert "turn_timeout=0.05" in str(results[0].error)
    assert sessions["timed_out"].fillna(False).astype(bool).any()


async def test_a_tool_that_raises_is_a_message_or_the_task_fails() -> None:
    def broken(expression: str) -> str:
        raise ZeroDivisionError("boom")

    wf = AgentWorkflow(agent, exact, tools={"calculator": broken})
    results, sessions, _ = await run(wf, DATA[:1])
    assert results[0].ok  # the agent read the error as the tool's answer
    turn0 = results[0].trajectory["conversations"][0]["turns"][0]
    assert turn0["tool_errors"] == ["calculator: error: ZeroDivisionError: boom"]
    assert sessions["tool_error"].notna().sum() == 1

    wf = AgentWorkflow(agent, exact, tools={"calculator": broken}, tool_errors="raise")
    results, _, _ = await run(wf, DATA[:1])
    assert (results[0].status, results[0].reason) == ("failed", "tool_error")


async def test_bad_messages_and_tools_fail_with_a_clear_reason() -> None:
    async def bad_role(client: Any, data: Any) -> None:
        await client.chat.completions.create(messages=[{"role": "robot", "content": "x"}])

    async def bad_tool(client: Any, data: Any) -> None:
        await client.chat.completions.create(
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}])

    async def not_a_list(client: Any, data: Any) -> None:
        await client.chat.completions.create(messages="hello")

    for fn, text in ((bad_role, "role 'robot'"), (bad_tool, "JSON Schema"),
                     (not_a_list, "must be a list")):
        results, _, _ = await run(AgentWorkflow(fn), DATA[:1])
        assert results[0].status == "failed" and results[0].reason == "workflow_exception"
        assert isinstance(results[0].error, ConfigError) and text in str(results[0].error)


async def test_a_call_after_the_task_ended_is_refused() -> None:
    kept: list[AgentClient] = []

    async def leaky(client: AgentClient, data: Any) -> str:
        kept.append(client)
        return "bye"

    results, _, _ = await run(AgentWorkflow(leaky), DATA[:1])
    assert results[0].ok
    with pytest.raises(AgentClosedError, match="after its task ended"):
        await kept[0].chat.completions.create(messages=[{"role": "user", "content": "x"}])


def test_bad_workflow_options_fail_at_construction() -> None:
    with pytest.raises(ConfigError, match="token_mode"):
        AgentWorkflow(agent, token_mode="ids")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="turn_timeout"):
        AgentWorkflow(agent, turn_timeout=0)
    with pytest.raises(ConfigError, match="async function"):
        AgentWorkflow(calculator)  # type: ignore[arg-type]


async def test_a_completions_flavour_refuses_messages_by_name() -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        ctl = rk.RolloutController(vllm=cluster.addresses)
        try:
            [r] = await ctl.rollout_batch_async(DATA[:1], AgentWorkflow(agent))
        finally:
            await ctl.close_async()
    assert r.status == "failed" and "vllm-chat" in str(r.error)


def test_first_divergence() -> None:
    assert first_divergence([1, 2], [1, 2, 3]) == -1
    assert first_divergence([1, 2, 3], [1, 9, 3, 4]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2
    assert asyncio.iscoroutinefunction(agent)


async def test_seeded_chat_calls_record_and_replay(tmp_path: Any) -> None:
    from rollout_kit.replay import replay_async
    from rollout_kit.tracing import load_dump

    async with serve("vllm", n=1, zero_latency=True) as cluster:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses}, dump=tmp_path)
        try:
            wf = AgentWorkflow(agent, exact, n_samples=2, tools={"calculator": calculator})
            assert all(r.ok for r in await ctl.rollout_batch_async(DATA, wf))
        finally:
            await ctl.close_async()
        calls = load_dump(tmp_path)
        assert len(calls) == 8 and (calls["flavour"] == "vllm-chat").all()
        assert calls["prompt_ids"].map(len).min() > 0  # the chat template's own ids
        frame = await replay_async(tmp_path)  # the recorded ids, to the same server
    assert (frame["status"] == "identical").all(), frame[["status", "reason"]]


def test_the_pytest_plugin_starts_the_simulator_of_a_chat_flavour(
        sim_servers: Any, rollout_controller: Any) -> None:
    cluster = sim_servers("vllm-chat")
    ctl = rollout_controller(servers={"vllm-chat": cluster.addresses})
    wf = AgentWorkflow(agent, exact, tools={"calculator": calculator})
    [r] = ctl.rollout_batch(DATA[:1], wf)
    assert r.ok and r.trajectory["rewards"] == [1.0]
