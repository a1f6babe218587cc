"""Workflows: single/multi-turn trajectories, traced sessions and phases, reward handling."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from rollout_kit import (
    ConfigError,
    GenerationConfig,
    ModelRequest,
    MultiTurnWorkflow,
    RolloutController,
    RolloutWorkflow,
    SingleTurnWorkflow,
)
from rollout_kit.sim import ByteTokenizer
from rollout_kit.tracing import register_phase, trace_phase, trace_session
from tests._local_engine import LocalEngine

pytestmark = pytest.mark.timeout(30)


def reward_contains(prompt: str, completion: str, prompt_ids: list[int],
                    completion_ids: list[int], answer: str = "", **_: Any) -> float:
    return 1.0 if answer and answer in completion else 0.0


async def areward_len(prompt: str, completion: str, prompt_ids: list[int],
                      completion_ids: list[int], **_: Any) -> float:
    await asyncio.sleep(0)
    return float(len(completion_ids))


def slow_reward(*_: Any, **__: Any) -> float:
    time.sleep(0.5)
    return 1.0


async def test_single_turn_trajectory_and_traces() -> None:
    eng = LocalEngine("w", answer_fn=lambda p: "42")
    ctl = RolloutController(eng)
    wf = SingleTurnWorkflow(reward_contains, GenerationConfig(n_samples=3),
                            tokenizer=ByteTokenizer())
    [res] = await ctl.rollout_batch_async([{"prompt": "What is 40+2?", "answer": "42"}], wf)
    traj = res.trajectory
    assert res.ok and traj["rewards"] == [1.0, 1.0, 1.0]
    p = traj["prompt_len"]
    assert p == len("What is 40+2?")
    for ids, mask, lp, ver in zip(traj["input_ids"], traj["loss_mask"], traj["logprobs"],
                                  traj["versions"], strict=True):
        assert len(ids) == len(mask) == len(lp) == len(ver) == p + 2
        assert mask == [0] * p + [1, 1] and ver[:p] == [-1] * p
    assert traj["completions"] == ["42"] * 3
    sessions = ctl.sessions()
    assert len(sessions) == 3 and set(sessions.index.get_level_values(0)) == {res.task_id}
    spans = ctl.spans()
    assert sorted(spans["phase"].astype(str).value_counts().to_dict().items()) == [("generate", 3),
                                                                       ("reward", 3)]
    await ctl.close_async()


async def test_text_prompt_without_tokenizer_and_async_reward() -> None:
    eng = LocalEngine("w", answer_fn=lambda p: "hello")
    ctl = RolloutController(eng)
    wf = SingleTurnWorkflow(areward_len)
    [res] = await ctl.rollout_batch_async([{"prompt": "hi", "prompt_extra": 1}], wf)
    assert res.trajectory["rewards"] == [5.0] and res.trajectory["completions"] == ["hello"]
    [res2] = await ctl.rollout_batch_async([{"input_ids": [10, 11, 12]}], wf)
    assert res2.trajectory["prompt_len"] == 3
    await ctl.close_async()


async def test_reward_timeout_fails_task_with_traceback() -> None:
    ctl = RolloutController(LocalEngine("w"))
    wf = SingleTurnWorkflow(slow_reward, reward_timeout=0.05)
    [res] = await ctl.rollout_batch_async([{"prompt": "x"}], wf)
    assert res.status == "failed" and isinstance(res.error, TimeoutError)
    assert ctl.traces().loc[res.task_id, "status"] == "failed"
    await ctl.close_async()


async def test_bad_data_and_args() -> None:
    with pytest.raises(ConfigError):
        SingleTurnWorkflow(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tokenizer"):
        MultiTurnWorkflow(reward_contains)
    ctl = RolloutController(LocalEngine("w"))
    with pytest.raises(ConfigError, match=r"data\[0\]: data\['prompt'\] is missing"):
        await ctl.rollout_batch_async([{"no_prompt": 1}], SingleTurnWorkflow(reward_contains))
    with pytest.raises(ConfigError, match="non-empty str 'prompt'"):  # run without validate
        await SingleTurnWorkflow(reward_contains).arun_episode(LocalEngine("x"), {"no": 1})
    await ctl.close_async()


async def test_multi_turn_retries_with_feedback() -> None:
    answers = iter(["7", "41", "42"])
    eng = LocalEngine("w", answer_fn=lambda p: next(answers))
    ctl = RolloutController(eng)
    tok = ByteTokenizer()
    wf = MultiTurnWorkflow(reward_contains, tokenizer=tok, max_turns=3, turn_discount=0.5,
                           feedback="no")
    [res] = await ctl.rollout_batch_async([{"prompt": "Q", "answer": "42"}], wf)
    traj = res.trajectory
    assert traj["turns"] == [3] and traj["rewards"] == [0.25]
    assert traj["input_ids"][0] == tok.encode("Q7no41no42")
    assert traj["loss_mask"][0] == [0, 1, 0, 0, 1, 1, 0, 0, 1, 1]
    spans = ctl.spans()
    assert (spans["phase"] == "generate").sum() == 3 and (spans["phase"] == "reward").sum() == 3
    assert ctl.sessions()["turns"].tolist() == [3]
    await ctl.close_async()


register_phase("verify")


class VerifyWorkflow(RolloutWorkflow):
    """A user workflow with a custom phase (the documented recipe)."""

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        with trace_session():
            with trace_phase("generate"):
                resp = await engine.generate_async(ModelRequest(text=data["prompt"]))
            with trace_phase("verify"):
                ok = bool(resp.text)
        return {"text": resp.text} if ok else None


async def test_custom_phase_workflow() -> None:
    ctl = RolloutController(LocalEngine("w"))
    res = await ctl.rollout_batch_async([{"prompt": "a"}, {"prompt": "b"}], VerifyWorkflow())
    assert all(r.ok for r in res)
    assert "verify_s" in ctl.traces().columns
    assert (ctl.spans()["phase"] == "verify").sum() == 2
    await ctl.close_async()


async def test_plain_string_data_is_the_prompt() -> None:
    """The README's notebook flow with a list of strings: every task is accepted."""
    eng = LocalEngine("w", answer_fn=lambda p: "4")
    ctl = RolloutController(eng)
    wf = SingleTurnWorkflow(reward_contains, GenerationConfig(n_samples=2))
    more = ["What is 2+2?", "What is 1+3?"]
    res = await ctl.rollout_batch_async(more, wf)
    assert [r.status for r in res] == ["accepted"] * 2, [r.error for r in res]
    assert [r.trajectory["prompt"] for r in res] == more
    assert res[0].trajectory["completions"] == ["4", "4"]
    tid = ctl.submit("What is 3+1?", wf)
    assert (await ctl.wait_for_async(tid)).ok
    mt = MultiTurnWorkflow(lambda *a, **k: 1.0, tokenizer=ByteTokenizer())
    [r] = await ctl.rollout_batch_async(["What is 2+2?"], mt)
    assert r.ok and r.trajectory["prompt"] == "What is 2+2?"
    assert r.trajectory["prompt_len"] == len("What is 2+2?")
    await ctl.close_async()


@pytest.mark.parametrize("data", ["", 5, None, ["a"], {}, {"prompt": ""}, {"prompt": 3},
                                  {"input_ids": "abc"}, {"input_ids": []}, b"bytes"], ids=repr)
def test_validate_refuses_unusable_data_and_shows_the_shape(data: Any) -> None:
    for wf in (SingleTurnWorkflow(reward_contains),
               MultiTurnWorkflow(reward_contains, tokenizer=ByteTokenizer())):
        with pytest.raises(ConfigError, match="input_ids") as refused:
            wf.validate(data)
        if not isinstance(data, dict | list) or data == {}:  # the shapes it takes, both
            assert ("e.g. {'prompt': 'What is 2+2?'} or {'input_ids': [40, 41, 42]}"
                    in str(refused.value)), refused.value


@pytest.mark.parametrize("data", ["hi", {"prompt": "hi"}, {"input_ids": [1, 2]},
                                  {"input_ids": (1,)}, {"input_ids": [], "prompt": "hi"},
                                  {"question": "hi", "input_ids": [3]}], ids=repr)
def test_validate_accepts_usable_data(data: Any) -> None:
    SingleTurnWorkflow(reward_contains).validate(data)
    MultiTurnWorkflow(reward_contains, tokenizer=ByteTokenizer()).validate(data)


def test_validate_uses_the_prompt_key() -> None:
    wf = SingleTurnWorkflow(reward_contains, prompt_key="question")
    wf.validate({"question": "q"})
    with pytest.raises(ConfigError, match=r"data\['question'\] is missing"):
        wf.validate({"prompt": "q"})


def test_base_validate_is_a_no_op() -> None:
    class Plain(RolloutWorkflow):
        async def arun_episode(self, engine: Any, data: Any) -> Any:
            return data

    assert Plain().validate(object()) is None


async def test_empty_input_ids_with_a_prompt_uses_the_prompt() -> None:
    ctl = RolloutController(LocalEngine("w", answer_fn=lambda p: "ok"))
    mt = MultiTurnWorkflow(reward_contains, tokenizer=ByteTokenizer())
    [r] = await ctl.rollout_batch_async([{"input_ids": [], "prompt": "hi"}], mt)
    assert r.ok, r.error
    assert r.trajectory["prompt_len"] == 2
    await ctl.close_async()


def test_a_reward_with_the_wrong_signature_fails_when_the_workflow_is_built() -> None:
    from rollout_kit import ConfigError

    def two_args(prompt: str, completion: str) -> float:
        return 1.0

    def with_data(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any,
                  answer: str) -> float:
        return 1.0

    with pytest.raises(ConfigError, match=r"two_args\(prompt.*, completion.*\).* cannot be "
                                          r"called as reward_fn\(prompt, completion, prompt_ids"):
        SingleTurnWorkflow(two_args)
    SingleTurnWorkflow(with_data)  # data keys come as keyword arguments
    SingleTurnWorkflow(lambda *args, **kw: 1.0)
