"""RayScheduler on a local Ray instance against simulator servers run as subprocesses.

Ids come only from the controller and are echoed by worker actors; traces of every worker
merge into the controller's tracer; a killed worker's tasks finish elsewhere under the same
ids; control calls fan out; workflow instances keep their state; bad input fails clearly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'rollout-kit[ray]')")

from rollout_kit import (  # noqa: E402
    ConfigError,
    ExecutorConfig,
    ModelRequest,
    RolloutController,
    RolloutResult,
    SchedulerError,
    SingleTurnWorkflow,
)
from rollout_kit._loop import LoopBinding  # noqa: E402
from rollout_kit.tracing import Tracer  # noqa: E402
from rollout_kit.workers import RayScheduler, WorkerSpec  # noqa: E402
from rollout_kit.workers._ray import RayWorkerHandle, loopback  # noqa: E402
from rollout_kit.workers._ray.loopback import init_local_ray, non_loopback_listeners  # noqa: E402

pytestmark = pytest.mark.timeout(120)

# workers cannot import this test module: ship its classes and functions by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    started = not ray.is_initialized()
    if started:
        # what RayScheduler does when it starts Ray itself
        init_local_ray(num_cpus=2, log_to_driver=False, configure_logging=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollout_kit", "sim", "--api", "sglang", "--num-servers", "1",
         "--zero-latency", "--seed", "1"],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def length_reward(prompt: str, completion: str, prompt_ids: list[int],
                  completion_ids: list[int], **_: Any) -> float:
    return float(len(completion) % 7)


class ProbeWorkflow:
    """Stateful: counts its calls and the peak number of concurrent episodes."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.calls = 0
        self.active = 0
        self.peak = 0

    async def arun_episode(self, engine: Any, data: Any) -> dict[str, Any]:
        self.calls += 1
        call_no = self.calls
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            resp = await engine.generate_async(ModelRequest(text=f"probe {data}"))
            await asyncio.sleep(0.05)
        finally:
            self.active -= 1
        return {"data": data, "pid": os.getpid(), "calls": call_no, "peak": self.peak,
                "tag": self.tag, "tokens": resp.output_len}


class SleepWorkflow:
    """Generates once, then sleeps ``data`` seconds (keeps tasks in flight for kills)."""

    async def arun_episode(self, engine: Any, data: float) -> dict[str, Any]:
        await engine.generate_async(ModelRequest(text="sleep"))
        await asyncio.sleep(data)
        return {"pid": os.getpid()}


class LockedWorkflow:
    """Holds a lock: cannot be pickled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        return data


async def test_ids_traces_state_and_fanout(ray_local: None, sim_url: str) -> None:
    sched = RayScheduler(num_workers=2)
    ctl = RolloutController(sglang=[sim_url], scheduler=sched,
                            executor_config=ExecutorConfig(max_concurrent_rollouts=2))
    await ctl.initialize_async()
    pids = {w.pid for w in sched.workers}
    assert len(pids) == 2 and os.getpid() not in pids

    # ids: one source, echoed by the workers, identical in results and trace index
    wf = SingleTurnWorkflow(reward_fn=length_reward)
    ids = [ctl.submit({"prompt": f"q{i}"}, wf) for i in range(10)]
    assert ids == list(range(10))
    res = await ctl.wait_async(10, timeout=60)
    assert sorted(r.task_id for r in res) == ids
    assert all(r.status == "accepted" for r in res), [(r.status, r.error) for r in res]
    assert {r.worker for r in res} == {"ray0", "ray1"}
    df = ctl.traces()
    assert sorted(df.index) == ids and df.index.is_unique
    for r in res:
        assert df.loc[r.task_id, "worker"] == r.worker
        assert df.loc[r.task_id, "status"] == "accepted"
    # one time axis: controller submit <= worker start <= worker end <= controller consume
    for col_a, col_b in (("submit_ts", "dispatch_ts"), ("dispatch_ts", "start_ts"),
                         ("start_ts", "end_ts"), ("end_ts", "consume_ts")):
        assert (df[col_a] <= df[col_b] + 1e-3).all(), (col_a, col_b, df[[col_a, col_b]])
    spans = ctl.spans()
    assert set(spans.loc[spans["phase"] == "generate", "task_id"]) == set(ids)

    # a workflow instance keeps its state per worker; per-worker capacity (2) holds
    probe = ProbeWorkflow(tag="set-before-submit")
    more = [ctl.submit(i, probe) for i in range(12)]
    assert more == list(range(10, 22))
    out = await ctl.wait_async(12, timeout=60)
    trajs = [r.trajectory for r in out]
    assert all(t["tag"] == "set-before-submit" for t in trajs)
    for pid in pids:
        calls = sorted(t["calls"] for t in trajs if t["pid"] == pid)
        assert calls == list(range(1, len(calls) + 1)) and len(calls) == 6
    assert max(t["peak"] for t in trajs) <= 2
    assert probe.calls == 0  # the user's copy is not mutated by remote runs

    # unserializable workflow: error at submit naming the object, no id consumed
    with pytest.raises(ConfigError, match="LockedWorkflow"):
        ctl.submit(1, LockedWorkflow())
    assert ctl.submit(0.0, SleepWorkflow()) == 22
    await ctl.wait_async(1, timeout=30)

    # fan-out of pause / resume / set_version to every worker
    ctl.pause()
    tid = ctl.submit(0.0, SleepWorkflow())
    await asyncio.sleep(0.3)
    assert ctl.peek(tid) is None
    remote = [await w.remote_stats() for w in sched.workers]
    assert all(s["paused"] for s in remote)
    ctl.resume()
    ctl.set_version(3)
    await ctl.wait_for_async(tid, timeout=30)
    remote = [await w.remote_stats() for w in sched.workers]
    assert [s["paused"] for s in remote] == [False, False]
    assert [s["version"] for s in remote] == [3, 3] and ctl.get_version() == 3
    await ctl.pause_generation_async()
    await ctl.continue_generation_async()
    await ctl.close_async()
    assert not sched.live_workers()


async def test_killed_workers_tasks_finish_elsewhere_with_same_ids(
        ray_local: None, sim_url: str) -> None:
    sched = RayScheduler(num_workers=3)
    ctl = RolloutController(sglang=[sim_url], scheduler=sched)
    await ctl.initialize_async()
    w0, w1, w2 = sched.workers
    ids = [ctl.submit(1.0, SleepWorkflow()) for _ in range(9)]
    assert ids == list(range(9))
    await asyncio.sleep(0.4)  # every task is running on its worker now
    assert w0.pid is not None
    os.kill(w0.pid, signal.SIGKILL)  # the process dies
    ray.kill(w1.actor)  # the actor is killed through Ray
    res = await ctl.wait_async(9, timeout=60)
    assert sorted(r.task_id for r in res) == ids  # none lost, none duplicated
    assert all(r.status == "accepted" for r in res), [(r.status, r.error) for r in res]
    assert {r.worker for r in res} == {"ray2"}
    assert {r.trajectory["pid"] for r in res} == {w2.pid}
    assert not w0.alive and not w1.alive and w2.alive
    df = ctl.traces()
    assert sorted(df.index) == ids and (df["worker"] == "ray2").all()
    moved = df.loc[[0, 1, 3, 4, 6, 7]]
    assert (moved["redispatched"] >= 1).all()
    assert set(moved["lost_workers"]) <= {"ray0", "ray1", "ray0,ray1", "ray1,ray0"}
    assert df.loc[[2, 5, 8], "redispatched"].isna().all()
    # new submissions go to the survivor only
    tid = ctl.submit(0.0, SleepWorkflow())
    assert (await ctl.wait_for_async(tid, timeout=30)).worker == "ray2"
    await ctl.close_async()


def _spec() -> WorkerSpec:
    results: list[RolloutResult] = []
    return WorkerSpec(tracer=Tracer(), sink=results.append, binding=LoopBinding())


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:127.0.0.1
    return addr.is_loopback


def _listening() -> list[tuple[int, str, str, int]]:
    """(pid, name, ip, port) of every TCP listener of this process and its descendants:
    the driver, the GCS, the raylet, the agents and the worker processes of a local Ray
    instance (and the simulator subprocess of this module)."""
    me = psutil.Process()
    out = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            name, conns = proc.name(), proc.net_connections(kind="tcp")
        except psutil.Error:  # gone meanwhile
            continue
        out += [(proc.pid, name, c.laddr.ip, c.laddr.port) for c in conns
                if c.status == psutil.CONN_LISTEN]
    return out


async def test_local_cluster_listens_on_loopback_only(ray_local: None, sim_url: str) -> None:
    sched = RayScheduler(num_workers=2)
    ctl = RolloutController(sglang=[sim_url], scheduler=sched)
    await ctl.initialize_async()
    try:
        socks = _listening()
        names = {name for _, name, _, _ in socks}
        pids = {pid for pid, _, _, _ in socks}
        # the check saw the cluster: its core servers and both worker actors listen
        assert {"gcs_server", "raylet"} <= names, socks
        assert {w.pid for w in sched.workers} <= pids, (sched.workers, socks)
        assert os.getpid() in pids  # the driver's own core-worker server
        exposed = [s for s in socks if not _loopback(s[2])]
        assert not exposed, f"listening beyond loopback: {exposed}"
    finally:
        await ctl.close_async()


def test_non_loopback_listeners_names_the_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as lo:  # a real loopback listener: not reported
        lo.bind(("127.0.0.1", 0))
        lo.listen()
        assert non_loopback_listeners([os.getpid()], descendants=False) == []

    # wide listeners are faked (this suite opens servers on 127.0.0.1 only)
    class Addr:
        def __init__(self, ip: str, port: int) -> None:
            self.ip, self.port = ip, port

    class Conn:
        def __init__(self, ip: str, port: int, status: str = psutil.CONN_LISTEN) -> None:
            self.laddr, self.status = Addr(ip, port), status

    conns = [Conn("127.0.0.1", 1), Conn("::ffff:127.0.0.1", 2), Conn("::1", 3),
             Conn("0.0.0.0", 4), Conn("::", 5), Conn("10.1.2.3", 6),
             Conn("127.0.0.2", 7), Conn("0.0.0.0", 8, psutil.CONN_ESTABLISHED)]

    class FakeProcess:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def name(self) -> str:
            return "raylet"

        def children(self, recursive: bool = False) -> list[Any]:
            return []

        def net_connections(self, kind: str) -> list[Conn]:
            return conns

    fake = type("FakePsutil", (), {"Process": FakeProcess, "Error": psutil.Error,
                                   "CONN_LISTEN": psutil.CONN_LISTEN})
    monkeypatch.setattr(loopback, "_psutil", lambda: fake)
    found = non_loopback_listeners([42])
    assert found == ["raylet (pid 42) listens on 0.0.0.0:4", "raylet (pid 42) listens on [::]:5",
                     "raylet (pid 42) listens on 10.1.2.3:6"], found


def test_choice_policies_skip_dead_workers() -> None:
    sched = RayScheduler(num_workers=3, policy="least_loaded")
    spec = _spec()
    handles = [RayWorkerHandle(f"w{i}", None, spec) for i in range(3)]
    handles[0].alive = False
    assert sched.choose(handles) in handles[1:]
    rr = RayScheduler(num_workers=3)
    assert [rr.choose(handles).name for _ in range(4)] == ["w1", "w2", "w1", "w2"]
    for h in handles:
        h.alive = False
    with pytest.raises(SchedulerError, match="died"):
        rr.choose(handles)


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError):
        RayScheduler(num_workers=0)
    with pytest.raises(ConfigError, match="exactly one"):
        RayScheduler(2).create_workers(_spec())
    from rollout_kit.engines import RemoteSGLangEngine

    spec = WorkerSpec(engines=[RemoteSGLangEngine(["127.0.0.1:9"])], tracer=Tracer(),
                      sink=lambda r: None, binding=LoopBinding())
    with pytest.raises(ConfigError, match="not engines"):
        RayScheduler(2).create_workers(spec)


def test_prepare_serializes_once_per_call() -> None:
    sched = RayScheduler(2)
    recipe = sched.prepare(SleepWorkflow(), None, None)
    assert recipe.payload is not None and recipe.factory is not None
    with pytest.raises(ConfigError, match="LockedWorkflow"):
        sched.prepare(LockedWorkflow(), None, None)
    with pytest.raises(ConfigError, match="cannot import"):
        sched.prepare("no_such_module_xyz:Flow", None, None)


def test_ray_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SchedulerError, match=r"rollout-kit\[ray\]"):
        RayScheduler(2)


def test_importing_does_not_load_ray() -> None:
    code = ("import sys, rollout_kit, rollout_kit._controller, rollout_kit.workers._ray; "
            "assert 'ray' not in sys.modules, 'ray was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_unreachable_cluster_names_the_address() -> None:
    code = ("from rollout_kit.workers import RayScheduler\n"
            "from rollout_kit._controller import RolloutController\n"
            "from rollout_kit._errors import SchedulerError\n"
            "try:\n"
            "    RolloutController(sglang=['127.0.0.1:9'],\n"
            "                      scheduler=RayScheduler(2, address='127.0.0.1:1'))\n"
            "except SchedulerError as e:\n"
            "    print('ERR', e)\n")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=90, env={**os.environ, "RAY_ADDRESS": ""})
    assert "ERR" in out.stdout and "127.0.0.1:1" in out.stdout, out.stdout + out.stderr
    assert time.monotonic() - t0 < 90
