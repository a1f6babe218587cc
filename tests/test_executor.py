"""Running tasks through one worker (a controller over one in-process engine): ids, results,
filtering, failures, capacity, staleness, pause, cancel; and the executor on its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from rollout_kit import (
    ConfigError,
    ControllerStateError,
    DuplicateTaskIdError,
    EngineConnectionError,
    EngineServerError,
    EngineTimeoutError,
    ExecutorConfig,
    ModelRequest,
    NoHealthyServerError,
    RolloutController,
    RolloutTimeoutError,
    UnknownTaskIdError,
    WorkflowError,
    WorkflowExecutor,
)
from rollout_kit.tracing import Tracer
from tests._local_engine import LocalEngine
from tests.sim.helpers import until

pytestmark = pytest.mark.timeout(30)


class EchoWorkflow:
    """Generates once; rejects data with ``reject``; raises on ``boom``; sleeps ``sleep``."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("sleep"):
                await asyncio.sleep(data["sleep"])
            if data.get("boom"):
                raise ValueError(f"boom {data['boom']}")
            if data.get("reject"):
                return None
        resp = await engine.generate_async(ModelRequest(text=f"item {data}"))
        return {"data": data, "text": resp.text, "tag": self.tag}


class Gate:
    """Workflow that blocks until ``open()``: makes ordering deterministic."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.started = 0

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        self.started += 1
        await self.event.wait()
        return {"data": data}


def not_a_workflow() -> None:  # referenced by import path in a test
    pass


async def test_ids_sequential_and_results_carry_ids() -> None:
    ex = RolloutController(LocalEngine())
    ids = [ex.submit(i, EchoWorkflow()) for i in range(20)]
    assert ids == list(range(20))
    res = await ex.wait_async(20)
    assert sorted(r.task_id for r in res) == ids
    assert all(r.trajectory["data"] == r.task_id for r in res)
    df = ex.tracer.tasks_df()
    assert sorted(df.index) == ids
    assert set(df["status"]) == {"accepted"}
    assert df["consume_ts"].notna().all() and df["dispatch_ts"].notna().all()
    await ex.close_async()


async def test_completion_order() -> None:
    ex = RolloutController(LocalEngine())
    a = ex.submit({"sleep": 0.15}, EchoWorkflow())
    b = ex.submit({"sleep": 0.0}, EchoWorkflow())
    c = ex.submit({"sleep": 0.05}, EchoWorkflow())
    res = await ex.wait_async(3)
    assert [r.task_id for r in res] == [b, c, a]


async def test_concurrent_submitters_tasks_and_threads() -> None:
    ex = RolloutController(LocalEngine())
    got: list[list[int]] = []

    async def submitter() -> None:
        mine = []
        for i in range(25):
            mine.append(ex.submit(i, EchoWorkflow()))
            await asyncio.sleep(0)
        got.append(mine)

    def thread_submitter() -> None:
        got.append([ex.submit(i, EchoWorkflow()) for i in range(25)])

    threads = [threading.Thread(target=thread_submitter) for _ in range(4)]
    for t in threads:
        t.start()
    await asyncio.gather(*(submitter() for _ in range(4)))
    for t in threads:
        await asyncio.to_thread(t.join)
    # the ids are registered at submit: waiting for 200 needs no hand-over to have run
    all_ids = [i for g in got for i in g]
    assert sorted(all_ids) == list(range(200))
    assert all(g == sorted(g) for g in got)  # each submitter sees increasing ids
    res = await ex.wait_async(200)
    assert sorted(r.task_id for r in res) == list(range(200))
    assert sorted(ex.tracer.tasks_df().index) == list(range(200))


async def test_explicit_and_auto_ids_never_collide() -> None:
    ex = RolloutController(LocalEngine())
    assert ex.submit(0, EchoWorkflow(), task_id=2) == 2
    assert [ex.submit(i, EchoWorkflow()) for i in range(3)] == [0, 1, 3]
    with pytest.raises(DuplicateTaskIdError):
        ex.submit(0, EchoWorkflow(), task_id=3)
    res = await ex.wait_async()
    assert sorted(r.task_id for r in res) == [0, 1, 2, 3]


async def test_filtering_and_failure() -> None:
    ex = RolloutController(LocalEngine())
    ok = ex.submit({"x": 1}, EchoWorkflow())
    none = ex.submit({"reject": True}, EchoWorkflow())
    filt = ex.submit({"x": 2}, EchoWorkflow(), should_accept_fn=lambda traj: False)
    bad = ex.submit({"boom": 7}, EchoWorkflow())
    res = {r.task_id: r for r in await ex.wait_async(4)}
    assert res[ok].status == "accepted" and res[ok].ok
    assert (res[none].status, res[none].reason) == ("rejected", "returned_none")
    assert (res[filt].status, res[filt].reason) == ("rejected", "should_accept_fn")
    assert res[bad].status == "failed" and isinstance(res[bad].error, ValueError)
    assert res[bad].traceback is not None and "boom 7" in res[bad].traceback
    df = ex.tracer.tasks_df()
    for tid, r in res.items():
        assert df.loc[tid, "status"] == r.status
    assert "boom 7" in str(df.loc[bad, "error"])
    st = ex.stats()
    assert (st["accepted"], st["rejected"], st["failed"]) == (1, 2, 1)


async def test_raise_on_failure_keeps_other_results() -> None:
    ex = RolloutController(LocalEngine())
    bad = ex.submit({"boom": 1}, EchoWorkflow())
    good = ex.submit({"sleep": 0.02}, EchoWorkflow())
    await asyncio.sleep(0.05)
    with pytest.raises(WorkflowError) as info:
        await ex.wait_async(2, raise_on_failure=True)
    assert info.value.task_id == bad
    assert isinstance(info.value.__cause__, ValueError)
    [r] = await ex.wait_async(1)
    assert r.task_id == good


async def test_wait_timeout_loses_nothing() -> None:
    ex = RolloutController(LocalEngine())
    tid = ex.submit({"sleep": 0.2}, EchoWorkflow())
    with pytest.raises(RolloutTimeoutError):
        await ex.wait_async(1, timeout=0.02)
    with pytest.raises(RolloutTimeoutError):
        await ex.wait_for_async(tid, timeout=0.02)
    [r] = await ex.wait_async(1, timeout=5)
    assert r.task_id == tid and r.ok


async def test_wait_for_and_unknown_ids() -> None:
    ex = RolloutController(LocalEngine())
    tid = ex.submit(1, EchoWorkflow())
    r = await ex.wait_for_async(tid)
    assert r.task_id == tid
    with pytest.raises(UnknownTaskIdError, match="already consumed"):
        await ex.wait_for_async(tid)
    with pytest.raises(UnknownTaskIdError, match="never submitted"):
        await ex.wait_for_async(99)
    with pytest.raises(ConfigError, match="outstanding"):
        await ex.wait_async(1)


async def test_bad_workflow_specs() -> None:
    ex = RolloutController(LocalEngine())
    with pytest.raises(ConfigError, match="cannot import module"):
        ex.submit(1, "no_such_pkg.mod:Flow")
    with pytest.raises(ConfigError, match="has no attribute"):
        ex.submit(1, "tests.test_executor:Missing")
    with pytest.raises(ConfigError, match="not a workflow"):
        ex.submit(1, "tests.test_executor:not_a_workflow")
    with pytest.raises(ConfigError, match="not a workflow"):
        ex.submit(1, object())
    with pytest.raises(ConfigError, match="workflow_kwargs only apply"):
        ex.submit(1, EchoWorkflow(), workflow_kwargs={"tag": "x"})
    with pytest.raises(ConfigError, match="should_accept_fn"):
        ex.submit(1, EchoWorkflow(), should_accept_fn=42)  # type: ignore[arg-type]
    assert ex.stats()["submitted"] == 0  # nothing half-submitted
    assert ex.submit(1, EchoWorkflow) == 0  # ids were not burnt


async def test_class_and_import_path_specs() -> None:
    ex = RolloutController(LocalEngine())
    a = ex.submit(1, EchoWorkflow, workflow_kwargs={"tag": "cls"})
    b = ex.submit(2, "tests.test_executor:EchoWorkflow", workflow_kwargs={"tag": "path"})
    c = ex.submit(3, "tests.test_executor.EchoWorkflow", should_accept_fn="builtins:bool")
    res = {r.task_id: r for r in await ex.wait_async(3)}
    assert res[a].trajectory["tag"] == "cls"
    assert res[b].trajectory["tag"] == "path"
    assert res[c].ok


async def test_max_concurrency_and_pause_resume() -> None:
    engine = LocalEngine()
    ex = RolloutController(engine, executor_config=ExecutorConfig(max_concurrent_rollouts=2))
    gate = Gate()
    ids = [ex.submit(i, gate) for i in range(5)]
    await until(lambda: gate.started == 2, "two rollouts started")
    assert ex.stats()["running"] == 2 and ex.stats()["enqueued"] == 3
    ex.pause()
    gate.event.set()
    await until(lambda: ex.stats()["running"] == 0, "the running rollouts ended")
    assert gate.started == 2 and ex.stats()["enqueued"] == 3
    with pytest.raises(ControllerStateError, match="paused"):
        await ex.wait_async(5)  # would wait forever
    with pytest.raises(RolloutTimeoutError):
        await ex.wait_async(5, timeout=0.02)
    ex.resume()
    res = await ex.wait_async(5)
    assert sorted(r.task_id for r in res) == ids


async def test_staleness_stall_and_release() -> None:
    engine = LocalEngine()
    cfg = ExecutorConfig(max_staleness=0, consumer_batch_size=2)
    ex = RolloutController(engine, executor_config=cfg)
    ids = [ex.submit(i, EchoWorkflow()) for i in range(6)]
    first = await ex.wait_async(2)
    assert [r.task_id for r in first] == ids[:2]
    st = ex.stats()
    assert st["capacity"] == 0 and st["enqueued"] == 4 and st["accepted"] == 2
    with pytest.raises(ControllerStateError, match=r"set_version\(1\)"):
        await ex.wait_async(2)
    with pytest.raises(RolloutTimeoutError):
        await ex.wait_async(2, timeout=0.02)
    ex.set_version(1)
    second = await ex.wait_async(2)
    assert [r.task_id for r in second] == ids[2:4]
    assert ex.stats()["version"] == 1


async def test_cancel_and_cancel_all() -> None:
    ex = RolloutController(LocalEngine(), executor_config=ExecutorConfig(max_concurrent_rollouts=1))
    gate = Gate()
    running = ex.submit(0, gate)
    queued = ex.submit(1, gate)
    other = ex.submit(2, gate)
    await until(lambda: gate.started == 1, "the first rollout started")
    assert ex.cancel(queued) is True
    assert ex.cancel(running) is True
    assert ex.cancel_all() == 1
    res = {r.task_id: r for r in await ex.wait_async(3)}
    assert {r.status for r in res.values()} == {"cancelled"}
    assert set(res) == {running, queued, other}
    assert set(ex.tracer.tasks_df()["status"]) == {"cancelled"}


async def test_rollout_batch_input_order_with_rejections() -> None:
    ex = RolloutController(LocalEngine(), executor_config=ExecutorConfig(queue_size=3))
    data = [{"sleep": 0.03 * (5 - i), "reject": i % 2 == 1, "i": i} for i in range(8)]
    res = await ex.rollout_batch_async(data, EchoWorkflow())
    assert len(res) == 8
    assert [r.task_id for r in res] == list(range(8))
    assert [r.status for r in res] == ["accepted", "rejected"] * 4
    assert all(r.trajectory["data"]["i"] == i for i, r in enumerate(res) if r.ok)


async def test_rollout_batch_timeout_results_go_to_wait() -> None:
    ex = RolloutController(LocalEngine())
    with pytest.raises(RolloutTimeoutError):
        await ex.rollout_batch_async([{"sleep": 0.1}] * 3, EchoWorkflow(), timeout=0.02)
    res = await ex.wait_async(3)
    assert sorted(r.task_id for r in res) == [0, 1, 2]


async def test_prepare_batch_filters_and_honours_new_arguments() -> None:
    ex = RolloutController(LocalEngine(), executor_config=ExecutorConfig(queue_size=4))
    data = iter([{"i": i, "reject": i % 3 == 0} for i in range(30)])
    batch = await ex.prepare_batch_async(data, EchoWorkflow("a"), batch_size=4)
    assert len(batch) == 4 and all(r.ok and r.trajectory["tag"] == "a" for r in batch)
    batch2 = await ex.prepare_batch_async(data, EchoWorkflow("b"), batch_size=2)
    assert all(r.trajectory["tag"] == "b" for r in batch2)  # AReaL reused the first call's
    assert not {r.task_id for r in batch} & {r.task_id for r in batch2}
    with pytest.raises(ConfigError, match="queue bound"):
        await ex.prepare_batch_async(data, EchoWorkflow(), batch_size=5)
    with pytest.raises(ConfigError, match="data ran out"):
        await ex.prepare_batch_async([{"reject": True}] * 2, EchoWorkflow(), batch_size=1)
    with pytest.raises(WorkflowError):
        await ex.prepare_batch_async([{"boom": 1}], EchoWorkflow(), batch_size=1)


async def test_submit_after_close_and_no_orphans() -> None:
    ex = RolloutController(LocalEngine())
    gate = Gate()
    tid = ex.submit(0, gate)
    await until(lambda: gate.started == 1, "the rollout started")
    await ex.close_async()
    with pytest.raises(ControllerStateError, match="closed"):
        ex.submit(1, EchoWorkflow())
    [r] = await ex.wait_async()
    assert (r.task_id, r.status) == (tid, "cancelled")
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("rollout-")]
    assert leftover == []


async def test_aclose_drain_finishes_tasks() -> None:
    ex = RolloutController(LocalEngine())
    ex.submit({"sleep": 0.02}, EchoWorkflow())
    await ex.close_async(drain=True)
    [r] = await ex.wait_async()
    assert r.ok


async def test_queue_full_submit_raises() -> None:
    ex = RolloutController(LocalEngine(), executor_config=ExecutorConfig(max_concurrent_rollouts=1,
                                                               queue_size=1))
    gate = Gate()
    ex.submit(0, gate)
    ex.submit(1, gate)
    with pytest.raises(ControllerStateError, match="queue is full"):
        ex.submit(2, gate)
    gate.event.set()
    assert len(await ex.wait_async(2)) == 2


async def test_sync_rollout_batch_inside_running_loop() -> None:
    ex = RolloutController(LocalEngine())
    res = ex.rollout_batch([1, 2, 3], EchoWorkflow())  # blocking call inside async def
    assert [r.task_id for r in res] == [0, 1, 2] and all(r.ok for r in res)


def test_sync_use_without_loop_private_runner() -> None:
    ex = RolloutController(LocalEngine(), tracer=Tracer())
    ids = [ex.submit(i, EchoWorkflow()) for i in range(3)]  # no loop running
    res = ex.wait(3, timeout=5)
    assert sorted(r.task_id for r in res) == ids
    assert [r.task_id for r in ex.rollout_batch([7, 8], EchoWorkflow())] == [3, 4]
    ex.close()


def test_other_loop_is_refused() -> None:
    async def make() -> WorkflowExecutor:
        ex = RolloutController(LocalEngine())
        ex.submit(1, EchoWorkflow())
        await ex.wait_async(1)
        return ex

    loop = asyncio.new_event_loop()
    try:
        ex = loop.run_until_complete(make())
    finally:
        loop.close()

    async def use() -> None:
        ex.submit(1, EchoWorkflow())

    loop2 = asyncio.new_event_loop()
    try:
        with pytest.raises(ControllerStateError, match="another event loop"):
            loop2.run_until_complete(use())
    finally:
        loop2.close()


async def test_big_submit_is_dispatched_in_slices_across_loop_turns() -> None:
    from rollout_kit._executor import DISPATCH_SLICE

    ex = RolloutController(LocalEngine("w"),
                           executor_config=ExecutorConfig(max_concurrent_rollouts=1000))
    ids = [ex.submit({"sleep": 0.05}, EchoWorkflow()) for _ in range(5 * DISPATCH_SLICE)]
    assert ex.stats()["running"] == DISPATCH_SLICE  # the rest waits for later loop turns
    turns = 0
    while ex.stats()["running"] < len(ids):
        await asyncio.sleep(0)
        turns += 1
    assert turns >= 4  # one slice per turn, never all at once
    res = await ex.wait_async(len(ids))
    assert sorted(r.task_id for r in res) == ids and {r.status for r in res} == {"accepted"}
    await ex.close_async()


class PickyWorkflow(EchoWorkflow):
    """``validate`` refuses non-int data; ``ValueError`` for negatives (wrapped)."""

    def validate(self, data: Any) -> None:
        if not isinstance(data, int):
            raise ConfigError(f"PickyWorkflow wants an int, got {type(data).__name__}")
        if data < 0:
            raise ValueError("negative")


async def test_submit_runs_validate_before_taking_an_id() -> None:
    ex = RolloutController(LocalEngine())
    with pytest.raises(ConfigError, match="wants an int, got str"):
        ex.submit("bare string", PickyWorkflow())
    with pytest.raises(ConfigError, match=r"PickyWorkflow.validate\(data\) refused.*negative"):
        ex.submit(-1, PickyWorkflow)  # a class: its first instance validates
    with pytest.raises(ConfigError):
        ex.submit("x", PickyWorkflow(), task_id=7)  # an explicit id is not claimed either
    assert ex.ids.peek == 0 and not ex.ids.is_used(7) and ex.stats()["submitted"] == 0
    assert ex.submit(3, PickyWorkflow()) == 0
    assert ex.submit(4, PickyWorkflow(), task_id=7) == 7
    assert [r.status for r in await ex.wait_async(2)] == ["accepted"] * 2
    assert sorted(ex.tracer.tasks_df().index) == [0, 7]
    await ex.close_async()


async def test_batch_calls_validate_every_item_before_any_id() -> None:
    ex = RolloutController(LocalEngine())
    with pytest.raises(ConfigError, match=r"data\[2\]: PickyWorkflow wants an int"):
        await ex.rollout_batch_async([1, 2, "three", 4], PickyWorkflow())
    assert ex.ids.peek == 0 and ex.stats()["submitted"] == 0
    with pytest.raises(ConfigError, match=r"item 1 of this call's data: .*wants an int"):
        await ex.prepare_batch_async(iter([1, "two", 3]), PickyWorkflow(), batch_size=3)
    assert ex.ids.peek == 1 and ex.stats()["submitted"] == 1  # only the item before it
    [res] = await ex.wait_async(1)  # released to wait(), nothing lost
    assert res.ok and res.task_id == 0
    res2 = await ex.rollout_batch_async([5, 6], PickyWorkflow())
    assert [r.task_id for r in res2] == [1, 2] and all(r.ok for r in res2)
    await ex.close_async()


async def test_executor_alone_runs_given_ids_and_reports_to_its_sink() -> None:
    """The executor is given its engine, each task id and a sink; it keeps no results."""
    from rollout_kit._executor import Job, make_recipe

    got: list[Any] = []
    tracer = Tracer()
    ex = WorkflowExecutor(LocalEngine("w"), sink=got.append, tracer=tracer, worker="w")
    recipe = make_recipe(EchoWorkflow(), None, None)
    for tid in (7, 3, 11):
        ex.submit(Job(tid, {"i": tid}, recipe))
    while len(got) < 3:
        await asyncio.sleep(0)
    assert sorted(r.task_id for r in got) == [3, 7, 11]
    assert {r.status for r in got} == {"accepted"} and {r.worker for r in got} == {"w"}
    assert sorted(tracer.tasks_df().index) == [3, 7, 11]
    assert ex.stats()["submitted"] == 3 and not ex.has_tasks()
    await ex.close_async()


async def test_areal_adapter_keeps_areals_calling_style() -> None:
    from rollout_kit.areal import AReaLEngine

    eng = AReaLEngine(LocalEngine("w"))
    tid = eng.submit({"i": 1}, EchoWorkflow())
    [r] = await eng.controller.wait_async(1)
    assert r.task_id == tid == 0 and r.ok
    resp = await eng.agenerate(ModelRequest(text="hi"))  # AReaL's name
    assert resp.text == "hi"
    assert list(eng.traces().index) == [0]
    await eng.controller.close_async()


class RaisingWorkflow:
    """Raises the exception it was given, as if ``engine.agenerate`` had."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        raise self.exc


@pytest.mark.parametrize(("exc", "reason", "brief"), [
    (NoHealthyServerError("no server of sglang answered /health", servers=["127.0.0.1:1"]),
     "no_healthy_server", "no healthy server (127.0.0.1:1)"),
    (EngineTimeoutError("h:2 /generate: no complete answer", server="h:2"), "timeout",
     "timeout (h:2)"),
    (EngineServerError("h:2 /generate answered HTTP 500", status=500, server="h:2"),
     "server_error", "server error HTTP 500 (h:2)"),
    (EngineConnectionError("cannot connect to h:2", server="h:2"), "connection_error",
     "connection error (h:2)"),
    (ValueError("a bug in the workflow"), "workflow_exception", None),
], ids=lambda v: v if isinstance(v, str) else None)
async def test_failure_reason_says_whose_fault_it_was(exc: Exception, reason: str,
                                                      brief: str | None) -> None:
    ex = RolloutController(LocalEngine())
    tid = ex.submit({}, RaisingWorkflow(exc))
    res = await ex.wait_for_async(tid)
    assert res.status == "failed" and res.reason == reason and res.error is exc
    row = ex.tracer.tasks_df().loc[tid]
    assert row["reason"] == reason
    full = f"{type(exc).__name__}: {exc}"
    assert row["error"] == (full if brief is None else f"{brief} — {full}")
    with pytest.raises(WorkflowError, match=f"task {tid + 1} failed: {reason}"):
        await ex.wait_for_async(ex.submit({}, RaisingWorkflow(exc)), raise_on_failure=True)
    await ex.close_async()


def test_a_closed_controller_is_freed_by_reference_counting_alone() -> None:
    """No reference cycle outlives close: with the collector off, dropping the last
    reference frees the executor, its engine and its tracer (a cycle would keep them until
    a full collection, and ``GcHold`` freezes such garbage when the next controller
    starts)."""
    import gc
    import weakref

    async def run() -> dict[str, weakref.ref[Any]]:
        engine = LocalEngine()
        ctl = RolloutController(engine, executor_config=ExecutorConfig(
            max_concurrent_rollouts=8))
        await ctl.initialize_async()
        for i in range(20):
            ctl.submit({"sleep": 0, "i": i}, EchoWorkflow())
        assert len(await ctl.wait_async(20)) == 20
        await ctl.close_async()
        return {"engine": weakref.ref(engine), "tracer": weakref.ref(ctl.tracer),
                "executor": weakref.ref(ctl.workers[0].executor)}

    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        refs = asyncio.run(run())
        alive = [name for name, ref in refs.items() if ref() is not None]
    finally:
        if enabled:
            gc.enable()
    assert alive == []
