"""The load runner against the simulator (127.0.0.1): what the code guarantees, no timings.

Every request is a controller task (contiguous ids, in the traces), its due time is the
seeded process's offset exactly, send lag is recorded and never negative, warm-up is left
out, ``max_concurrency`` caps what is in flight, a server killed mid-run fails its requests
with a reason (kept out of the latency statistics) while the run goes on, and an interrupted
run returns what it has. Events that must happen "mid-run" are triggered from inside the
k-th task (a hook workflow), never by a sleep.
"""

from __future__ import annotations

import _thread
import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from rollout_kit import (
    ConfigError,
    EngineConfig,
    GenerationConfig,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    RolloutController,
    SingleTurnWorkflow,
    Timeouts,
)
from rollout_kit.load import (
    Arrivals,
    GenerateRequest,
    LoadRequest,
    LoadSpec,
    run_load,
    run_load_async,
    synthetic,
)
from rollout_kit.load._results import FRAME_COLUMNS
from rollout_kit.load._runner import PRESTAGE_S
from rollout_kit.load._workflow import LoadItem, Measured, TaskRecord
from rollout_kit.sim import SimCluster, serve, serve_in_thread

ENGINE = EngineConfig(stream=True, retry=RetryPolicy(max_retries=0),
                      timeouts=Timeouts(connect=2.0, request=20.0, total=30.0, health=1.0))
LAG_TOL = 1e-9  # send lag is stored signed; float rounding is the only way below 0


class Hook:
    """``GenerateRequest`` that runs ``fn`` when its ``at``-th task starts (1-based)."""

    def __init__(self, at: int, fn: Callable[[], Awaitable[None] | None]) -> None:
        self.inner = GenerateRequest()
        self.at = at
        self.fn = fn
        self.count = 0

    def validate(self, data: Any) -> None:
        self.inner.validate(data)

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        self.count += 1
        if self.count == self.at:
            out = self.fn()
            if out is not None:
                await out
        return await self.inner.arun_episode(engine, data)


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    async with serve("vllm", 1, zero_latency=True) as c:
        yield c


@pytest.fixture
async def ctl(cluster: SimCluster) -> AsyncIterator[RolloutController]:
    async with RolloutController(vllm=cluster.urls, engine_config=ENGINE) as c:
        yield c


REQS = synthetic(8, input_len=12, output_len=6)


async def test_a_task_submitted_ahead_runs_its_workflow_at_its_due_time() -> None:
    started: list[float] = []
    turns = 0

    class Clocked:
        async def arun_episode(self, engine: Any, data: str) -> str:
            started.append(time.perf_counter())
            return data

    class Versioned:
        def get_version(self) -> int:
            return 7

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    measured = Measured(Clocked())
    counter = asyncio.create_task(count_turns())
    due = time.perf_counter() + 0.02
    assert await measured.arun_episode(Versioned(), LoadItem(3, "x", due)) == "x"
    waited = turns
    counter.cancel()
    await asyncio.gather(counter, return_exceptions=True)
    assert started[0] >= due  # never before its instant
    assert waited > 1  # the wait yields to the loop: other tasks ran meanwhile
    assert measured.records[3].version == 7  # filed before the wait
    assert await measured.arun_episode(Versioned(), LoadItem(4, "y")) == "y"  # no due: at once


async def test_every_request_is_a_traced_task_on_the_seeded_schedule(
        ctl: RolloutController) -> None:
    spec = LoadSpec(arrivals=Arrivals(rate=400.0, seed=3), num_requests=40)
    first = ctl.ids.peek
    run = await run_load_async(ctl, REQS, spec)
    df = run.frame
    assert tuple(df.columns) == FRAME_COLUMNS and df.index.name == "task_id"
    assert list(df.index) == list(range(first, first + 40))  # one counter, contiguous
    assert set(df.index) <= set(ctl.traces().index)  # the tracer registered every one
    assert (df["status"] == "accepted").all()
    np.testing.assert_array_equal(df["scheduled_s"].to_numpy(),
                                  Arrivals(rate=400.0, seed=3).offsets(40))
    assert (df["send_lag_s"] >= -LAG_TOL).all()
    assert (df["sent_s"] >= df["scheduled_s"] - LAG_TOL).all()
    # submitted ahead (never more than the lead), sent on time: the task waited for its due
    assert (df["submitted_s"] >= df["scheduled_s"] - PRESTAGE_S - LAG_TOL).all()
    assert (df["sent_s"] > df["submitted_s"]).all()
    assert (df["queue_wait_s"] == 0).all()
    assert (df["done_s"] >= df["sent_s"]).all()
    assert (df["output_tokens"] == 6).all() and (df["prompt_tokens"] == 12).all()
    assert (df["retries"] == 0).all() and (df["samples"] == 1).all()
    assert (df["e2el_s"] >= df["ttft_s"]).all()
    assert df["itl_s"].map(len).eq(5).all()  # one gap per later token
    assert list(df["request_index"]) == [i % len(REQS) for i in range(40)]
    assert run.offered_rate == pytest.approx(400.0)
    assert not run.interrupted and run.unsent == 0 and run.scheduled == 40
    m = run.metrics()
    assert m["completed"] == 40 and m["failed"] == 0
    assert m["offered_rate"] == run.offered_rate


async def test_warmup_requests_are_left_out(ctl: RolloutController) -> None:
    spec = LoadSpec(arrivals=Arrivals(rate=500.0), num_requests=12, warmup=4)
    run = await run_load_async(ctl, REQS, spec)
    df = run.frame
    assert list(df["warmup"]) == [True] * 4 + [False] * 8
    assert run.start_s == df["scheduled_s"].iloc[3]
    m = run.metrics()
    assert m["completed"] == 8
    assert m["total_output_tokens"] == 8 * 6


async def test_every_item_once_without_a_bound_and_a_duration_bound(
        ctl: RolloutController) -> None:
    run = await run_load_async(ctl, REQS, LoadSpec(arrivals=Arrivals(rate=1000.0)))
    assert len(run.frame) == len(REQS)
    arr = Arrivals(rate=300.0, seed=1)
    run = await run_load_async(ctl, REQS, LoadSpec(arrivals=arr, duration=0.05))
    np.testing.assert_array_equal(run.frame["scheduled_s"].to_numpy(), arr.until(0.05))
    # both bounds: whichever comes first
    run = await run_load_async(ctl, REQS, LoadSpec(arrivals=arr, duration=10.0,
                                                   num_requests=5))
    assert len(run.frame) == 5


async def test_max_concurrency_caps_in_flight_and_records_the_client_queue() -> None:
    async with serve("vllm", 1, time_scale=0.05) as cluster, RolloutController(
            vllm=cluster.urls, engine_config=ENGINE) as ctl:
        spec = LoadSpec(num_requests=10, max_concurrency=2)  # all due at t=0
        run = await run_load_async(ctl, REQS, spec)
    df = run.frame.sort_values("submitted_s")
    assert (df["status"] == "accepted").all()
    sub, done = df["submitted_s"].to_numpy(), df["done_s"].to_numpy()
    for t in sub:  # a slot frees (done) before the next request takes it
        assert ((sub <= t) & (done > t)).sum() <= 2
    assert (df["queue_wait_s"] >= 0).all() and (df["queue_wait_s"] > 0).sum() >= 8
    assert (df["send_lag_s"] >= -LAG_TOL).all()
    assert run.metrics()["max_queue_wait_ms"] > 0


async def test_a_server_killed_mid_run_fails_its_requests_and_the_run_goes_on(
        cluster: SimCluster, ctl: RolloutController) -> None:
    n = 30
    hook = Hook(11, cluster.servers[0].stop)  # task 11 stops the server before it sends
    run = await run_load_async(ctl, REQS, LoadSpec(arrivals=Arrivals(rate=500.0),
                                                   num_requests=n), workflow=hook)
    df = run.frame
    assert len(df) == n and not run.interrupted  # every request was still sent
    failed = df[df["status"] == "failed"]
    assert len(failed) >= n - 10
    assert set(df["status"]) <= {"accepted", "failed"}
    assert failed["reason"].isin({"connection_error", "no_healthy_server", "timeout"}).all()
    assert failed["error"].notna().all()
    assert failed["ttft_s"].isna().all() and failed["e2el_s"].isna().all()
    m = run.metrics()
    ok = df[df["status"] == "accepted"]
    assert m["failed"] == len(failed) and m["completed"] == len(ok)
    assert sum(m["failure_reasons"].values()) == len(failed)
    if len(ok):
        assert m["mean_e2el_ms"] == pytest.approx(ok["e2el_s"].mean() * 1000)
        assert m["total_output_tokens"] == ok["output_tokens"].sum()


async def test_cancelling_the_run_returns_the_partial_run(ctl: RolloutController) -> None:
    task: asyncio.Task[Any] | None = None

    def interrupt() -> None:
        assert task is not None
        task.cancel()  # what Ctrl-C does to a notebook cell's coroutine

    spec = LoadSpec(arrivals=Arrivals(rate=200.0), num_requests=400)
    first = ctl.ids.peek
    task = asyncio.ensure_future(run_load_async(ctl, REQS, spec, workflow=Hook(5, interrupt)))
    run = await task
    df = run.frame
    assert run.interrupted
    assert 5 <= len(df) < 400 and run.unsent == 400 - len(df)
    assert list(df.index) == list(range(first, first + len(df)))
    assert set(df["status"]) <= {"accepted", "cancelled"}
    assert (df["status"] == "cancelled").sum() >= 1  # the 5th was in flight
    stats = ctl.stats()
    assert stats["running"] == 0 and stats["outstanding"] == 0
    m = run.metrics()
    assert m["interrupted"] and m["unfinished"] == (df["status"] == "cancelled").sum()
    # the controller carries on
    again = await run_load_async(ctl, REQS, LoadSpec(num_requests=3))
    assert list(again.frame.index) == list(range(first + len(df), first + len(df) + 3))
    assert (again.frame["status"] == "accepted").all()  # columns align with any first id


def _timerfds() -> int:
    """This process's open timerfds (Linux names them ``anon_inode:[timerfd]``)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[timerfd]"
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return n


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel timer is Linux's timerfd")
async def test_a_run_paces_on_a_kernel_timer_and_releases_it(ctl: RolloutController) -> None:
    before = _timerfds()
    seen: list[int] = []
    run = await run_load_async(ctl, REQS, LoadSpec(arrivals=Arrivals(rate=500.0),
                                                   num_requests=6),
                               workflow=Hook(3, lambda: seen.append(_timerfds())))
    assert (run.frame["status"] == "accepted").all()
    assert seen == [before + 1]  # one timer while the run sends, none after
    assert _timerfds() == before
    task: asyncio.Task[Any] | None = None

    def interrupt() -> None:
        assert task is not None
        task.cancel()

    task = asyncio.ensure_future(run_load_async(
        ctl, REQS, LoadSpec(arrivals=Arrivals(rate=200.0), num_requests=50),
        workflow=Hook(2, interrupt)))
    assert (await task).interrupted
    assert _timerfds() == before


async def test_a_full_workflow_is_timed_per_task(ctl: RolloutController) -> None:
    wf = SingleTurnWorkflow(lambda *a, **k: 1.0, gconfig=GenerationConfig(
        n_samples=2, max_new_tokens=4))
    data = [{"prompt": "What is 2+3?"}, {"prompt": "What is 7+8?"}]
    run = await run_load_async(ctl, data, LoadSpec(num_requests=4), workflow=wf)
    df = run.frame
    assert (df["status"] == "accepted").all()
    assert (df["samples"] == 2).all()  # two generate calls per task
    assert (df["output_tokens"] > 0).all() and (df["ttft_s"] > 0).all()
    assert ctl.sessions().reset_index()["task_id"].isin(df.index).any()


def test_blocking_twin_and_ctrl_c() -> None:
    with serve_in_thread("vllm", 1, zero_latency=True) as cluster:
        ctl = RolloutController(vllm=cluster.urls, engine_config=ENGINE)
        try:
            run = run_load(ctl, REQS, LoadSpec(arrivals=Arrivals(rate=500.0), num_requests=6))
            assert len(run.frame) == 6 and not run.interrupted
            # Ctrl-C in a script: SIGINT while the run is going
            hook = Hook(3, _thread.interrupt_main)
            spec = LoadSpec(arrivals=Arrivals(rate=100.0), num_requests=300)
            run = run_load(ctl, REQS, spec, workflow=hook)
            assert run.interrupted and 3 <= len(run.frame) < 300
            assert ctl.stats()["running"] == 0
        finally:
            ctl.close()


async def test_bad_input_is_one_clear_error(ctl: RolloutController) -> None:
    with pytest.raises(ConfigError, match="dataset is empty"):
        await run_load_async(ctl, [], LoadSpec())
    with pytest.raises(ConfigError, match="gconfig"):
        await run_load_async(ctl, REQS, workflow=GenerateRequest(),
                             gconfig=GenerationConfig())
    with pytest.raises(ConfigError, match="warmup=8 leaves none"):
        await run_load_async(ctl, REQS, LoadSpec(warmup=8))
    with pytest.raises(ConfigError, match=r"requests\[1\]"):
        await run_load_async(ctl, [REQS[0], object()], LoadSpec())
    with pytest.raises(ConfigError, match="rate"):
        LoadSpec(arrivals=Arrivals(rate=float("nan")))
    for kwargs in ({"num_requests": 0}, {"duration": -1.0}, {"max_concurrency": 0},
                   {"warmup": -1}, {"duration": float("inf")}, {"arrivals": 5.0}):
        with pytest.raises(ConfigError):
            LoadSpec(**kwargs)
    assert ctl.ids.peek == 0  # no task id was spent on bad input


def test_load_request_prompt_text_and_ids() -> None:
    g = GenerateRequest(GenerationConfig(max_new_tokens=9))
    req = g.request_for(LoadRequest(prompt="hi", output_len=3, ignore_eos=True))
    assert req.text == "hi" and req.gconfig.max_new_tokens == 3 and req.gconfig.ignore_eos
    req = g.request_for(LoadRequest(prompt_ids=(5, 6)))
    assert req.input_ids == [5, 6] and req.gconfig.max_new_tokens == 9
    assert g.config_for(3, True) is g.config_for(3, True)  # cached per length


def test_the_package_exports_a_sorted_curated_api() -> None:
    import rollout_kit.load as load

    assert load.__all__ == sorted(load.__all__, key=str.casefold)
    for name in load.__all__:
        assert getattr(load, name) is not None


async def test_load_requests_ask_no_logprobs_unless_the_gconfig_does(
        cluster: SimCluster, tmp_path: Any) -> None:
    """Like ``vllm bench serve``: the default request leaves logprobs out (the server skips
    that work); a given ``GenerationConfig`` keeps its own choice. Read back from the
    trajectory dump: the parameters sent and the logprobs that came back."""
    from rollout_kit.tracing import load_dump

    spec = LoadSpec(arrivals=Arrivals(rate=1000.0), num_requests=4)
    for name, gconfig in (("default", None), ("asked", GenerationConfig(logprobs=True))):
        async with RolloutController(vllm=cluster.urls, engine_config=ENGINE,
                                     dump=tmp_path / name) as ctl:
            run = await run_load_async(ctl, REQS, spec, gconfig=gconfig)
            assert (run.frame["status"] == "accepted").all()
        calls = load_dump(tmp_path / name)
        assert len(calls) == 4
        want = name == "asked"
        assert [s["logprobs"] for s in calls["sampling"]] == [want] * 4
        for lps, ids in zip(calls["logprobs"], calls["output_ids"], strict=True):
            assert len(lps) == len(ids) == 6
            assert all(np.isfinite(lps)) if want else all(np.isnan(lps))


def test_ttft_and_e2el_count_from_the_call_not_from_the_engines_own_start() -> None:
    """The engine times ``ttft``/``latency`` from its own ``start``; the record counts from
    the workflow's call: here the engine started 0.3 s after the call, so the first token
    came 0.35 s and the end 0.5 s after it (adding ``ttft`` to the call's time would say
    0.05 s)."""
    rec = TaskRecord()
    rec.add(10.0, ModelResponse(output_tokens=[1, 2], latency=0.2, ttft=0.05, start=10.3))
    assert rec.first_token == pytest.approx(10.35) and rec.end == pytest.approx(10.5)
    untimed = TaskRecord()  # an engine that does not say when it started: the call's time
    untimed.add(10.0, ModelResponse(output_tokens=[1], latency=0.2, ttft=0.05))
    assert untimed.first_token == pytest.approx(10.05) and untimed.end == pytest.approx(10.2)


async def test_the_remote_engine_says_when_it_started_timing(ctl: RolloutController) -> None:
    """``ModelResponse.start`` of a real call lies between the call and its return, and the
    load frame's TTFT counts from the call: it is the engine's own TTFT plus the time the
    engine took to start (Python code, microseconds at least; 0 before ``start``)."""
    t0 = time.perf_counter()
    resp = await ctl.engines[0].generate_async(ModelRequest(input_ids=[5, 6, 7],
                                                        gconfig=GenerationConfig(
                                                            max_new_tokens=3)))
    t1 = time.perf_counter()
    assert t0 <= resp.start <= resp.start + resp.latency <= t1
    run = await run_load_async(ctl, synthetic(20, input_len=8, output_len=4),
                               LoadSpec(arrivals=Arrivals(rate=200.0, seed=0)))
    engine_ttft = ctl.tracer.frames().sessions.groupby("task_id")["ttft_s"].min()
    frame = run.frame
    assert (frame["ttft_s"] - engine_ttft.reindex(frame.index) > 1e-7).all()
