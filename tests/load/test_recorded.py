"""A recorded run replayed as load: a real run on the simulator becomes a schedule.

The arrival offsets are checked on the schedule (never on timings), the samples and their
lengths on the replay's own traces; AReaL's session trace and trajectory dump are small
files written here after the schema in ``shared/reference/areal.md`` (§1.7, #785).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rollout_kit import (
    ConfigError,
    DatasetError,
    GenerationConfig,
    ModelRequest,
    RolloutController,
    SingleTurnWorkflow,
)
from rollout_kit.load import (
    Arrivals,
    GenerateRequest,
    LoadRequest,
    LoadRun,
    LoadSpec,
    SkippedTasksWarning,
    from_traces,
    read_areal_sessions,
    run_load_async,
)
from rollout_kit.sim import SimCluster
from rollout_kit.testing import fast_engine_config
from rollout_kit.testing._plugin import ControllerFactory
from rollout_kit.tracing import (
    TornTraceWarning,
    Traces,
    load_dump,
    trace_phase,
    trace_session,
)

ENGINE = fast_engine_config(stream=True)


class Reject:
    """Rejects its task before generating anything: a task without sessions."""

    async def arun_episode(self, engine: Any, data: Any) -> None:
        return None


class Lengths:
    """Samples of one prompt, sample ``i`` exactly ``lens[i]`` tokens long (distinct lengths
    per sample, which a replay must carry one by one)."""

    def __init__(self, lens: list[int]) -> None:
        self.lens = lens

    async def one(self, engine: Any, n: int) -> int:
        with trace_session():
            with trace_phase("generate"):
                g = GenerationConfig(max_new_tokens=n, ignore_eos=True)
                resp = await engine.generate_async(ModelRequest(text="Count:", gconfig=g))
        return int(resp.output_len)

    async def arun_episode(self, engine: Any, data: Any) -> list[int]:
        import asyncio

        return list(await asyncio.gather(*(self.one(engine, n) for n in self.lens)))


def _reward(*args: Any, **kwargs: Any) -> float:
    return 1.0


async def _record(ctl: RolloutController, waves: int = 3) -> Traces:
    """A small RL-like run: waves of tasks with 1 or 3 samples and a rejected task each."""
    one = SingleTurnWorkflow(_reward, GenerationConfig(n_samples=1, max_new_tokens=24))
    three = SingleTurnWorkflow(_reward, GenerationConfig(n_samples=3, max_new_tokens=24))
    for wave in range(waves):
        ids = [ctl.submit({"prompt": f"What is {wave}+{i}?"}, three if i else one)
               for i in range(2)]
        ids.append(ctl.submit("-", Lengths([3 + wave, 9, 5])))
        ids.append(ctl.submit("-", Reject()))
        results = await ctl.wait_async(len(ids))  # the next wave arrives later
        assert sorted(r.status for r in results) == ["accepted"] * 3 + ["rejected"]
    return ctl.tracer.frames()


def _schedule(reqs: list[LoadRequest]) -> LoadSpec:
    return LoadSpec(arrivals=Arrivals.schedule(r.timestamp or 0.0 for r in reqs))


def _lens(sessions: pd.DataFrame, task_id: int, column: str = "completion_tokens"
          ) -> list[int]:
    return [int(x) for x in sessions.loc[task_id][column]]  # in session order


@pytest.fixture
def ctl(sim_vllm: SimCluster, rollout_controller: ControllerFactory) -> RolloutController:
    return rollout_controller(vllm=sim_vllm.urls, engine_config=ENGINE)


# ------------------------------------------------------------------ from_traces, lengths
async def test_a_recorded_run_replays_as_load_with_its_arrivals_samples_and_lengths(
        ctl: RolloutController) -> None:
    rec = await _record(ctl)
    with pytest.warns(SkippedTasksWarning, match=r"3 task.s. without a session"):
        reqs = from_traces(rec, prompts="lengths", time_scale=0.5)

    # the schedule: one request per task with sessions, its arrival offset time-scaled
    tasks = rec.tasks[rec.tasks["n_sessions"] > 0].sort_values("submit_ts", kind="stable")
    assert [r.group for r in reqs] == list(tasks.index)  # the original task ids
    submit = tasks["submit_ts"].to_numpy()
    assert [r.timestamp for r in reqs] == pytest.approx(list((submit - submit[0]) * 0.5),
                                                        abs=1e-12)
    assert reqs[-1].timestamp is not None and reqs[-1].timestamp > 0  # waves came later
    for r in reqs:
        assert r.group is not None
        lens = _lens(rec.sessions, r.group)
        assert r.samples == len(lens) == tasks.loc[r.group, "n_sessions"]
        assert (r.output_lens or (r.output_len,)) == tuple(lens) and r.output_len == max(lens)
        assert r.ignore_eos and r.prompt_ids is not None
        assert r.prompt_len == len(r.prompt_ids) == _lens(rec.sessions, r.group,
                                                          "prompt_tokens")[0]
    assert {r.samples for r in reqs} == {1, 3}
    assert any(len(set(r.output_lens or ())) == 3 for r in reqs)  # distinct per sample
    assert len({r.prompt_ids for r in reqs}) == len(reqs)  # a prompt per task, seeded
    again = from_traces(rec, prompts="lengths", time_scale=0.5, statuses="accepted")
    assert again == reqs  # the same seed: the same prompts

    # the replay: the schedule as given, n generate requests per task of the same lengths
    run = await run_load_async(ctl, reqs, _schedule(reqs))
    assert isinstance(run, LoadRun) and not run.interrupted
    df = run.frame
    np.testing.assert_array_equal(df["scheduled_s"].to_numpy(),
                                  [r.timestamp for r in reqs])
    assert (df["status"] == "accepted").all()
    now = ctl.tracer.frames().sessions
    for tid, row in df.iterrows():
        orig = reqs[int(row["request_index"])]
        assert orig.group is not None
        assert row["samples"] == orig.samples
        assert _lens(now, int(tid)) == _lens(rec.sessions, orig.group)
        assert _lens(now, int(tid), "prompt_tokens") == _lens(rec.sessions, orig.group,
                                                               "prompt_tokens")
        assert row["output_tokens"] == sum(_lens(rec.sessions, orig.group))


async def test_statuses_num_and_trace_files(tmp_path: Path, sim_vllm: SimCluster,
                                            rollout_controller: ControllerFactory) -> None:
    path = tmp_path / "traces.jsonl"
    ctl = rollout_controller(vllm=sim_vllm.urls, engine_config=ENGINE, trace_path=path)
    rec = await _record(ctl, waves=2)
    ctl.tracer.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedTasksWarning)  # nothing left out
        accepted = from_traces(rec, prompts="lengths", statuses=["accepted"])
        assert len(accepted) == 6
        assert from_traces(rec, prompts="lengths", statuses="accepted", num=2) == accepted[:2]
        # the same run read back from its trace file
        with pytest.warns(SkippedTasksWarning):
            read = from_traces(path, prompts="lengths")
    assert [r.group for r in read] == [r.group for r in accepted]
    assert [(r.samples, r.output_lens, r.prompt_ids) for r in read] == [
        (r.samples, r.output_lens, r.prompt_ids) for r in accepted]
    assert [r.timestamp for r in read] == pytest.approx([r.timestamp for r in accepted],
                                                        abs=1e-6)
    with pytest.raises(DatasetError, match="no recorded task to replay"), \
            pytest.warns(SkippedTasksWarning):
        from_traces(rec, prompts="lengths", statuses="rejected")


# ------------------------------------------------------------------ from_traces, same prompts
def _dump(rec: Traces) -> pd.DataFrame:
    """A hand-made trajectory dump: one call per session, a second call in one session, and
    one session recorded as text only."""
    rows: list[dict[str, Any]] = []
    for k, (tid, sid) in enumerate(rec.sessions.index):
        rows.append({"task_id": tid, "session_id": sid, "call": 0,
                     "prompt_ids": [10 + k, 20 + k, 30 + k, 40], "prompt_text": None})
    rows.append({"task_id": rows[0]["task_id"], "session_id": rows[0]["session_id"],
                 "call": 1, "prompt_ids": [99] * 9, "prompt_text": None})  # a later turn
    rows[1]["prompt_ids"], rows[1]["prompt_text"] = [], "Say hello."
    return pd.DataFrame(rows).set_index(["task_id", "session_id", "call"])


async def test_same_prompts_come_from_the_dump(ctl: RolloutController) -> None:
    rec = await _record(ctl, waves=1)
    dump = _dump(rec)
    with pytest.warns(SkippedTasksWarning):
        reqs = from_traces(rec, dump=dump, time_scale=2.0)
    first = {tid: sid for tid, sid in reversed(list(rec.sessions.index))}  # first session
    text_task = int(dump.index[1][0])
    for r in reqs:
        assert r.group is not None
        want = dump.loc[(r.group, first[r.group], 0), "prompt_ids"]
        if r.group == text_task and not want:
            assert r.prompt == "Say hello." and r.prompt_ids is None
        else:
            assert r.prompt_ids == tuple(want) and r.prompt_len == 4  # the first call
        assert (r.output_lens or (r.output_len,)) == tuple(_lens(rec.sessions, r.group))
    assert [r.prompt for r in reqs if r.prompt is not None] == ["Say hello."]
    run = await run_load_async(ctl, reqs, _schedule(reqs))
    assert (run.frame["status"] == "accepted").all()
    now = ctl.tracer.frames().sessions
    for tid, row in run.frame.iterrows():
        orig = reqs[int(row["request_index"])]
        if orig.prompt_ids is not None:  # the recorded ids, exactly, in every sample
            assert set(_lens(now, int(tid), "prompt_tokens")) == {4}
        assert orig.group is not None
        assert _lens(now, int(tid)) == _lens(rec.sessions, orig.group)


async def test_same_prompts_from_a_run_s_own_trajectory_dump(
        tmp_path: Path, sim_vllm: SimCluster, rollout_controller: ControllerFactory) -> None:
    ctl = rollout_controller(vllm=sim_vllm.urls, engine_config=ENGINE, dump=tmp_path)
    rec = await _record(ctl, waves=1)
    ctl.tracer.flush()
    dump = load_dump(tmp_path)
    with pytest.warns(SkippedTasksWarning):
        reqs = from_traces(rec, dump=dump)
    for r in reqs:
        assert r.group is not None
        sid = int(rec.sessions.loc[r.group].index[0])
        assert r.prompt_ids == tuple(dump.loc[(r.group, sid, 0), "prompt_ids"])
        assert r.samples == len(_lens(rec.sessions, r.group))


async def test_from_traces_bad_input(ctl: RolloutController, tmp_path: Path) -> None:
    rec = await _record(ctl, waves=1)
    with pytest.raises(DatasetError, match=r"pass dump=.*prompts='lengths'"):
        from_traces(rec)
    dump = _dump(rec)
    with pytest.raises(DatasetError, match=r"indexed by .task_id, session_id, call."):
        from_traces(rec, dump=dump.reset_index(level="call"))
    with pytest.raises(DatasetError, match="must be a DataFrame"):
        from_traces(rec, dump={"prompt_ids": []})  # type: ignore[arg-type]
    tid, sid = (int(x) for x in rec.sessions.index[0])
    with pytest.raises(DatasetError, match=rf"task {tid} session {sid} .*no call in the dump"):
        from_traces(rec, dump=dump[[k[:2] != (tid, sid) for k in dump.index]])
    empty = dump.copy()
    empty["prompt_ids"] = [[] for _ in range(len(empty))]
    with pytest.raises(DatasetError, match="neither prompt_ids nor prompt_text"):
        from_traces(rec, dump=empty.drop(columns="prompt_text"))
    bad = dump.copy()
    bad["prompt_ids"] = [["a"] for _ in range(len(bad))]
    with pytest.raises(DatasetError, match="prompt_ids must be a list of ints"):
        from_traces(rec, dump=bad)
    for kwargs, match in (({"prompts": "text"}, "prompts must be 'same'"),
                          ({"time_scale": 0}, "time_scale must be"),
                          ({"statuses": ["done"]}, "statuses must be some of"),
                          ({"num": 0}, "num must be")):
        with pytest.raises(DatasetError, match=match):
            from_traces(rec, **{"prompts": "lengths", **kwargs})
    with pytest.raises(DatasetError, match="no trace files match"):
        from_traces(tmp_path / "nothing-*.jsonl", prompts="lengths")


# ------------------------------------------------------------------ LoadRequest / workflow
def test_samples_and_per_sample_lengths_on_a_load_request() -> None:
    r = LoadRequest(prompt_ids=(5, 6), samples=3, output_lens=(4, 9, 2))
    assert r.output_len == 9  # the longest, filled in
    assert LoadRequest(prompt="x").samples == 1
    for kwargs in ({"samples": 0}, {"samples": 2.0}, {"samples": True},
                   {"samples": 2, "output_lens": (3,)},
                   {"samples": 2, "output_lens": [3, 4]},
                   {"samples": 2, "output_lens": (3, 0)},
                   {"samples": 2, "output_lens": (3, 4), "output_len": 3}):
        with pytest.raises(ConfigError):
            LoadRequest(prompt="x", **kwargs)
    g = GenerateRequest()
    reqs = g.requests_for(r)
    assert [q.gconfig.max_new_tokens for q in reqs] == [4, 9, 2]
    assert all(q.input_ids == [5, 6] for q in reqs)
    assert len({q.rid.rsplit(":", 1)[0] for q in reqs}) == 1  # one sticky key per task
    g.validate(r)
    with pytest.raises(ConfigError, match="samples"):
        g.validate(SimpleNamespace(prompt="x", prompt_ids=None, output_len=None))
    with pytest.raises(ConfigError, match="samples must be"):
        g.validate(SimpleNamespace(prompt="x", prompt_ids=None, output_len=None, samples=0,
                                   output_lens=None))


# ------------------------------------------------------------------ AReaL
T0 = 1734999251.67


def _jsonl(path: Path, rows: list[Any], torn: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    path.write_text(text + (torn or ""))
    return path


def _session(task: int, sid: int, ts: float, status: str = "accepted") -> dict[str, Any]:
    """A ``SessionRecord.to_dict()`` line, keys in AReaL's order."""
    return {"task_id": task, "session_id": sid, "rank": 0, "status": status,
            "submit_ts": ts, "finalized_ts": ts + 2.9, "total_s": 2.9, "generate_s": 2.6,
            "reward_s": 0.1, "phases": {"generate": [{"start_ts": ts, "end_ts": ts + 2.6}]}}


def _sample(task: int, idx: int, prompt_len: int, seqlen: int) -> dict[str, Any]:
    """A line of AReaL's ``rollout/{tail_version}/{task_id}.jsonl`` dump."""
    return {"task_id": task, "sample_idx": idx, "seqlen": seqlen, "prompt_len": prompt_len,
            "head_version": 2, "tail_version": 3, "reward": 1.0,
            "prompt": f"Question {task}?", "completion": "x" * (seqlen - prompt_len)}


@pytest.fixture
def areal(tmp_path: Path) -> Path:
    log = tmp_path / "log"
    _jsonl(log / "session_tracer" / "sessions-r0.jsonl", [
        _session(7, 93, T0), _session(7, 94, T0 + 0.03), _session(7, 95, T0 + 0.01),
        _session(8, 96, T0 + 0.5),
        _session(9, 97, T0 + 1.0, "rejected"), _session(9, 98, T0 + 1.0, "rejected"),
    ])
    _jsonl(log / "rollout" / "3" / "7.jsonl", [_sample(7, 0, 5, 9), _sample(7, 2, 5, 7),
                                               _sample(7, 1, 5, 12)])
    _jsonl(log / "rollout" / "4" / "8.jsonl", [_sample(8, 0, 6, 14)])
    return log


def test_areal_sessions_with_its_dump(areal: Path) -> None:
    sessions = areal / "session_tracer" / "sessions-r0.jsonl"
    reqs = read_areal_sessions(sessions, areal_dump=areal, statuses="accepted",
                               time_scale=2.0)
    assert [r.group for r in reqs] == [7, 8]
    assert [r.timestamp for r in reqs] == pytest.approx([0.0, 1.0])  # (0.5 s) * 2
    assert [r.samples for r in reqs] == [3, 1]
    assert reqs[0].output_lens == (4, 7, 2) and reqs[0].output_len == 7  # by sample_idx
    assert reqs[1].output_lens is None and reqs[1].output_len == 8
    assert [r.prompt_len for r in reqs] == [5, 6]
    assert all(r.prompt_ids is not None and len(r.prompt_ids) == r.prompt_len for r in reqs)
    same = read_areal_sessions(areal / "session_tracer", areal_dump=areal / "rollout",
                               prompts="same", statuses=["accepted"])
    assert [r.prompt for r in same] == ["Question 7?", "Question 8?"]
    assert [r.output_lens for r in same] == [(4, 7, 2), None]
    # task 9 is not in the dump: its lengths are given, or it is an error
    with pytest.raises(DatasetError, match="task 9 has no samples in the AReaL dump"):
        read_areal_sessions(sessions, areal_dump=areal)
    all3 = read_areal_sessions(sessions, areal_dump=areal, output_len=4, input_len=6)
    assert [(r.group, r.samples, r.output_len) for r in all3] == [(7, 3, 7), (8, 1, 8),
                                                                   (9, 2, 4)]
    assert read_areal_sessions(sessions, areal_dump=areal, output_len=4, input_len=6,
                               num=2) == all3[:2]


def test_areal_sessions_without_a_dump_and_many_files(areal: Path) -> None:
    d = areal / "session_tracer"
    _jsonl(d / "sessions-r1.jsonl", [_session(10, 0, T0 - 1.0), _session(10, 1, T0 - 0.9)])
    reqs = read_areal_sessions(str(d / "sessions-r*.jsonl"), output_len=6, input_len=4)
    assert [r.group for r in reqs] == [10, 7, 8, 9]  # by arrival, over the files
    assert [r.timestamp for r in reqs] == pytest.approx([0.0, 1.0, 1.5, 2.0])
    assert [r.samples for r in reqs] == [2, 3, 1, 2]
    assert all(r.output_len == 6 and r.prompt_len == 4 and r.ignore_eos for r in reqs)
    with pytest.raises(DatasetError, match=r"pass areal_dump= .*or output_len="):
        read_areal_sessions(d, output_len=6)
    with pytest.raises(DatasetError, match=r"prompts='same' .*areal_dump="):
        read_areal_sessions(d, prompts="same", output_len=6, input_len=4)


async def test_an_areal_run_replays_against_the_simulator(
        areal: Path, ctl: RolloutController) -> None:
    reqs = read_areal_sessions(areal, areal_dump=areal, statuses="accepted")
    run = await run_load_async(ctl, reqs, _schedule(reqs))
    df = run.frame
    assert (df["status"] == "accepted").all() and list(df["samples"]) == [3, 1]
    now = ctl.tracer.frames().sessions
    assert [_lens(now, int(t)) for t in df.index] == [[4, 7, 2], [8]]
    assert [_lens(now, int(t), "prompt_tokens") for t in df.index] == [[5] * 3, [6]]


def test_areal_bad_input(tmp_path: Path, areal: Path) -> None:
    ok = _session(1, 0, T0)
    f = tmp_path / "sessions-r0.jsonl"
    # a torn last line (the writer died mid-write) is skipped with a warning
    _jsonl(f, [ok, _session(2, 1, T0 + 1)], torn='{"task_id": 3, "sess')
    with pytest.warns(TornTraceWarning, match="torn last line"):
        reqs = read_areal_sessions(f, output_len=3, input_len=3)
    assert [r.group for r in reqs] == [1, 2]
    cases: list[tuple[list[Any], str]] = [
        ([ok, "{not json", ok], "sessions-r0.jsonl:2: not valid JSON"),
        ([ok, [1, 2]], "sessions-r0.jsonl:2: expected a JSON object"),
        ([ok, {k: v for k, v in ok.items() if k != "submit_ts"}],
         "sessions-r0.jsonl:2: missing key 'submit_ts'"),
        ([{k: v for k, v in ok.items() if k != "task_id"}], ":1: missing key 'task_id'"),
        ([ok, {**ok, "submit_ts": "soon"}], ":2: 'submit_ts' must be a number"),
        ([ok, {**ok, "task_id": -1}], ":2: 'task_id' must be an int >= 0"),
        ([ok, {**ok, "status": "done"}], ":2: 'status' must be one of"),
        ([], "empty dataset"),
    ]
    for rows, match in cases:
        _jsonl(f, rows)
        with pytest.raises(DatasetError, match=match):
            read_areal_sessions(f, output_len=3, input_len=3)
    with pytest.raises(DatasetError, match="no AReaL session files"):
        read_areal_sessions(str(tmp_path / "none-*.jsonl"), output_len=3, input_len=3)
    with pytest.raises(DatasetError, match="no such dataset file"):
        read_areal_sessions(tmp_path / "missing.jsonl", output_len=3, input_len=3)
    with pytest.raises(DatasetError, match="statuses must be some of"):
        read_areal_sessions(areal, areal_dump=areal, statuses="done")

    # the dump: a line without prompt_len, no completion, a sample count that differs
    sessions = areal / "session_tracer" / "sessions-r0.jsonl"
    dump7 = areal / "rollout" / "3" / "7.jsonl"
    for rows, match in (
            ([{k: v for k, v in _sample(7, 0, 5, 9).items() if k != "prompt_len"}],
             "7.jsonl:1: missing key 'prompt_len'"),
            ([_sample(7, 0, 5, 9), _sample(7, 1, 5, 5), _sample(7, 2, 5, 8)],
             "7.jsonl:2: 'seqlen - prompt_len' must be positive"),
            ([_sample(7, 0, 5, 9), _sample(7, 1, 5, 9)],
             "task 7: 3 session.s. in the session trace but 2 sample.s. in the dump"),
            ([_sample(7, 0, 5, 9), _sample(7, 0, 5, 9), _sample(7, 1, 5, 9)],
             "7.jsonl:2: sample_idx 0 of task 7 appears twice"),
            ([_sample(8, 0, 5, 9)], "7.jsonl:1: task_id 8 in the file of task 7")):
        _jsonl(dump7, rows)
        with pytest.raises(DatasetError, match=match):
            read_areal_sessions(sessions, areal_dump=areal, statuses="accepted")
    _jsonl(dump7, [_sample(7, 0, 5, 9), _sample(7, 1, 5, 9), _sample(7, 2, 5, 9)],
           torn='{"task_id": 7, "sam')
    with pytest.warns(TornTraceWarning):
        reqs = read_areal_sessions(sessions, areal_dump=areal, statuses="accepted")
    assert reqs[0].output_lens == (4, 4, 4)
    with pytest.raises(DatasetError, match="no such AReaL dump directory"):
        read_areal_sessions(sessions, areal_dump=tmp_path / "nope")
    with pytest.raises(DatasetError, match="no AReaL trajectory files"):
        read_areal_sessions(sessions, areal_dump=areal / "session_tracer")
