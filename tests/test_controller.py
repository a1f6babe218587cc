"""RolloutController: one id source across workers, ids handed down, traces agree with results."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rollout_kit import (
    ConfigError,
    ControllerStateError,
    DuplicateTaskIdError,
    ExecutorConfig,
    RolloutController,
    RolloutTimeoutError,
)
from rollout_kit._executor import Job
from rollout_kit.workers import LocalScheduler, LocalWorker, Worker, WorkerSpec
from tests._local_engine import LocalEngine
from tests.test_executor import EchoWorkflow

pytestmark = pytest.mark.timeout(30)


class RecordingPool(LocalScheduler):
    """A worker pool whose workers record the task ids the controller hands them."""

    def __init__(self) -> None:
        super().__init__()
        self.given: dict[str, list[int]] = {}

    def create_workers(self, spec: WorkerSpec) -> list[Worker]:
        return [RecordingWorker(w, self.given.setdefault(w.name, []))
                for w in super().create_workers(spec)]


class RecordingWorker(LocalWorker):
    def __init__(self, inner: Worker, given: list[int]) -> None:
        assert isinstance(inner, LocalWorker)
        super().__init__(inner.engine, inner.executor, owns_engine=inner.owns_engine)
        self.given = given

    def submit(self, job: Job) -> None:
        self.given.append(job.task_id)
        super().submit(job)


async def test_ids_across_workers_and_trace_index() -> None:
    pool = RecordingPool()
    ctl = RolloutController([LocalEngine("a"), LocalEngine("b")], scheduler=pool)
    ids = [ctl.submit(i, EchoWorkflow()) for i in range(10)]
    assert ids == list(range(10))
    assert pool.given == {"a": [0, 2, 4, 6, 8], "b": [1, 3, 5, 7, 9]}  # round robin
    res = await ctl.wait_async(10)
    assert sorted(r.task_id for r in res) == ids
    assert {r.worker for r in res} == {"a", "b"}
    df = ctl.traces()
    assert sorted(df.index) == ids
    for r in res:
        assert df.loc[r.task_id, "status"] == r.status
        assert df.loc[r.task_id, "worker"] == r.worker
    assert ctl.stats()["accepted"] == 10
    await ctl.close_async()


async def test_explicit_ids_pass_through_every_layer() -> None:
    pool = RecordingPool()
    ctl = RolloutController(LocalEngine("w"), scheduler=pool)
    assert ctl.submit({"x": 1}, EchoWorkflow(), task_id=41) == 41
    assert ctl.submit({"x": 2}, EchoWorkflow()) == 0
    with pytest.raises(DuplicateTaskIdError):
        ctl.submit({"x": 3}, EchoWorkflow(), task_id=41)
    assert pool.given == {"w": [41, 0]}
    r = await ctl.wait_for_async(41)
    assert r.task_id == 41 and r.trajectory["data"] == {"x": 1}
    await ctl.wait_async(1)
    assert sorted(ctl.traces().index) == [0, 41]
    await ctl.close_async()


async def test_concurrent_submitters_threads_and_tasks() -> None:
    ctl = RolloutController([LocalEngine("a"), LocalEngine("b")],
                            scheduler=LocalScheduler("least_loaded"))
    got: list[list[int]] = []

    async def submitter() -> None:
        mine = []
        for i in range(20):
            mine.append(ctl.submit(i, EchoWorkflow()))
            await asyncio.sleep(0)
        got.append(mine)

    threads = [threading.Thread(target=lambda: got.append(
        [ctl.submit(i, EchoWorkflow()) for i in range(20)])) for _ in range(3)]
    for t in threads:
        t.start()
    await asyncio.gather(*(submitter() for _ in range(3)))
    for t in threads:
        await asyncio.to_thread(t.join)
    ids = sorted(i for g in got for i in g)
    assert ids == list(range(120))
    res = await ctl.wait_async(120)
    assert sorted(r.task_id for r in res) == ids
    assert sorted(ctl.traces().index) == ids
    await ctl.close_async()


async def test_batches_and_filters() -> None:
    ctl = RolloutController([LocalEngine("a"), LocalEngine("b")],
                            executor_config=ExecutorConfig(queue_size=4))
    data = [{"i": i, "reject": i % 2 == 1} for i in range(6)]
    res = await ctl.rollout_batch_async(data, EchoWorkflow())
    assert [r.task_id for r in res] == list(range(6))
    assert [r.status for r in res] == ["accepted", "rejected"] * 3
    batch = await ctl.prepare_batch_async(iter(data * 3), EchoWorkflow(), batch_size=3)
    assert len(batch) == 3 and all(r.ok for r in batch)
    df = ctl.traces()
    assert df["status"].value_counts().to_dict().get("accepted", 0) >= 6
    await ctl.close_async()


async def test_staleness_pause_and_version() -> None:
    ctl = RolloutController(LocalEngine("a"),
                            executor_config=ExecutorConfig(max_staleness=0))
    ids = [ctl.submit(i, EchoWorkflow()) for i in range(3)]
    [first] = await ctl.wait_async(1)
    assert first.task_id == ids[0]
    with pytest.raises(ControllerStateError, match="set_version"):
        await ctl.wait_async(1)
    ctl.set_version(1)
    assert ctl.get_version() == 1
    [second] = await ctl.wait_async(1)
    assert second.task_id == ids[1]
    ctl.pause()
    ctl.set_version(5)
    with pytest.raises(RolloutTimeoutError):
        await ctl.wait_async(1, timeout=0.02)
    ctl.resume()
    [third] = await ctl.wait_async(1)
    assert third.task_id == ids[2]
    await ctl.pause_generation_async()
    await ctl.continue_generation_async()
    await ctl.close_async()


async def test_sync_calls_inside_running_loop_and_close() -> None:
    ctl = RolloutController(LocalEngine("a"))
    res = ctl.rollout_batch([1, 2], EchoWorkflow())
    assert [r.task_id for r in res] == [0, 1]
    tid = ctl.submit({"sleep": 5}, EchoWorkflow())
    await asyncio.sleep(0.01)
    assert ctl.cancel(tid)
    [r] = ctl.wait()
    assert r.status == "cancelled"
    ctl.close()
    with pytest.raises(ControllerStateError):
        ctl.submit(1, EchoWorkflow())


def test_script_mode_and_recreate() -> None:
    eng = LocalEngine("a")
    for _ in range(2):  # re-running a notebook cell re-creates the controller
        ctl = RolloutController(eng)
        ids = [ctl.submit(i, EchoWorkflow()) for i in range(3)]
        assert ids == [0, 1, 2]
        assert sorted(r.task_id for r in ctl.wait(timeout=5)) == ids
        ctl.close()


def test_bad_construction() -> None:
    with pytest.raises(ConfigError, match="needs engines"):
        RolloutController()
    with pytest.raises(ConfigError, match="distinct names"):
        RolloutController([LocalEngine("x"), LocalEngine("x")])
    with pytest.raises(ConfigError, match="policy"):
        LocalScheduler("random")  # type: ignore[arg-type]


def test_progress_bar_for_blocking_batches(capsys: pytest.CaptureFixture[str]) -> None:
    with RolloutController([LocalEngine("a")]) as ctl:
        res = ctl.rollout_batch(list(range(7)), EchoWorkflow(), progress=True)
        assert [r.task_id for r in res] == list(range(7))
        got = ctl.prepare_batch(iter(range(100)), EchoWorkflow(), batch_size=3, progress=True)
        assert len(got) == 3
    err = capsys.readouterr().err
    assert "rollout_batch: 100%" in err and "7/7" in err
    assert "prepare_batch (accepted): 100%" in err and "3/3" in err


async def test_bad_data_raises_in_submit_and_batches_without_spending_ids() -> None:
    from rollout_kit import SingleTurnWorkflow

    ctl = RolloutController([LocalEngine("a"), LocalEngine("b")])
    wf = SingleTurnWorkflow(lambda *a, **k: 1.0)
    with pytest.raises(ConfigError, match="data must be a prompt str, or a mapping"):
        ctl.submit(42, wf)
    with pytest.raises(ConfigError, match=r"data\['prompt'\] is missing"):
        ctl.submit({"question": "?"}, wf, worker="b")
    with pytest.raises(ConfigError, match=r"data\[1\]: data must be"):
        await ctl.rollout_batch_async(["ok", None, "ok"], wf)
    with pytest.raises(ConfigError, match="of this call's data"):
        await ctl.prepare_batch_async([3], wf, batch_size=1)
    assert ctl.ids.peek == 0 and ctl.stats()["submitted"] == 0 and len(ctl.traces()) == 0
    assert ctl.submit("bare string", wf) == 0
    assert (await ctl.wait_for_async(0)).ok
    await ctl.close_async()


async def test_unreachable_server_fails_tasks_with_no_healthy_server() -> None:
    """Nothing listens on 127.0.0.1:1: the reason and error say so, not workflow_exception."""
    from rollout_kit import EngineConfig, NoHealthyServerError, SingleTurnWorkflow, Timeouts

    cfg = EngineConfig(timeouts=Timeouts(setup=0.3, health=0.2, connect=0.2))
    ctl = RolloutController(sglang=["127.0.0.1:1"], engine_config=cfg)
    try:
        res = await ctl.rollout_batch_async(["What is 2+2?", "What is 3+3?"],
                                            SingleTurnWorkflow(lambda *a, **k: 1.0))
        df = ctl.traces()
    finally:
        await ctl.close_async()
    assert [r.reason for r in res] == ["no_healthy_server"] * 2
    assert all(isinstance(r.error, NoHealthyServerError) for r in res)
    assert df["reason"].tolist() == ["no_healthy_server"] * 2
    assert all(e.startswith("no healthy server (127.0.0.1:1) — NoHealthyServerError: ")
               for e in df["error"]), df["error"].tolist()
