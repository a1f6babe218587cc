"""rollout_kit.analysis._agents: the per-turn views on a real agent rollout against the
simulator (server mode drifts under the think-dropping template, exact mode does not), and
their arithmetic on hand-built frames."""

from __future__ import annotations

import asyncio
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

import rollout_kit as rk
from rollout_kit import ConfigError, TraceSchemaError, analysis
from rollout_kit.agents import AgentWorkflow
from rollout_kit.analysis._agents import SPLIT_COLUMNS, TAIL_COLUMNS, TURN_COLUMNS
from rollout_kit.plotting import plot_timeline
from rollout_kit.sim import serve
from tests.agents.test_agent_client import DATA, agent, calculator, exact

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


async def _run(mode: str) -> Frames:
    wf = AgentWorkflow(agent, exact, n_samples=2, tools={"calculator": calculator},
                       token_mode=mode, template="drop_think")  # type: ignore[arg-type]
    async with serve("vllm", n=1, zero_latency=True, chat_template="drop_think") as cluster:
        ctl = rk.RolloutController(servers={"vllm-chat": cluster.addresses},
                                   engine_config=rk.EngineConfig(stream=True))
        try:
            results = await ctl.rollout_batch_async(DATA, wf)
            assert all(r.ok for r in results), [r.error for r in results]
            return ctl.traces(), ctl.sessions(), ctl.spans()
        finally:
            await ctl.close_async()


@pytest.fixture(scope="module")
def runs() -> dict[str, Frames]:
    """One small rollout per token mode: 2 tasks x 2 conversations x 2 turns each."""
    return {mode: asyncio.run(_run(mode)) for mode in ("server", "exact")}


# -- on a real rollout ---------------------------------------------------------------------

def test_turns_of_a_real_rollout(runs: dict[str, Frames]) -> None:
    _, sessions, spans = runs["server"]
    t = analysis.turns(sessions, spans)
    assert list(t.index.names) == ["task_id", "conversation", "turn"]
    assert tuple(t.columns) == TURN_COLUMNS
    assert len(t) == 8 and t.index.is_monotonic_increasing
    first, second = t.xs(0, level="turn"), t.xs(1, level="turn")
    assert (first["parent_turn"] == -1).all() and (second["parent_turn"] == 0).all()
    assert (first["tool_calls"] == 1).all() and (second["tool_calls"] == 0).all()
    # the calculator ran in the session of the turn that asked for it, and only there
    assert (first["tool_s"] > 0).all() and (second["tool_s"] == 0).all()
    assert t["tool_s"].to_numpy() == pytest.approx(
        analysis.turns(sessions)["tool_s"].to_numpy())  # one span each: spans == columns
    assert first["drift_at"].isna().all() and (second["drift_at"] > 0).all()
    assert (t["token_mode"] == "server").all() and (t["template"] == "drop_think").all()
    assert (t["status"] == "accepted").all() and (t["reward"] == 1.0).all()
    assert t["ttft_s"].notna().all()  # streamed calls
    # the session ids are the sessions frame's, each turn once
    assert sorted(t["session_id"]) == sorted(sessions.index.get_level_values("session_id"))
    halved = analysis.turns(sessions, spans, discount=0.5)
    assert (halved.xs(0, level="turn")["reward"] == 0.5).all()
    assert (halved.xs(1, level="turn")["reward"] == 1.0).all()


def test_drift_found_in_server_mode_and_fixed_in_exact_mode(runs: dict[str, Frames]) -> None:
    both = pd.concat([analysis.turns(s, sp) for _, s, sp in runs.values()])
    table = analysis.drift_table(both, by=("template", "token_mode"))
    assert list(table.columns) == ["turns", "checked", "drifted", "share", "first_drift_at",
                                   "median_drift_at", "token_mode"]
    server, fixed = table.loc[("drop_think", "server")], table.loc[("drop_think", "exact")]
    assert (server["turns"], server["checked"], server["drifted"]) == (8, 4, 4)
    assert server["share"] == 1.0 and server["first_drift_at"] > 0
    assert (fixed["checked"], fixed["drifted"], fixed["share"]) == (4, 0, 0.0)
    assert np.isnan(fixed["first_drift_at"]) and fixed["token_mode"] == "exact"
    per_task = analysis.drift_table(analysis.turns(runs["server"][1]))
    assert list(per_task.index) == [0, 1] and (per_task["drifted"] == 2).all()


def test_group_tail_of_a_real_rollout(runs: dict[str, Frames]) -> None:
    tasks, sessions, spans = runs["server"]
    tail = analysis.group_tail(tasks, sessions, spans)
    assert tuple(tail.columns[:len(TAIL_COLUMNS)]) == TAIL_COLUMNS
    assert list(tail.index) == list(tasks.index) and (tail["n"] == 2).all()
    assert (tail["status"] == "accepted").all()
    for tid, row in tail.iterrows():
        assert len(row["ends"]) == 2
        assert row["first_end"] == min(row["ends"]) and row["last_end"] == max(row["ends"])
        assert row["tail_s"] == pytest.approx(row["last_end"] - row["first_end"])
        assert row["ends"][row["slowest"]] == row["last_end"]
        # the reward phase runs after the last turn's session ended: spans move the end on
        assert row["last_end"] >= sessions.loc[tid, "end_ts"].max()
    assert (tail["last_end"] >= analysis.group_tail(tasks, sessions)["last_end"]).all()


def test_slowest_split_of_a_real_rollout(runs: dict[str, Frames]) -> None:
    _, sessions, spans = runs["server"]
    every = analysis.slowest_split(sessions, spans, k=100)
    assert tuple(every.columns) == SPLIT_COLUMNS and len(every) == 4
    assert list(every.index.names) == ["task_id", "conversation"]
    assert every["wall_s"].is_monotonic_decreasing
    assert (every["turns"] == 2).all() and (every["ttft_known"] == 2).all()
    assert (every["queue_s"] == 0).all()  # no server spans joined
    assert (every["tool_s"] > 0).all() and (every["reward_s"] > 0).all()
    parts = every[["queue_s", "prefill_s", "decode_s", "tool_s", "reward_s", "other_s"]]
    assert (parts >= 0).all().all()
    assert (parts.sum(axis=1) >= every["wall_s"] - 1e-9).all()  # == unless other_s clipped
    top = analysis.slowest_split(sessions, spans)
    assert len(top) == 1 and top.index[0] == every.index[0]
    # one task's group, as the notebook explains its slowest group
    tid = int(every.index[0][0])
    group = analysis.slowest_split(sessions.loc[[tid]], spans[spans["task_id"] == tid], k=4)
    assert set(group.index.get_level_values("task_id")) == {tid} and len(group) == 2


def test_timeline_draws_one_lane_per_conversation(runs: dict[str, Frames]) -> None:
    tasks, sessions, spans = runs["server"]
    ax = plot_timeline(spans, tasks=tasks.reset_index(), by="conversation", sessions=sessions)
    gids = {c.get_gid() for c in ax.collections}
    assert {"timeline:generate", "timeline:tool.calculator", "timeline:reward"} <= gids
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["task 0/c0", "task 0/c1", "task 1/c0", "task 1/c1"]
    assert ax.get_title() == "Latency timeline (4 conversations)"
    with pytest.raises(ConfigError, match="needs sessions="):
        plot_timeline(spans, by="conversation")
    with pytest.raises(ConfigError, match="needs the spans frame"):
        plot_timeline(tasks.reset_index(), by="conversation", sessions=sessions)


# -- on hand-built frames ------------------------------------------------------------------

def _sessions(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows).set_index(["task_id", "session_id"])


def test_drift_counts_by_hand() -> None:
    t = pd.DataFrame({
        "task_id": [0, 0, 0, 1, 1, 1, 1],
        "drift_at": [np.nan, -1, 5, np.nan, 7, 3, 9],
        "token_mode": ["server"] * 3 + ["server", "exact", "server", None]})
    d = analysis.drift_table(t, by="task_id")
    assert d.loc[0, ["turns", "checked", "drifted"]].tolist() == [3, 2, 1]
    assert d.loc[0, "share"] == 0.5 and d.loc[0, "first_drift_at"] == 5
    assert d.loc[1, ["turns", "checked", "drifted"]].tolist() == [4, 3, 3]
    assert d.loc[1, "first_drift_at"] == 3 and d.loc[1, "median_drift_at"] == 7
    assert d.loc[1, "token_mode"] == "exact,server"
    nothing = analysis.drift_table(pd.DataFrame({"g": ["a"], "drift_at": [np.nan]}), by="g")
    assert nothing.loc["a", "checked"] == 0 and np.isnan(nothing.loc["a", "share"])
    assert nothing.loc["a", "token_mode"] == ""
    with pytest.raises(TraceSchemaError, match="template"):
        analysis.drift_table(t, by="template")
    with pytest.raises(ConfigError, match="at least one"):
        analysis.drift_table(t, by=())


def test_tail_arithmetic_by_hand() -> None:
    tasks = pd.DataFrame({"status": ["accepted", "accepted", "failed"]},
                         index=pd.Index([0, 1, 2], name="task_id"))
    s = _sessions([
        # task 0: conversation 0 ends at 3.0 (its 2nd turn), conversation 1 at 4.5
        {"task_id": 0, "session_id": 0, "conversation": 0, "turn": 0, "start_ts": 0.0,
         "end_ts": 1.0},
        {"task_id": 0, "session_id": 1, "conversation": 1, "turn": 0, "start_ts": 0.0,
         "end_ts": 4.5},
        {"task_id": 0, "session_id": 2, "conversation": 0, "turn": 1, "start_ts": 2.0,
         "end_ts": 3.0},
        # task 1: one conversation, one turn still open
        {"task_id": 1, "session_id": 3, "conversation": 0, "turn": 0, "start_ts": 0.0,
         "end_ts": 2.0},
        {"task_id": 1, "session_id": 4, "conversation": 0, "turn": 1, "start_ts": 2.5,
         "end_ts": np.nan},
        # not a chat call: left out
        {"task_id": 2, "session_id": 5, "conversation": np.nan, "turn": np.nan,
         "start_ts": 0.0, "end_ts": 9.0}])
    tail = analysis.group_tail(tasks, s)
    assert tail.loc[0, "ends"] == [3.0, 4.5]
    assert (tail.loc[0, "first_end"], tail.loc[0, "last_end"]) == (3.0, 4.5)
    assert tail.loc[0, "tail_s"] == 1.5 and tail.loc[0, "slowest"] == 1
    assert tail.loc[1, "n"] == 1 and np.isnan(tail.loc[1, "tail_s"])  # not ended
    assert pd.isna(tail.loc[1, "slowest"])
    assert tail.loc[2, "n"] == 0 and tail.loc[2, "status"] == "failed"
    # a span after the session's end (the reward) moves conversation 0's end to 5.0
    spans = pd.DataFrame({"task_id": [0], "session_id": [2], "phase": ["reward"],
                          "start": [3.0], "end": [5.0], "duration": [2.0]})
    tail = analysis.group_tail(tasks, s, spans)
    assert tail.loc[0, "ends"] == [5.0, 4.5] and tail.loc[0, "slowest"] == 0
    assert tail.loc[0, "tail_s"] == 0.5


def test_split_measured_and_derived_by_hand() -> None:
    base = {"task_id": 0, "conversation": 0, "status": "accepted"}
    s = _sessions([
        {**base, "session_id": 0, "turn": 0, "start_ts": 0.0, "end_ts": 1.0,
         "generate_s": 1.0, "ttft_s": 0.25, "tool.calc_s": 0.5, "reward_s": 0.0},
        {**base, "session_id": 1, "turn": 1, "start_ts": 2.0, "end_ts": 3.0,
         "generate_s": 1.0, "ttft_s": np.nan, "tool.calc_s": 0.0, "reward_s": 0.25}])
    split = analysis.slowest_split(s)
    row = split.loc[(0, 0)]
    assert row["wall_s"] == 3.0 and row["turns"] == 2 and row["ttft_known"] == 1
    assert (row["queue_s"], row["prefill_s"], row["decode_s"]) == (0.0, 0.25, 1.75)
    assert (row["tool_s"], row["reward_s"], row["other_s"]) == (0.5, 0.25, 0.25)
    # the server's own numbers, when joined, replace the derived ones
    joined = s.assign(server_queue_s=[0.125, 0.0], server_prefill_s=[0.125, 0.25],
                      server_decode_s=[0.5, 0.5])
    row = analysis.slowest_split(joined).loc[(0, 0)]
    assert (row["queue_s"], row["prefill_s"], row["decode_s"]) == (0.125, 0.375, 1.0)
    assert row["other_s"] == 3.0 - 0.125 - 0.375 - 1.0 - 0.5 - 0.25
    # the server's queue alone: the prefill is derived as the client's TTFT minus that queue
    queued = s.assign(server_queue_s=[0.125, 0.0])
    row = analysis.slowest_split(queued).loc[(0, 0)]
    assert (row["queue_s"], row["prefill_s"], row["decode_s"]) == (0.125, 0.125, 1.75)
    assert row["other_s"] == 3.0 - 0.125 - 0.125 - 1.75 - 0.5 - 0.25
    with pytest.raises(ConfigError, match="k must be"):
        analysis.slowest_split(s, k=0)


def test_turns_tool_columns_and_refusals_by_hand() -> None:
    s = _sessions([
        {"task_id": 0, "session_id": 0, "conversation": 0, "turn": 0, "start_ts": 0.0,
         "end_ts": 1.0, "tool.a_s": 0.25, "tool.b_s": 0.5, "reward": 1.0},
        {"task_id": 0, "session_id": 1, "conversation": np.nan, "turn": np.nan,
         "start_ts": 0.0, "end_ts": 1.0, "tool.a_s": 9.0, "tool.b_s": 9.0, "reward": 9.0}])
    t = analysis.turns(s)
    assert len(t) == 1 and t["tool_s"].iloc[0] == 0.75
    assert t["template"].isna().all() and t["drift_at"].isna().all()  # absent: NA
    with pytest.raises(TraceSchemaError, match="not the sessions of an agent rollout"):
        analysis.turns(s.drop(columns=["turn"]))
    with pytest.raises(TraceSchemaError, match="DataFrame"):
        analysis.turns([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="discount"):
        analysis.turns(s, discount=0)
    empty = analysis.turns(s.iloc[1:])
    assert empty.empty and tuple(empty.columns) == TURN_COLUMNS
