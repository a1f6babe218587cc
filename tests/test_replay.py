"""Trajectory dumps and exact replay against the simulators (both flavours).

The simulators honour the ``seed`` sampling parameter as vLLM and SGLang do (the same seed and
prompt give the same tokens whatever the request id), and draw unseeded samples afresh, so a
replay is identical only when the seeds were recorded and sent.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from rollout_kit import (
    ConfigError,
    GenerationConfig,
    ModelRequest,
    RolloutController,
    SingleTurnWorkflow,
    Tracer,
    TraceSchemaError,
)
from rollout_kit.replay import first_divergence, replay, replay_async
from rollout_kit.sim import serve, serve_in_thread
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import (
    TornTraceWarning,
    TrajectoryDump,
    load_dump,
    read_areal_dump,
    trace_session,
)
from rollout_kit.tracing.dumps import derive_seed, versions_rle

FLAVOURS = ["sglang", "vllm"]
PROMPTS = [{"prompt": "tell me a story"}, {"input_ids": [40, 41, 42, 43, 44]}]


def _workflow(n_samples: int = 2, max_new_tokens: int = 12, **g: Any) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=n_samples, max_new_tokens=max_new_tokens, ignore_eos=True, **g))


async def _record(flavour: str, addresses: list[str], dump: Path | TrajectoryDump,
                  data: list[Any] | None = None, **wf: Any) -> pd.DataFrame:
    async with RolloutController(engine_config=fast_engine_config(), dump=dump,
                                 **{flavour: addresses}) as ctl:
        results = await ctl.rollout_batch_async(data or PROMPTS, _workflow(**wf), timeout=30)
        assert all(r.ok for r in results), results
    return load_dump(dump.directory if isinstance(dump, TrajectoryDump) else dump)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_seeded_run_replays_token_identical(flavour: str, tmp_path: Path) -> None:
    async with serve(flavour, n=2, zero_latency=True) as cluster:
        recorded = await _record(flavour, cluster.addresses, tmp_path)
        assert len(recorded) == 4 and (recorded["status"] == "ok").all()
        assert (recorded["seed_source"] == "derived").all()
        assert recorded["seed"].tolist() == [derive_seed(0, t, s, c) for t, _, c, s in zip(
            recorded.index.get_level_values(0), recorded.index.get_level_values(1),
            recorded.index.get_level_values(2), recorded["sample"], strict=True)]
        assert len({tuple(o) for o in recorded["output_ids"]}) == 4  # samples differ
        frame = await replay_async(tmp_path)  # to the recorded servers
    assert frame.index.equals(recorded.index)
    assert frame["identical"].all(), frame[["status", "first_divergence", "reason"]]
    assert (frame["logprob_max_abs_delta"] == 0).all()
    assert frame["tokens_now"].tolist() == [12] * 4 and (frame["stop_now"] == "length").all()
    assert frame["server_then"].tolist() == recorded["server"].tolist()
    assert frame["latency_then_s"].tolist() == recorded["latency_s"].tolist()
    assert frame["latency_now_s"].notna().all()


async def test_the_dump_joins_the_traces_and_holds_every_parameter(tmp_path: Path) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        tracer = Tracer(dump=TrajectoryDump(tmp_path, seed=7))
        async with RolloutController(vllm=cluster.addresses, tracer=tracer,
                                     engine_config=fast_engine_config()) as ctl:
            wf = _workflow(top_p=0.9, top_k=5, stop=("zz",), frequency_penalty=0.5)
            await ctl.rollout_batch_async(PROMPTS, wf)
            sessions = ctl.sessions()
    dump = load_dump(tmp_path)
    joined = dump.reset_index("call").join(sessions, suffixes=("", "_trace"))
    assert len(joined) == len(sessions) == 4
    assert (joined["completion_tokens"] == joined["completion_tokens_trace"]).all()
    assert (joined["prompt_tokens"] == joined["prompt_tokens_trace"]).all()
    assert (joined["rid"] == joined["rid_trace"]).all()
    s = dump.iloc[0]["sampling"]
    assert (s["top_p"], s["top_k"], s["stop"], s["frequency_penalty"]) == (0.9, 5, ["zz"], 0.5)
    assert s["seed"] == derive_seed(7, 0, 0, 0) and dump["run_seed"].eq(7).all()
    assert dump.loc[(0, slice(None), 0), "prompt_text"].eq("tell me a story").all()
    assert dump.loc[(1, slice(None), 0), "prompt_text"].isna().all()  # sent as token ids
    assert (dump["versions"].map(len) == dump["completion_tokens"]).all()


async def test_same_run_seed_gives_the_same_run_and_another_does_not(tmp_path: Path) -> None:
    async with serve("sglang", n=1, zero_latency=True) as cluster:
        a = await _record("sglang", cluster.addresses, TrajectoryDump(tmp_path / "a", seed=1))
        b = await _record("sglang", cluster.addresses, TrajectoryDump(tmp_path / "b", seed=1))
        c = await _record("sglang", cluster.addresses, TrajectoryDump(tmp_path / "c", seed=2))
    assert a["seed"].tolist() == b["seed"].tolist() != c["seed"].tolist()
    assert a["output_ids"].tolist() == b["output_ids"].tolist() != c["output_ids"].tolist()


async def test_a_users_seed_is_kept(tmp_path: Path) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        recorded = await _record("vllm", cluster.addresses, tmp_path, seed=1234)
    assert (recorded["seed"] == 1234).all() and (recorded["seed_source"] == "user").all()


async def test_unseeded_and_seed_ignoring_servers_are_named(tmp_path: Path) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster, \
            serve("vllm", n=1, zero_latency=True, honor_seed=False) as deaf:
        recorded = await _record("vllm", cluster.addresses, tmp_path)
        unseeded = recorded.copy()
        unseeded["sampling"] = [{**s, "seed": None} for s in unseeded["sampling"]]
        frame = await replay_async(unseeded, servers=cluster.addresses, flavour="vllm")
        assert (frame["status"] == "diverged").all()
        assert frame["reason"].str.contains("unseeded sampling at temperature 1.0").all()
        assert frame["first_divergence"].notna().all()
        frame = await replay_async(recorded, servers=deaf.addresses, flavour="vllm")
    assert (frame["status"] == "diverged").all()
    assert frame["reason"].str.contains("does not honour seeds").all(), frame["reason"]


async def test_other_weights_are_told_from_ignored_seeds(tmp_path: Path) -> None:
    async with serve("sglang", n=1, zero_latency=True) as cluster, \
            serve("sglang", n=1, zero_latency=True, seed=99) as other:  # other "weights"
        await _record("sglang", cluster.addresses, tmp_path)
        frame = await replay_async(tmp_path, servers=other.addresses, flavour="sglang")
    assert (frame["status"] == "diverged").all()
    assert frame["reason"].str.contains("repeats its own output for this seed").all()


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_continued_generation_replays_request_by_request(flavour: str,
                                                              tmp_path: Path) -> None:
    async with serve(flavour, n=1, zero_latency=True) as cluster:
        cluster.servers[0].faults.force("abort", 2)
        async with RolloutController(engine_config=fast_engine_config(), dump=tmp_path,
                                     **{flavour: cluster.addresses}) as ctl:
            [res] = await ctl.rollout_batch_async(PROMPTS[1:], _workflow(1, 40), timeout=30)
            assert res.ok
        recorded = load_dump(tmp_path)
        row = recorded.iloc[0]
        assert row["n_segments"] == 3 and row["completion_tokens"] == 40
        segs = row["segments"]
        assert [s["stop_reason"] for s in segs] == ["abort", "abort", "length"]
        assert [s["prefix"] for s in segs] == [0, segs[0]["n_tokens"],
                                               segs[0]["n_tokens"] + segs[1]["n_tokens"]]
        assert [s["max_new_tokens"] for s in segs] == [40 - s["prefix"] for s in segs]
        frame = await replay_async(tmp_path)
    assert frame["identical"].all(), frame[["status", "first_divergence", "reason"]]


async def test_weight_versions_are_run_length_encoded_and_a_change_is_named(
        tmp_path: Path) -> None:
    assert versions_rle([3, 3, 4, 4, 4, 3]) == [[3, 2], [4, 3], [3, 1]]
    assert versions_rle([]) == []
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        async with RolloutController(vllm=cluster.addresses, dump=tmp_path,
                                     engine_config=fast_engine_config()) as ctl:
            ctl.set_version(3)
            await ctl.rollout_batch_async(PROMPTS[1:], _workflow(1))
        raw = [json.loads(x) for x in next(tmp_path.glob("*.jsonl")).read_text().splitlines()]
        assert raw[1]["versions"] == [[3, 12]]
        dump = load_dump(tmp_path)
        tampered = dump.copy()
        tampered["output_ids"] = [[*ids[:-1], (ids[-1] + 1) % 200] for ids in dump["output_ids"]]
        frame = await replay_async(tampered, servers=cluster.addresses, flavour="vllm")
    assert frame.iloc[0]["first_divergence"] == 11
    assert "weight version changed (3 then, 0 now)" in frame.iloc[0]["reason"]


async def test_controller_replay_runs_traced_tasks_with_new_ids(tmp_path: Path) -> None:
    async with serve("sglang", n=1, zero_latency=True) as cluster:
        await _record("sglang", cluster.addresses, tmp_path / "run")
        async with RolloutController(sglang=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            ctl.submit({"prompt": "first"}, _workflow(1))
            await ctl.wait_async(1)
            frame = await ctl.replay_async(tmp_path / "run", task_ids=[1, 9])
            traces = ctl.traces()
            sessions = ctl.sessions()
    assert frame.loc[1, "identical"].all()
    assert frame.loc[1, "replay_task_id"].tolist() == [1, 1]  # the controller's next id
    assert frame.loc[9, "status"].tolist() == ["not_replayed"]
    assert frame.loc[9, "reason"].str.startswith("task 9 is not in the dump (").all()
    assert traces.loc[1, "status"] == "accepted" and len(sessions.loc[1]) == 2


def test_blocking_replay_and_controller_replay(tmp_path: Path) -> None:
    with serve_in_thread("sglang", zero_latency=True) as cluster:
        with RolloutController(sglang=cluster.addresses, dump=tmp_path,
                               engine_config=fast_engine_config()) as ctl:
            assert all(r.ok for r in ctl.rollout_batch(PROMPTS, _workflow()))
            again = ctl.replay(tmp_path, task_ids=[0])
        frame = replay(tmp_path, task_ids=[1], concurrency=1)
    assert again["identical"].all() and again["replay_task_id"].tolist() == [2, 2]
    assert frame["identical"].all() and len(frame) == 2
    with pytest.raises(ConfigError, match="concurrency"):
        replay(tmp_path, concurrency=0)


async def test_failed_calls_are_recorded(tmp_path: Path) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        cluster.servers[0].faults.force("error", 10, status=500)
        async with RolloutController(vllm=cluster.addresses, dump=tmp_path,
                                     engine_config=fast_engine_config()) as ctl:
            [res] = await ctl.rollout_batch_async(PROMPTS[1:], _workflow(1))
    assert res.status == "failed"
    dump = load_dump(tmp_path)
    assert dump["status"].tolist() == ["failed"]
    assert "500" in dump.iloc[0]["error"] and dump.iloc[0]["output_ids"] == []


async def test_text_free_dump(tmp_path: Path) -> None:
    async with serve("sglang", n=1, zero_latency=True) as cluster:
        dump = await _record("sglang", cluster.addresses, TrajectoryDump(tmp_path, text=False))
        body = next(tmp_path.glob("*.jsonl")).read_text()
        assert "tell me a story" not in body
        assert dump["prompt_text"].isna().all() and dump["output_text"].isna().all()
        # the server returned the prompt's ids: a text prompt still replays exactly
        frame = await replay_async(tmp_path)
        assert frame["identical"].all()
        no_ids = dump.copy()
        no_ids["prompt_ids"] = [[] for _ in range(len(no_ids))]
        frame = await replay_async(no_ids, servers=cluster.addresses, flavour="sglang")
    assert (frame["status"] == "not_replayed").all()
    assert frame["reason"].str.contains("the dump is text-free").all()


def _write(path: Path, lines: list[Any]) -> None:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


async def test_bad_dumps(tmp_path: Path) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        await _record("vllm", cluster.addresses, tmp_path / "ok")
    [good] = (tmp_path / "ok").glob("*.jsonl")
    lines = good.read_bytes().splitlines()
    torn = tmp_path / "torn" / good.name
    torn.parent.mkdir()
    torn.write_bytes(b"\n".join(lines[:-1]) + b"\n" + lines[-1][: len(lines[-1]) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(load_dump(torn)) == len(lines) - 2  # header and the torn line left out
    assert any(issubclass(w.category, TornTraceWarning) for w in caught)

    header = orjson.loads(lines[0])
    newer = tmp_path / "newer.jsonl"
    _write(newer, [{**header, "schema": 99}])
    with pytest.raises(TraceSchemaError, match=r"newer.jsonl has dump schema version 99.*"
                                               r"reads version 1"):
        load_dump(newer)
    foreign = tmp_path / "foreign.jsonl"
    _write(foreign, [{"kind": "header", "format": "something else"}])
    with pytest.raises(TraceSchemaError, match="not a rollout_kit trajectory dump"):
        load_dump(foreign)
    broken = tmp_path / "broken.jsonl"
    _write(broken, [header, {"kind": "generation", "task_id": 0}, {"kind": "x"}])
    with pytest.raises(TraceSchemaError, match=r"broken.jsonl: line 2 is not a generation"):
        load_dump(broken)
    with pytest.raises(ConfigError, match="no dump files"):
        load_dump(tmp_path / "empty-*")
    with pytest.raises(ConfigError, match="seed must be an int >= 0"):
        TrajectoryDump(tmp_path, seed=-1)


async def test_areal_dump_layout(tmp_path: Path) -> None:
    root = tmp_path / "logs" / "rollout"
    for version, task, samples in ((3, 7, 2), (4, 8, 1)):
        d = root / str(version)
        d.mkdir(parents=True, exist_ok=True)
        _write(d / f"{task}.jsonl", [
            {"task_id": task, "sample_idx": i, "seqlen": 20, "prompt_len": 12,
             "head_version": version, "tail_version": version, "reward": 1.0,
             "prompt": "What is 2+3?", "completion": "The answer is 5."}
            for i in range(samples)])
    df = read_areal_dump(tmp_path / "logs")
    assert df.index.tolist() == [(7, 0, 0), (7, 1, 0), (8, 0, 0)]
    assert df["completion_tokens"].tolist() == [8, 8, 8]
    assert df["version_end"].tolist() == [3, 3, 4] and df["seed"].isna().all()
    async with serve("sglang", n=1, zero_latency=True, accuracy=0.0) as cluster:
        with pytest.raises(ConfigError, match="names no server"):
            await replay_async(root)
        frame = await replay_async(root, servers=cluster.addresses, flavour="sglang")
    assert (frame["status"] == "diverged").all()
    assert frame["reason"].str.contains("unseeded").all()
    _write(root / "3" / "9.jsonl", [{"task_id": 9}])
    with pytest.raises(TraceSchemaError, match=r"9.jsonl: line 1 is not an AReaL dump"):
        read_areal_dump(root)
    with pytest.raises(ConfigError, match="no AReaL dump files"):
        read_areal_dump(tmp_path / "nothing")


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], [5]) == 0


async def test_calls_outside_a_session_and_several_per_session(tmp_path: Path) -> None:
    class TwoTurns:
        async def arun_episode(self, engine: Any, data: Any) -> dict[str, Any]:
            g = GenerationConfig(max_new_tokens=4, ignore_eos=True)
            await engine.generate_async(ModelRequest(input_ids=[50, 51], gconfig=g))
            with trace_session():
                for _ in range(2):
                    await engine.generate_async(ModelRequest(input_ids=[60, 61], gconfig=g))
            return {}

    async with serve("vllm", n=1, zero_latency=True) as cluster:
        async with RolloutController(vllm=cluster.addresses, dump=tmp_path,
                                     engine_config=fast_engine_config()) as ctl:
            await ctl.rollout_batch_async([None], TwoTurns())
        dump = load_dump(tmp_path)
        assert [(t, None if s is pd.NA else s, c) for t, s, c in dump.index] == [
            (0, 0, 0), (0, 0, 1), (0, None, 0)]
        assert dump["sample"].tolist() == [0, 0, -1]
        assert dump["seed"].nunique() == 3  # the two turns of one session differ
        frame = await replay_async(tmp_path)
    assert frame["identical"].all()


async def test_a_run_without_dump_sends_no_seed(tmp_path: Path) -> None:
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        async with RolloutController(vllm=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            a = await ctl.rollout_batch_async(PROMPTS[1:] * 2, _workflow(1))
    assert ctl.tracer.dump is None
    assert a[0].trajectory["input_ids"] != a[1].trajectory["input_ids"]


@pytest.mark.parametrize("bad", [{"dump": 3}, {"concurrency": True}])
async def test_bad_arguments(bad: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        if "dump" in bad:
            Tracer(dump=bad["dump"])
        else:
            await replay_async(tmp_path, **bad)


async def test_controller_refuses_a_tracer_and_a_dump(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pass it to the Tracer"):
        RolloutController(sglang=["127.0.0.1:1"], tracer=Tracer(), dump=tmp_path)
    await asyncio.sleep(0)


def test_ray_workers_refuse_a_dump(tmp_path: Path) -> None:
    from rollout_kit.workers import RayScheduler

    with pytest.raises(ConfigError, match="in-process workers only"):
        RolloutController(sglang=["127.0.0.1:1"], dump=tmp_path, scheduler=RayScheduler())


def test_two_dumps_in_one_folder_never_overwrite(tmp_path: Path) -> None:
    a, b = TrajectoryDump(tmp_path), TrajectoryDump(tmp_path)
    assert a.path != b.path and a.path.exists() and b.path.exists()
    assert b.path.name.endswith("-1.jsonl")
    with pytest.warns(UserWarning, match="no recorded calls in .* yet: a call is written when"):
        assert load_dump(tmp_path).empty  # two headers, no calls: an empty frame, and a word


async def test_a_tasks_calls_are_readable_while_the_controller_is_open(tmp_path: Path) -> None:
    """The replay guide's cells in one kernel: load and replay before ``close()``."""
    async with serve("vllm", n=1, zero_latency=True) as cluster:
        ctl = RolloutController(vllm=cluster.addresses, dump=tmp_path / "run",
                                engine_config=fast_engine_config())
        try:
            await ctl.rollout_batch_async(PROMPTS, _workflow())
            calls = load_dump(tmp_path / "run")  # the default threshold (256) is not reached
            frame = await replay_async(tmp_path / "run", task_ids=[1, 7])
        finally:
            await ctl.close_async()
    assert calls.index.get_level_values("task_id").tolist() == [0, 0, 1, 1]
    assert frame.loc[1, "identical"].all() and len(frame.loc[1]) == 2
    assert frame.loc[7, "reason"].tolist() == [
        "task 7 is not in the dump (a task's calls are written when it ends: a task still "
        "running is not there yet)"]
