"""Conversations as load: the datasets (tiny files built here), user-centric timing on the
simulator's chat endpoint with prefix-cache details on, the turns frame, its metrics and
plots, and every bad input a one-line DatasetError naming the file and line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rollout_kit as rk
from rollout_kit import ConfigError, DatasetError, EngineConfig, ExecutorConfig
from rollout_kit.load import (
    Arrivals,
    Conversation,
    ConversationTurn,
    LoadSpec,
    ThinkTime,
    load_dataset,
    read_agent_trace,
    read_multiturn_json,
    read_sharegpt_conversations,
    run_conversations_async,
    synthetic_conversations,
    turn_table,
    with_think_time,
)
from rollout_kit.sim import serve

pytestmark = pytest.mark.timeout(120)

SHAREGPT = [
    {"id": "a", "conversations": [
        {"from": "system", "value": "You are terse."},
        {"from": "human", "value": "What is the capital of France?"},
        {"from": "gpt", "value": "Paris."},
        {"from": "human", "value": "And of Italy?"},
        {"from": "gpt", "value": "Rome, the eternal city."},
    ]},
    {"id": "b", "conversations": [
        {"from": "gpt", "value": "(a leading reply, skipped)"},
        {"from": "human", "value": "Hello there"},
        {"from": "gpt", "value": "Hi!"},
    ]},
    {"id": "empty", "conversations": []},
]
MULTI_TURN = [
    {"id": "c1", "messages": [
        {"role": "user", "content": "Tell me about tea."},
        {"role": "assistant", "content": "Tea is a drink."},
        {"role": "user", "content": "Green or black?"},
        {"role": "assistant", "content": "Both are good."},
        {"role": "user", "content": "Thanks"},
    ]},
]


def _json(tmp_path: Path, name: str, data: Any, indent: int | None = 2) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data, indent=indent))
    return p


def _jsonl(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


# -- datasets ---------------------------------------------------------------------------------

def test_sharegpt_conversations_keep_every_turn(tmp_path: Path) -> None:
    path = _json(tmp_path, "sg.json", SHAREGPT)
    convs = read_sharegpt_conversations(path, shuffle=False)
    assert [c.id for c in convs] == ["a", "b"]  # the empty entry is skipped
    a, b = convs
    assert a.system == "You are terse."
    assert [t.content for t in a.turns] == ["What is the capital of France?", "And of Italy?"]
    # the reply's tokens (byte counting) are the turn's output length
    assert [t.output_len for t in a.turns] == [len("Paris."), len("Rome, the eternal city.")]
    assert b.num_turns == 1 and b.turns[0].content == "Hello there"
    assert read_sharegpt_conversations(path, shuffle=False, max_turns=1)[0].num_turns == 1
    assert [c.id for c in read_sharegpt_conversations(path, min_turns=2)] == ["a"]
    same = load_dataset("sharegpt_multiturn", path, shuffle=False, output_len=7)
    assert {t.output_len for c in same for t in c.turns} == {7}


def test_vllm_multi_turn_json(tmp_path: Path) -> None:
    path = _json(tmp_path, "mt.json", MULTI_TURN)
    [conv] = read_multiturn_json(path)
    assert conv.id == "c1" and conv.num_turns == 3 and conv.system is None
    assert [t.output_len for t in conv.turns] == [len("Tea is a drink."),
                                                  len("Both are good."), None]
    assert load_dataset("multi-turn", path)[0] == conv


def test_synthetic_conversations_share_the_system_prompt_and_draw_think_times() -> None:
    convs = synthetic_conversations(5, turns=3, input_len=40, output_len=6,
                                    system_prompt_len=32, think_time="uniform:0.5,1.5",
                                    seed=1)
    assert len(convs) == 5 and all(c.num_turns == 3 and c.ignore_eos for c in convs)
    assert len({c.system for c in convs}) == 1 and len(convs[0].system or "") == 32
    assert all(len(t.content) == 40 and t.output_len == 6 for c in convs for t in c.turns)
    thinks = [t.think_s for c in convs for t in c.turns]
    assert all(c.turns[0].think_s == 0 for c in convs)
    assert all(0.5 <= t.think_s <= 1.5 for c in convs for t in c.turns[1:])
    assert convs == synthetic_conversations(5, turns=3, input_len=40, output_len=6,
                                            system_prompt_len=32,
                                            think_time="uniform:0.5,1.5", seed=1)
    assert thinks != [t.think_s for c in synthetic_conversations(
        5, turns=3, input_len=40, output_len=6, think_time="uniform:0.5,1.5", seed=2)
        for t in c.turns]
    ranged = synthetic_conversations(20, turns=2, input_len=100, output_len=10,
                                     range_ratio=0.5)
    assert {len(t.content) for c in ranged for t in c.turns} <= set(range(50, 151))
    assert load_dataset("synthetic_multiturn", num=2, turns=2)[0].num_turns == 2


def test_think_time_forms() -> None:
    rng = np.random.default_rng(0)
    assert ThinkTime.parse(None).sample(rng, 3).tolist() == [0.0, 0.0, 0.0]
    assert ThinkTime.parse(2).sample(rng, 2).tolist() == [2.0, 2.0]
    assert ThinkTime.parse("2.5") == ThinkTime("constant", (2.5,))
    assert ThinkTime.parse({"distribution": "uniform", "min": 1, "max": 3}) == \
        ThinkTime.parse("uniform:1,3")
    big = np.random.default_rng(1)
    assert abs(ThinkTime.parse("exponential:2").sample(big, 20000).mean() - 2) < 0.1
    assert abs(ThinkTime.parse("lognormal:2,0.5").sample(big, 20000).mean() - 2) < 0.1
    convs = with_think_time(synthetic_conversations(2, turns=3, input_len=8, output_len=2),
                            "constant:0.25")
    assert [t.think_s for t in convs[0].turns] == [0.0, 0.25, 0.25]


def test_agent_trace_sessions_tool_turns_and_shared_prefixes(tmp_path: Path) -> None:
    rows = [
        {"session_id": "s1", "timestamp": 1000, "input_length": 40, "output_length": 5,
         "hash_ids": [1, 2]},
        {"session_id": "s2", "timestamp": 1500, "input_length": 40, "output_length": 4,
         "hash_ids": [1, 3]},
        {"session_id": "s1", "timestamp": 3000, "input_length": 70, "output_length": 6,
         "hash_ids": [1, 2, 4], "role": "tool", "think_ms": 800},
        {"session_id": "s1", "timestamp": 6000, "input_length": 90, "output_length": 3},
    ]
    path = _jsonl(tmp_path, "agent.jsonl", rows)
    s1, s2 = read_agent_trace(path, block_size=16, time_scale=0.5)
    assert (s1.id, s2.id) == ("s1", "s2")
    assert (s1.timestamp, s2.timestamp) == (0.0, 0.25)
    assert [t.role for t in s1.turns] == ["user", "tool", "user"]
    assert [t.output_len for t in s1.turns] == [5, 6, 3]
    # later turns add what the trace adds after the history: 70 - 40 - 5, 90 - 70 - 6
    assert [t.input_len for t in s1.turns] == [40, 25, 14]
    # think: think_ms when given, else the timestamp gap; scaled
    assert [t.think_s for t in s1.turns] == [0.0, 0.4, 1.5]
    # hash id 1's block is the same text in both sessions; 2 and 3 differ
    a, b = s1.turns[0].content, s2.turns[0].content
    assert len(a) == 40 and a[:16] == b[:16] and a[16:32] != b[16:32]
    assert s1.ignore_eos and load_dataset("agent_trace", path, block_size=16)[0] == \
        read_agent_trace(path, block_size=16)[0]


# -- bad input: one line, file and line ---------------------------------------------------

def _one_line(exc: pytest.ExceptionInfo[DatasetError], where: str, what: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    assert msg.startswith(where), msg
    assert what in msg, msg


def test_a_conversation_with_no_user_turn(tmp_path: Path) -> None:
    bad = [SHAREGPT[0], {"id": "x", "conversations": [
        {"from": "system", "value": "s"}, {"from": "gpt", "value": "only a reply"}]}]
    path = _json(tmp_path, "nouser.json", bad)
    with pytest.raises(DatasetError) as exc:
        read_sharegpt_conversations(path)
    starts = [i for i, ln in enumerate(json.dumps(bad, indent=2).splitlines()) if ln == "  {"]
    line = starts[1] + 1  # the second entry's opening brace
    _one_line(exc, f"{path}:{line}: ", "no user turn")
    mt = _json(tmp_path, "nouser-mt.json", [{"id": "z", "messages": [
        {"role": "assistant", "content": "hi"}]}], indent=None)
    with pytest.raises(DatasetError) as exc:
        read_multiturn_json(mt)
    _one_line(exc, f"{mt}:1: ", "no user turn")


def test_a_turn_with_an_unknown_role(tmp_path: Path) -> None:
    path = tmp_path / "role.json"
    path.write_text('[\n {"id": "ok", "messages": [{"role": "user", "content": "q"}]},\n'
                    ' {"id": "bad", "messages": [{"role": "user", "content": "q"},\n'
                    '   {"role": "robot", "content": "beep"}]}\n]\n')
    with pytest.raises(DatasetError) as exc:
        read_multiturn_json(path)
    _one_line(exc, f"{path}:3: ", "message 2 has an unknown role 'robot'")
    sg = _json(tmp_path, "role-sg.json", [{"conversations": [
        {"from": "human", "value": "q"}, {"from": "alien", "value": "?"}]}], indent=None)
    with pytest.raises(DatasetError) as exc:
        read_sharegpt_conversations(sg)
    _one_line(exc, f"{sg}:1: ", "unknown from 'alien'")
    trace = _jsonl(tmp_path, "role.jsonl", [
        {"session_id": 1, "timestamp": 0, "input_length": 4, "output_length": 2},
        {"session_id": 1, "timestamp": 5, "input_length": 9, "output_length": 2,
         "role": "narrator"}])
    with pytest.raises(DatasetError) as exc:
        read_agent_trace(trace)
    _one_line(exc, f"{trace}:2: ", "unknown role 'narrator'")


@pytest.mark.parametrize("spec", ["-1", "constant:-0.5", "uniform:-1,2", "exponential:-3",
                                  "lognormal:2,-0.5", {"distribution": "uniform", "min": -2,
                                                       "max": 1}])
def test_a_think_time_distribution_with_a_negative_value(spec: Any) -> None:
    with pytest.raises(DatasetError, match="negative") as exc:
        ThinkTime.parse(spec)
    assert "\n" not in str(exc.value)
    with pytest.raises(DatasetError, match="negative"):
        synthetic_conversations(2, think_time=spec)


def test_a_negative_think_time_in_a_file(tmp_path: Path) -> None:
    trace = _jsonl(tmp_path, "think.jsonl", [
        {"session_id": 1, "timestamp": 0, "input_length": 4, "output_length": 2},
        {"session_id": 1, "timestamp": 5, "input_length": 9, "output_length": 2,
         "think_ms": -10}])
    with pytest.raises(DatasetError) as exc:
        read_agent_trace(trace)
    _one_line(exc, f"{trace}:2: ", "'think_ms' is negative")
    path = _json(tmp_path, "ok.json", MULTI_TURN)
    with pytest.raises(DatasetError, match="negative"):
        read_multiturn_json(path, think_time="uniform:-1,1")


def test_other_bad_conversation_input(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="expected a JSON list"):
        read_multiturn_json(_json(tmp_path, "obj.json", {"messages": []}))
    with pytest.raises(DatasetError, match=r":2: missing key 'messages'"):
        read_multiturn_json(_json(tmp_path, "nokey.json", [{"id": 1}]))
    with pytest.raises(DatasetError, match="missing key 'session_id'"):
        read_agent_trace(_jsonl(tmp_path, "nosess.jsonl", [
            {"timestamp": 0, "input_length": 4, "output_length": 2}]))
    with pytest.raises(DatasetError, match="starts with a tool turn"):
        read_agent_trace(_jsonl(tmp_path, "tool1.jsonl", [
            {"session_id": 1, "timestamp": 0, "input_length": 4, "output_length": 2,
             "role": "tool"}]))
    with pytest.raises(DatasetError, match="no such dataset file"):
        read_sharegpt_conversations(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="role"):
        ConversationTurn(content="x", role="system")
    with pytest.raises(ConfigError, match="starts with a user turn"):
        Conversation(turns=(ConversationTurn(content="x", role="tool"),))


# -- runs on the simulator --------------------------------------------------------------------

async def _run(convs: list[Conversation], spec: LoadSpec, **sim: Any) -> tuple[Any, Any]:
    async with serve("vllm", n=1, **{"zero_latency": True, "prompt_tokens_details": True,
                                     **sim}) as cluster:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses},
                                   engine_config=EngineConfig(stream=True),
                                   executor_config=ExecutorConfig(max_concurrent_rollouts=512))
        await ctl.initialize_async()
        try:
            run = await run_conversations_async(ctl, convs, spec)
            return run, ctl.sessions()
        finally:
            await ctl.close_async()


async def test_later_turns_report_cached_tokens() -> None:
    convs = synthetic_conversations(6, turns=3, input_len=200, output_len=8,
                                    system_prompt_len=64, think_time=0.01)
    run, sessions = await _run(convs, LoadSpec(arrivals=Arrivals(rate=50.0)))
    t = run.turns
    assert len(t) == 18 and (t["status"] == "accepted").all()
    later = t[t.index.get_level_values("turn") > 0]
    assert (later["cached_tokens"] > 0).all(), later["cached_tokens"]
    # the history grows, and the cache serves it
    by = run.by_turn()
    assert by.index.tolist() == [0, 1, 2]
    assert by["mean_prompt_tokens"].is_monotonic_increasing
    assert by.loc[2, "cache_hit_ratio"] > by.loc[1, "cache_hit_ratio"] > 0.5
    # the very first turn of the run has nothing cached
    assert t.loc[(t.index.get_level_values("task_id").min(), 0), "cached_tokens"] == 0
    # one task per conversation, one traced session per turn, TTFT measured per turn
    assert len(run.frame) == 6 and (run.frame["samples"] == 3).all()
    assert sorted(sessions["turn"].tolist()) == [0] * 6 + [1] * 6 + [2] * 6
    assert (sessions["cached_tokens"].to_numpy()[sessions["turn"].to_numpy() > 0] > 0).all()
    assert np.isfinite(t["ttft_s"]).all() and (t["ttft_s"] > 0).all()
    assert set(t["session_id"]) == set(sessions.index.get_level_values("session_id"))
    m = run.metrics(goodput="ttft:60000")
    assert m["completed"] == 18 and m["completed_conversations"] == 6
    assert m["conversation_goodput"] == pytest.approx(m["conversation_throughput"])
    assert m["turns_per_conversation"] == 3.0 and m["cache_hit_ratio"] > 0.5
    assert math.isfinite(m["median_conversation_ms"])
    assert run.metrics(goodput="ttft:0")["conversation_goodput"] == 0.0


async def test_conversation_arrivals_are_paced_within_2_percent() -> None:
    rate, n = 100.0, 300  # 3 s of arrivals; two turns each, 20 ms apart
    convs = synthetic_conversations(n, turns=2, input_len=32, output_len=4,
                                    think_time=0.02)
    arrivals = Arrivals(rate=rate, seed=7)
    run, _ = await _run(convs, LoadSpec(arrivals=arrivals))
    frame, t = run.frame, run.turns
    assert (frame["status"] == "accepted").all() and (frame["turns_done"] == 2).all()
    # conversations are due on the Arrivals schedule, exactly
    np.testing.assert_array_equal(np.sort(frame["scheduled_s"].to_numpy()),
                                  arrivals.offsets(n))
    first = t.xs(0, level="turn")
    np.testing.assert_array_equal(first["scheduled_s"].to_numpy(),
                                  frame.loc[first.index, "scheduled_s"].to_numpy())
    # each next turn is due its think time after the previous answer, and never sent early
    second = t.xs(1, level="turn")
    np.testing.assert_allclose(second["scheduled_s"].to_numpy(),
                               first.loc[second.index, "done_s"].to_numpy() + 0.02,
                               rtol=0, atol=1e-9)
    assert (t["send_lag_s"] >= -1e-9).all()
    assert run.offered_rate == pytest.approx(rate)
    assert abs(run.achieved_rate / run.offered_rate - 1) < 0.02, (run.achieved_rate,
                                                                  run.offered_rate)


async def test_max_concurrency_counts_conversations() -> None:
    convs = synthetic_conversations(8, turns=3, input_len=16, output_len=2, think_time=0.03)
    run, _ = await _run(convs, LoadSpec(max_concurrency=2))
    t = run.turns
    spans = t.groupby(level="task_id").agg(start=("sent_s", "min"), end=("done_s", "max"))
    events = sorted([(s, 1) for s in spans["start"]] + [(e, -1) for e in spans["end"]],
                    key=lambda ev: (ev[0], ev[1]))
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak == 2  # two conversations at a time, though turns think in between
    assert (run.frame["queue_wait_s"] > 0).sum() >= 5
    first = t.xs(0, level="turn")
    assert (first["queue_wait_s"] == run.frame.loc[first.index, "queue_wait_s"]).all()


async def test_agent_trace_tool_turns_run_on_their_times(tmp_path: Path) -> None:
    rows = [{"session_id": f"s{i}", "timestamp": 100 * i, "input_length": 48,
             "output_length": 4, "hash_ids": [1, 2 + i]} for i in range(3)]
    rows += [{"session_id": f"s{i}", "timestamp": 100 * i + 50, "input_length": 64,
              "output_length": 4, "role": "tool", "think_ms": 10} for i in range(3)]
    convs = read_agent_trace(_jsonl(tmp_path, "a.jsonl", rows), block_size=16)
    spec = LoadSpec(arrivals=Arrivals.schedule(c.timestamp or 0.0 for c in convs))
    run, _ = await _run(convs, spec)
    assert (run.turns["status"] == "accepted").all(), run.turns[["status", "reason"]]
    assert run.frame["scheduled_s"].tolist() == [0.0, 0.1, 0.2]
    assert run.turns["role"].tolist().count("tool") == 3
    # the shared hash block is a prefix the cache serves to the later sessions' first turns
    first = run.turns.xs(0, level="turn")
    assert (first["cached_tokens"].iloc[1:] > 0).all()


async def test_a_server_that_reports_no_cached_tokens_gives_nan_not_0() -> None:
    """Not reported (vLLM without --enable-prompt-tokens-details) is not "no hits"."""
    convs = synthetic_conversations(3, turns=2, input_len=100, output_len=4)
    run, _ = await _run(convs, LoadSpec(arrivals=Arrivals(rate=50.0)),
                        prompt_tokens_details=False)
    t = run.turns
    assert (t["status"] == "accepted").all() and (t["prompt_tokens"] > 0).all()
    assert t["cache_hit_ratio"].isna().all() and (t["cached_tokens"] == 0).all()
    assert math.isnan(run.metrics()["cache_hit_ratio"])
    assert run.by_turn()["cache_hit_ratio"].isna().all()
    assert run.by_turn()["mean_cached_tokens"].isna().all()


async def test_items_that_are_not_conversations_are_refused() -> None:
    with pytest.raises(ConfigError, match="a Conversation is needed"):
        await run_conversations_async(None, ["hello"])  # type: ignore[arg-type]


# -- the per-turn table and plots ------------------------------------------------------------

def _turns_frame() -> pd.DataFrame:
    idx = pd.MultiIndex.from_tuples([(1, 0), (1, 1), (2, 0), (2, 1), (3, 0)],
                                    names=["task_id", "turn"])
    return pd.DataFrame({
        "status": ["accepted"] * 4 + ["failed"], "warmup": [False] * 5,
        "prompt_tokens": [100, 220, 100, 220, 0], "cached_tokens": [0, 96, 48, 208, 0],
        "cache_hit_ratio": [0.0, 96 / 220, 0.48, 208 / 220, math.nan],
        "ttft_s": [0.04, 0.02, 0.03, 0.01, math.nan], "e2el_s": [0.1, 0.08, 0.09, 0.05, math.nan],
        "think_s": [0.0, 1.0, 0.0, 1.0, 0.0], "send_lag_s": [0.001] * 5}, index=idx)


def test_turn_table_groups_by_turn_index() -> None:
    by = turn_table(_turns_frame())
    assert by["turns"].tolist() == [2, 2] and by["failed"].tolist() == [1, 0]
    assert by.loc[0, "cache_hit_ratio"] == pytest.approx(48 / 200)
    assert by.loc[1, "cache_hit_ratio"] == pytest.approx(304 / 440)
    assert by.loc[1, "median_ttft_ms"] == pytest.approx(15.0)
    with pytest.raises(ConfigError, match="turns frame"):
        turn_table(pd.DataFrame({"x": [1]}))


def test_plots_of_ttft_by_turn_and_against_cache_hits() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from rollout_kit.plotting import (
        conversation_figure,
        plot_ttft_by_turn,
        plot_ttft_vs_cache_hit,
    )

    ax = plot_ttft_by_turn(_turns_frame())
    median = next(ln for ln in ax.get_lines() if ln.get_gid() == "ttft:median")
    assert median.get_xdata().tolist() == [0.0, 1.0]
    assert median.get_ydata().tolist() == pytest.approx([35.0, 15.0])
    ax = plot_ttft_vs_cache_hit(_turns_frame())
    [pts] = [c for c in ax.collections if c.get_gid() == "ttft_vs_cache"]
    assert len(pts.get_offsets()) == 4
    assert "no data" in plot_ttft_by_turn(pd.DataFrame()).get_title() + "".join(
        t.get_text() for t in plot_ttft_by_turn(pd.DataFrame()).texts)
    fig = conversation_figure(_turns_frame(), pyplot=False)
    assert len(fig.axes) >= 2
