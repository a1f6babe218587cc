"""The simulator's default answer model: arithmetic right with probability ``accuracy``.

Every count here is deterministic: seeded requests, fixed prompt sets, fixed simulator seeds.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from rollout_kit import ConfigError, GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit.examples import exact_match_reward, make_problems
from rollout_kit.sim import ByteTokenizer, SimCluster, SimConfig, serve
from rollout_kit.sim._answers import arithmetic_answer, find_question
from rollout_kit.sim._cli import _config, add_arguments
from rollout_kit.sim._generation import SamplingSpec, sequence_key

from .helpers import post

TOK = ByteTokenizer()
ANSWER_RE = re.compile(r"The answer is (-?\d+)\.")
pytestmark = pytest.mark.timeout(60)

PROBLEMS = make_problems(400, seed=5)  # "What is A<op>B?" with +, - and *


def _right(text: str, answer: str) -> bool:
    return exact_match_reward("", text, [], [], answer=answer) == 1.0


# -- the model without HTTP -------------------------------------------------------------------
@pytest.mark.parametrize(("prompt", "found"), [
    ("What is 17+25?", (17, "+", 25)),
    ("what is 17 * 25 ?", (17, "*", 25)),
    ("What's 3-5?", (3, "-", 5)),
    ("Q: What is 5--3?", (5, "-", -3)),
    ("<|user|>What is 2+2?<|assistant|>", (2, "+", 2)),
    ("What is 3-5? And what is 4*4?", (4, "*", 4)),  # the last question
    ("What is 4*4? And what is the capital of France?", (4, "*", 4)),
    ("context? " * 200 + "What is 9*9?", (9, "*", 9)),
    ("What is the capital of France?", None),
    ("hello", None),
    ("What is 17+25", None),
    ("", None),
])
def test_find_question(prompt: str, found: tuple[int, str, int] | None) -> None:
    assert find_question(TOK.encode(prompt)) == found


def test_accuracy_one_and_zero_and_plausible_wrong_answers() -> None:
    for k, p in enumerate(PROBLEMS):
        ids = TOK.encode(p["prompt"])
        right = arithmetic_answer(ids, 1.0, k)
        assert right == f"The answer is {p['answer']}."
        wrong = arithmetic_answer(ids, 0.0, k)
        assert wrong is not None
        m = ANSWER_RE.fullmatch(wrong)
        assert m is not None and m.group(1) != p["answer"]
        a, b = (int(x) for x in re.findall(r"\d+", p["prompt"]))
        slip = abs(int(m.group(1)) - int(p["answer"]))
        assert slip in ({1, 2, 10, a, b} if "*" in p["prompt"] else {1, 2, 10})
        if int(p["answer"]) >= 0:
            assert int(m.group(1)) >= 0


@pytest.mark.parametrize("accuracy", [0.7, 0.3])
def test_accuracy_over_a_fixed_prompt_and_seed_set(accuracy: float) -> None:
    for temperature in (1.0, 0.0):  # sampled with seeds, and the greedy fixed draw
        hits = 0
        for k, p in enumerate(PROBLEMS):
            ids = TOK.encode(p["prompt"])
            spec = SamplingSpec(max_tokens=32, temperature=temperature, seed=k)
            text = arithmetic_answer(ids, accuracy, sequence_key(0, ids, spec, 0, None))
            assert text is not None
            hits += _right(text, p["answer"])
        # 400 draws: sd ~ 0.023; the bound is ~3.5 sd, and the draws are fixed by the seeds
        assert abs(hits / len(PROBLEMS) - accuracy) < 0.08, (temperature, hits)


def test_sim_config_and_cli_accuracy() -> None:
    assert SimConfig().accuracy == 0.7
    for bad in (-0.1, 1.5, float("nan"), "0.5", True):
        with pytest.raises(ConfigError):
            SimConfig(accuracy=bad)  # type: ignore[arg-type]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert _config(parser.parse_args([])).accuracy == 0.7
    assert _config(parser.parse_args(["--accuracy", "0.25"])).accuracy == 0.25


# -- over HTTP, both flavours -----------------------------------------------------------------
def _body(api: str, prompt: str, **sp: Any) -> tuple[str, dict[str, Any]]:
    if api == "sglang":
        if "seed" in sp:
            sp["sampling_seed"] = sp.pop("seed")
        if "max_tokens" in sp:
            sp["max_new_tokens"] = sp.pop("max_tokens")
        if "min_tokens" in sp:
            sp["min_new_tokens"] = sp.pop("min_tokens")
        return "/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 32, **sp}}
    return "/v1/completions", {"prompt": prompt, "max_tokens": 32, **sp}


def _texts(api: str, body: Any) -> list[str]:
    if api == "sglang":
        return [b["text"] for b in (body if isinstance(body, list) else [body])]
    return [ch["text"] for ch in body["choices"]]


@pytest.fixture(params=["sglang", "vllm"])
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[
        tuple[str, SimCluster, aiohttp.ClientSession]]:
    api = request.param
    async with serve(api, n=1, zero_latency=True, seed=3) as c, aiohttp.ClientSession() as s:
        yield api, c, s


async def _ask(sim: tuple[str, SimCluster, aiohttp.ClientSession], prompt: str,
               **sp: Any) -> list[str]:
    api, c, s = sim
    path, body = _body(api, prompt, **sp)
    st, res = await post(s, c.url + path, body)
    assert st == 200, res
    return _texts(api, res)


async def test_samples_differ_at_temperature_one(sim) -> None:
    texts = [(await _ask(sim, "What is 17+25?", temperature=1.0))[0] for _ in range(12)]
    assert all(ANSWER_RE.fullmatch(t) for t in texts)
    assert len(set(texts)) > 1  # a group with reward variance
    assert "The answer is 42." in texts
    n4 = await _ask(sim, "What is 17+25?", temperature=1.0, n=4, seed=1)
    assert len(n4) == 4 and all(ANSWER_RE.fullmatch(t) for t in n4)


async def test_greedy_and_same_seed_are_identical(sim) -> None:
    greedy = {(await _ask(sim, "What is 6*7?", temperature=0.0))[0] for _ in range(6)}
    assert len(greedy) == 1 and ANSWER_RE.fullmatch(greedy.pop())
    seeded = {(await _ask(sim, "What is 6*7?", temperature=1.0, seed=11))[0] for _ in range(6)}
    assert len(seeded) == 1
    by_seed = {(await _ask(sim, "What is 6*7?", temperature=1.0, seed=k))[0] for k in range(12)}
    assert len(by_seed) > 1


async def test_reward_mean_follows_accuracy_over_http(sim) -> None:
    hits = 0
    for k, p in enumerate(PROBLEMS[:200]):
        (text,) = await _ask(sim, p["prompt"], temperature=1.0, seed=k)
        hits += _right(text, p["answer"])
    assert 0.6 <= hits / 200 <= 0.8, hits


async def test_lengths_and_filler(sim) -> None:
    (padded,) = await _ask(sim, "What is 17+25?", max_tokens=40, ignore_eos=True, seed=2)
    assert len(TOK.encode(padded)) == 40 and padded.startswith("The answer is ")
    assert re.findall(r"-?\d+", padded) == re.findall(r"-?\d+", padded[:20])
    (short,) = await _ask(sim, "What is 17+25?", max_tokens=5, seed=2)
    assert short == "The a"
    # min_tokens / min_new_tokens: digit-free padding after the answer, then the EOS
    (minimal,) = await _ask(sim, "What is 17+25?", max_tokens=40, min_tokens=30, seed=2)
    assert len(TOK.encode(minimal)) == 30 and ANSWER_RE.match(minimal)
    assert re.findall(r"-?\d+", minimal) == re.findall(r"-?\d+", minimal[:20])
    a = await _ask(sim, "Tell me a story.", temperature=0.0)
    b = await _ask(sim, "Tell me a story.", temperature=0.0)
    assert a == b and not ANSWER_RE.search(a[0])


async def test_other_seed_other_filler_same_shape() -> None:
    out = []
    for seed in (0, 1):
        async with serve("vllm", zero_latency=True, seed=seed) as c, \
                aiohttp.ClientSession() as s:
            st, body = await post(s, c.url + "/v1/completions", {
                "prompt": "Tell me a story.", "max_tokens": 16, "ignore_eos": True,
                "temperature": 0.0})
            assert st == 200
            out.append(body["choices"][0]["text"])
    assert out[0] != out[1] and all(len(t) == 16 for t in out)


async def test_controller_group_rewards_vary_without_answer_fn() -> None:
    """The demo's setup against plain ``serve()``: a mean near 0.7 and groups with variance."""
    async with serve("sglang", n=2, zero_latency=True) as sg, \
            serve("vllm", n=1, zero_latency=True) as vl, \
            RolloutController(sglang=sg.addresses, vllm=vl.addresses) as ctl:
        wf = SingleTurnWorkflow(exact_match_reward,
                                GenerationConfig(n_samples=4, max_new_tokens=32))
        results = await ctl.rollout_batch_async(PROBLEMS[:60], wf)
    groups = [r.trajectory["rewards"] for r in results if r.ok]
    assert len(groups) == 60
    rewards = [x for g in groups for x in g]
    assert 0.55 <= sum(rewards) / len(rewards) <= 0.85
    assert sum(len(set(g)) > 1 for g in groups) >= 15  # P(mixed group) ~ 0.74
