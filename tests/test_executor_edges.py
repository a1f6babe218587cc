"""The executor at its limits: concurrency, queue bound and staleness at the edge and one
past it, the capacity formula by hand, the dispatch slice, and every way a task ends
(accepted, rejected by None or by should_accept_fn, failed, cancelled queued / running /
before its first step, closed) with what each leaves in the trace.

No fixed sleeps: workflows block on events the test opens, and the test waits for the
conditions the executor guarantees (``until``)."""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Callable
from typing import Any

import pytest

from rollout_kit import (
    ConfigError,
    ControllerStateError,
    EngineServerError,
    ExecutorConfig,
    RolloutResult,
)
from rollout_kit._executor import (
    DISPATCH_SLICE,
    Dispatcher,
    Job,
    WorkflowExecutor,
    capacity,
    error_text,
    make_recipe,
)
from rollout_kit._executor.staleness import stall_message
from rollout_kit.tracing import Tracer
from rollout_kit.tracing import schema as S
from tests._local_engine import LocalEngine

pytestmark = pytest.mark.timeout(60)


async def until(cond: Callable[[], bool], what: str = "condition") -> None:
    """Yield to the loop until ``cond()`` holds (bounded by the test's timeout)."""
    while not cond():
        await asyncio.sleep(0)


class Blocking:
    """A workflow that starts, then waits for its task's event; returns per ``data``."""

    def __init__(self) -> None:
        self.events: dict[int, asyncio.Event] = {}
        self.started: list[Any] = []

    def release(self, key: Any) -> None:
        self.events.setdefault(key, asyncio.Event()).set()

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        key = data["key"]
        self.started.append(key)
        tr_session = data.get("session")
        ev = self.events.setdefault(key, asyncio.Event())
        if tr_session is not None:
            async with tr_session():
                await ev.wait()
        else:
            await ev.wait()
        if data.get("boom"):
            raise ValueError(f"boom {key}")
        if data.get("engine_error"):
            raise EngineServerError("h:1 /generate answered HTTP 500", status=500, server="h:1")
        return None if data.get("reject") else {"key": key}


class Harness:
    """A WorkflowExecutor with a list sink, a tracer and one Blocking workflow."""

    def __init__(self, **config: Any) -> None:
        self.results: list[RolloutResult] = []
        self.tracer = Tracer()
        self.engine = LocalEngine()
        self.ex = WorkflowExecutor(self.engine, sink=self.results.append,
                                   config=ExecutorConfig(**config), tracer=self.tracer,
                                   worker="w0")
        self.flow = Blocking()
        self.recipe = make_recipe(self.flow, None, None)

    def submit(self, tid: int, **data: Any) -> None:
        self.ex.submit(Job(tid, {"key": tid, **data}, self.recipe))

    def by_id(self) -> dict[int, RolloutResult]:
        return {r.task_id: r for r in self.results}

    async def done(self, n: int) -> None:
        await until(lambda: len(self.results) >= n)


# -- the capacity formula, by hand --------------------------------------------------------


def test_capacity_formula_at_each_edge() -> None:
    plain = ExecutorConfig(max_concurrent_rollouts=3)
    assert [capacity(plain, running=r, accepted=99, version=0) for r in (0, 2, 3, 4)] == \
        [3, 1, 0, -1]  # accepted results do not count without staleness control
    st = ExecutorConfig(max_concurrent_rollouts=10, max_staleness=0, consumer_batch_size=2)
    # budget (0 + version + 1) * 2 - (accepted + running)
    assert capacity(st, running=0, accepted=0, version=0) == 2
    assert capacity(st, running=1, accepted=1, version=0) == 0  # at the edge
    assert capacity(st, running=1, accepted=2, version=0) == -1  # one past
    assert capacity(st, running=0, accepted=2, version=1) == 2
    one = ExecutorConfig(max_concurrent_rollouts=100, max_staleness=1, consumer_batch_size=3)
    assert capacity(one, running=2, accepted=1, version=2) == (1 + 2 + 1) * 3 - 3
    tight = ExecutorConfig(max_concurrent_rollouts=2, max_staleness=5, consumer_batch_size=4)
    assert capacity(tight, running=1, accepted=0, version=0) == 1  # the concurrency bound
    msg = stall_message(st, accepted=2, version=0, queued=4)
    assert msg.startswith("staleness control stalls dispatch: 4 task(s) queued, none running, "
                          "capacity 0 at version 0 (accepted=2, max_staleness=0, "
                          "consumer_batch_size=2); call set_version(1)")


@pytest.mark.parametrize("bad", [
    {"max_concurrent_rollouts": 0}, {"queue_size": 0}, {"max_staleness": -1},
    {"consumer_batch_size": 0}, {"reward_timeout": 0}, {"max_concurrent_rollouts": True},
])
def test_limit_settings_refuse_values_past_their_edge(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ExecutorConfig(**bad)
    edge = {k: (1 if k != "max_staleness" else 0) for k in bad}
    ExecutorConfig(**edge)  # the edge itself is valid


# -- the dispatcher on its own ------------------------------------------------------------


def _dispatcher(cfg: ExecutorConfig, version: list[int] | None = None
                ) -> tuple[Dispatcher, list[Job]]:
    started: list[Job] = []
    v = version or [0]
    return Dispatcher(cfg, version=lambda: v[0], start=started.append), started


def _job(tid: int) -> Job:
    return Job(tid, None, make_recipe(Blocking(), None, None))


async def test_dispatch_at_the_concurrency_bound_and_one_past() -> None:
    loop = asyncio.get_running_loop()
    d, started = _dispatcher(ExecutorConfig(max_concurrent_rollouts=2))
    for i in range(3):
        d.enqueue(_job(i), loop)
    assert [j.task_id for j in started] == [0, 1] and len(d.pending) == 1
    assert d.capacity() == 0 and set(d.running) == {0, 1}
    d.done(started[0], accepted=True)
    assert d.capacity() == 1 and d.accepted == 1
    d.dispatch(loop)
    assert [j.task_id for j in started] == [0, 1, 2] and not d.pending
    d.done(started[1], accepted=False)
    assert d.accepted == 1 and set(d.running) == {2}


async def test_queue_bound_at_the_edge_and_one_past() -> None:
    loop = asyncio.get_running_loop()
    d, _ = _dispatcher(ExecutorConfig(max_concurrent_rollouts=1, queue_size=2))
    d.enqueue(_job(0), loop)  # runs: not in the queue
    d.check_room()
    d.enqueue(_job(1), loop)
    assert d.has_room()
    d.check_room()  # one place left
    d.enqueue(_job(2), loop)
    assert not d.has_room()
    with pytest.raises(ControllerStateError, match=r"the queue is full \(2 task\(s\) waiting "
                                                   r"for dispatch, queue_size=2\)"):
        d.check_room()
    unbounded, _ = _dispatcher(ExecutorConfig(max_concurrent_rollouts=1))
    for i in range(50):
        unbounded.enqueue(_job(i), loop)
    assert unbounded.has_room()
    unbounded.check_room()


async def test_a_big_submit_starts_one_slice_per_loop_turn() -> None:
    loop = asyncio.get_running_loop()
    d, started = _dispatcher(ExecutorConfig(max_concurrent_rollouts=1000))
    n = DISPATCH_SLICE + 8
    for i in range(n):
        d.enqueue(_job(i), loop)
    assert len(started) == DISPATCH_SLICE == 16 and len(d.pending) == 8
    await until(lambda: len(started) == n)  # the rest in the next turn
    assert [j.task_id for j in started] == list(range(n))


async def test_staleness_stall_reason_and_release_in_the_dispatcher() -> None:
    loop = asyncio.get_running_loop()
    version = [0]
    cfg = ExecutorConfig(max_concurrent_rollouts=10, max_staleness=0, consumer_batch_size=1)
    d, started = _dispatcher(cfg, version)
    for i in range(3):
        d.enqueue(_job(i), loop)
    assert [j.task_id for j in started] == [0]  # budget 1
    assert d.stall_reason() is None  # something runs
    d.done(started[0], accepted=False)  # rejected: does not use the budget
    d.dispatch(loop)
    assert [j.task_id for j in started] == [0, 1]
    d.done(started[1], accepted=True)
    d.dispatch(loop)
    assert len(started) == 2 and d.capacity() == 0
    reason = d.stall_reason()
    assert reason is not None and "set_version(1)" in reason and "1 task(s) queued" in reason
    version[0] = 1
    assert d.stall_reason() is None and d.capacity() == 1
    d.dispatch(loop)
    assert [j.task_id for j in started] == [0, 1, 2]
    d.paused = True
    d.done(started[2], accepted=True)
    d.enqueue(_job(3), loop)
    assert "paused with 1 task(s) queued" in (d.stall_reason() or "")
    counts = d.counts()
    assert counts == {"enqueued": 1, "running": 0, "capacity": 0, "paused": True,
                      "max_concurrent_rollouts": 10, "queue_size": None, "max_staleness": 0,
                      "consumer_batch_size": 1}


# -- the executor: every way a task ends --------------------------------------------------


async def test_every_ending_of_a_task_and_its_trace() -> None:
    h = Harness(max_concurrent_rollouts=10)
    for tid, data in [(0, {}), (1, {"reject": True}), (2, {"boom": True}),
                      (3, {"engine_error": True})]:
        h.submit(tid, **data)
    await until(lambda: len(h.flow.started) == 4)
    for tid in range(4):
        h.flow.release(tid)
    await h.done(4)
    r = h.by_id()
    assert (r[0].status, r[0].reason, r[0].trajectory) == ("accepted", None, {"key": 0})
    assert (r[1].status, r[1].reason) == ("rejected", "returned_none")
    assert (r[2].status, r[2].reason) == ("failed", "workflow_exception")
    assert isinstance(r[2].error, ValueError) and "boom 2" in (r[2].traceback or "")
    assert (r[3].status, r[3].reason) == ("failed", "server_error")
    assert all(x.worker == "w0" for x in r.values())
    t = h.tracer.tasks_df()
    assert t[S.STATUS].tolist() == ["accepted", "rejected", "failed", "failed"]
    assert t[S.ERROR].isna().tolist() == [True, True, False, False]
    assert t.loc[2, S.ERROR] == "ValueError: boom 2"
    assert t.loc[3, S.ERROR] == ("server error HTTP 500 (h:1) — EngineServerError: "
                                 "h:1 /generate answered HTTP 500")
    assert t[[S.DISPATCH_TS, S.START_TS, S.END_TS]].notna().all().all()
    assert (t[S.SUBMIT_TS] <= t[S.DISPATCH_TS]).all() and (t[S.START_TS] <= t[S.END_TS]).all()
    st = h.ex.stats()
    assert (st["accepted"], st["rejected"], st["failed"], st["cancelled"], st["submitted"]) == \
        (1, 1, 2, 0, 4)
    assert st["running"] == 0 and st["version"] == 0 and st["closed"] is False
    await h.ex.close_async()


async def test_should_accept_fn_sync_and_async() -> None:
    results: list[RolloutResult] = []
    ex = WorkflowExecutor(LocalEngine(), sink=results.append, tracer=Tracer())

    async def async_no(traj: Any) -> bool:
        return False

    async def async_yes(traj: Any) -> bool:
        return True

    for tid, fn in [(0, async_no), (1, async_yes), (2, lambda traj: False), (3, lambda t: 1)]:
        ex.submit(Job(tid, {"i": tid}, make_recipe(_Echo(), None, fn)))
    await until(lambda: len(results) == 4)
    got = {r.task_id: (r.status, r.reason) for r in results}
    assert got == {0: ("rejected", "should_accept_fn"), 1: ("accepted", None),
                   2: ("rejected", "should_accept_fn"), 3: ("accepted", None)}
    await ex.close_async()


class _Echo:
    async def arun_episode(self, engine: Any, data: Any) -> Any:
        return {"data": data}


async def test_cancel_queued_running_twice_and_unknown() -> None:
    h = Harness(max_concurrent_rollouts=1)
    h.submit(0, session=h.tracer.session)
    h.submit(1)
    await until(lambda: h.flow.started == [0])
    assert h.ex.cancel(1) is True  # queued: ends at once
    assert [(r.task_id, r.status, r.reason) for r in h.results] == [(1, "cancelled",
                                                                      "cancelled")]
    assert h.ex.cancel(1) is False  # gone
    assert h.ex.cancel(0) is True  # running: ends when it next awaits
    assert h.ex.cancel(0) is False  # requested before
    assert h.ex.cancel(99) is False
    await h.done(2)
    assert h.by_id()[0].status == "cancelled" and h.by_id()[0].reason == "cancelled"
    f = h.tracer.frames()
    assert f.tasks.loc[0, S.STATUS] == "cancelled" and f.tasks.loc[1, S.STATUS] == "cancelled"
    assert math.isnan(f.tasks.loc[1, S.DISPATCH_TS])  # cancelled in the queue
    assert f.tasks.loc[0, S.START_TS] <= f.tasks.loc[0, S.END_TS]
    assert f.sessions[S.STATUS].tolist() == ["cancelled"]  # the running one's session
    assert h.ex.stats()["cancelled"] == 2 and not h.ex.has_tasks()
    await h.ex.close_async()


async def test_cancel_before_the_first_step() -> None:
    h = Harness()
    h.submit(0)
    assert h.ex.is_running_any()  # dispatched: its asyncio task exists, not started
    assert h.ex.cancel(0) is True
    await h.done(1)
    r = h.results[0]
    assert (r.status, r.reason) == ("cancelled", "cancelled") and h.flow.started == []
    t = h.tracer.tasks_df().loc[0]
    assert not math.isnan(t[S.DISPATCH_TS]) and math.isnan(t[S.START_TS])
    assert t[S.STATUS] == "cancelled"
    await h.ex.close_async()


async def test_a_task_cancelled_by_someone_else_before_its_first_step_still_ends() -> None:
    # asyncio.run's shutdown or user code cancelling every task: the workflow's coroutine
    # never runs, so the executor must hear of the cancel itself (RolloutTask.cancel)
    h = Harness()
    h.submit(0)
    h.submit(1)
    (handle,) = [t for t in asyncio.all_tasks() if t.get_name() == "rollout-0"]
    assert handle.cancel() is True and handle.cancel() is True  # twice: finished once
    h.flow.release(1)
    await h.done(2)
    got = {r.task_id: (r.status, r.reason) for r in h.results}
    assert got == {0: ("cancelled", "cancelled"), 1: ("accepted", None)}
    assert h.flow.started == [1] and h.ex.stats()["cancelled"] == 1
    assert h.tracer.tasks_df().loc[0, S.STATUS] == "cancelled"
    await h.ex.close_async()


async def test_close_cancels_queued_and_running_and_refuses_later_work() -> None:
    h = Harness(max_concurrent_rollouts=1)
    h.submit(0)
    h.submit(1)
    await until(lambda: h.flow.started == [0])
    await h.ex.close_async()
    got = {r.task_id: (r.status, r.reason) for r in h.results}
    assert got == {0: ("cancelled", "cancelled"), 1: ("cancelled", "closed")}
    assert h.ex.closed and not h.ex.has_tasks()
    with pytest.raises(ControllerStateError, match="closed"):
        h.ex.check_room()
    h.submit(2)  # submitted anyway (e.g. in flight from a controller): closed out at once
    assert h.by_id()[2].reason == "closed" and h.ex.stats()["submitted"] == 3
    await h.ex.close_async()  # idempotent
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("rollout-")]
    assert leftover == []


async def test_drain_finishes_everything_but_refuses_to_wait_forever() -> None:
    h = Harness(max_concurrent_rollouts=1)
    h.submit(0)
    h.submit(1)
    await until(lambda: h.flow.started == [0])
    h.flow.release(0)
    h.flow.release(1)
    await h.ex.close_async(drain=True)
    assert sorted((r.task_id, r.status) for r in h.results) == [(0, "accepted"),
                                                               (1, "accepted")]
    stuck = Harness(max_concurrent_rollouts=10, max_staleness=0, consumer_batch_size=1)
    stuck.submit(0)
    stuck.submit(1)
    await until(lambda: stuck.flow.started == [0])
    stuck.flow.release(0)
    await stuck.done(1)
    assert stuck.ex.stall_reason() is not None and stuck.ex.capacity() == 0
    with pytest.raises(ControllerStateError, match="would wait forever: staleness control"):
        await stuck.ex.close_async(drain=True)
    await stuck.ex.close_async()
    assert stuck.by_id()[1].reason == "closed"


async def test_staleness_through_the_executor_edge_and_one_past() -> None:
    h = Harness(max_concurrent_rollouts=10, max_staleness=1, consumer_batch_size=2)
    for tid in range(6):
        h.submit(tid)
    # budget (1 + 0 + 1) * 2 = 4: four start, the fifth waits for a new version
    await until(lambda: len(h.flow.started) == 4)
    assert h.ex.capacity() == 0 and h.ex.stats()["enqueued"] == 2
    for tid in range(4):
        h.flow.release(tid)
    await h.done(4)
    assert len(h.flow.started) == 4 and h.ex.capacity() == 0
    h.ex.set_version(1)  # budget 6: both start now
    assert h.ex.get_version() == 1 and h.engine.version == 1
    await until(lambda: len(h.flow.started) == 6)
    h.flow.release(4)
    h.flow.release(5)
    await h.done(6)
    await h.ex.close_async()


async def test_pause_holds_queued_tasks_and_resume_releases_them() -> None:
    h = Harness(max_concurrent_rollouts=1)
    h.ex.pause()
    assert h.ex.is_paused()
    h.submit(0)
    assert h.flow.started == [] and h.ex.load() == 1 and not h.ex.is_running_any()
    assert "paused" in (h.ex.stall_reason() or "")
    h.ex.resume()
    await until(lambda: h.flow.started == [0])
    assert not h.ex.is_paused() and h.ex.stall_reason() is None
    h.flow.release(0)
    await h.done(1)
    assert repr(h.ex) == ("WorkflowExecutor(worker='w0', running=0, enqueued=0, paused=False, "
                          "closed=False)")
    await h.ex.close_async()


def test_error_text_and_config_type() -> None:
    assert error_text(ValueError("x")) == "ValueError: x"
    e = EngineServerError("m", status=502, server="h:2")
    assert error_text(e) == "server error HTTP 502 (h:2) — EngineServerError: m"
    with pytest.raises(ConfigError, match="ExecutorConfig"):
        WorkflowExecutor(LocalEngine(), sink=lambda r: None, config={})  # type: ignore[arg-type]
    ex = WorkflowExecutor(LocalEngine(), sink=lambda r: None)
    assert isinstance(ex.tracer, Tracer) and ex.config == ExecutorConfig()


# -- what the results, tasks and messages hold exactly ------------------------------------


async def test_tracebacks_only_for_failures_and_the_worker_in_the_trace() -> None:
    h = Harness()
    for tid, data in [(0, {}), (1, {"reject": True}), (2, {"boom": True}),
                      (3, {"engine_error": True})]:
        h.flow.release(tid)
        h.submit(tid, **data)
    await h.done(4)
    r = h.by_id()
    assert r[0].traceback is None and r[1].traceback is None  # None, never ""
    assert "ValueError: boom 2" in (r[2].traceback or "")
    assert "EngineServerError: h:1 /generate answered HTTP 500" in (r[3].traceback or "")
    assert h.tracer.tasks_df()[S.WORKER].tolist() == ["w0"] * 4
    await h.ex.close_async()


async def test_a_task_runs_in_its_own_context_under_its_name() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="unset")
    seen: list[str] = []

    class Reads:
        async def arun_episode(self, engine: Any, data: Any) -> Any:
            seen.append(var.get())
            return {}

    h = Harness()
    var.set("the caller's")
    job = Job(7, {}, make_recipe(Reads(), None, None))
    h.ex.submit(job)
    assert job.handle is not None and job.handle.get_name() == "rollout-7"
    await h.done(1)
    assert seen == ["unset"]  # a fresh context: nothing of the submitter's leaks in
    await h.ex.close_async()


async def test_a_cancelled_running_task_ends_its_asyncio_task_cleanly() -> None:
    h = Harness()
    job = Job(0, {"key": 0}, h.recipe)
    h.ex.submit(job)
    await until(lambda: h.flow.started == [0])
    assert h.ex.cancel(0)
    await h.done(1)
    assert job.handle is not None
    await asyncio.wait([job.handle])
    # the cancellation was taken by the task itself: it returned, it did not raise
    assert not job.handle.cancelled() and job.handle.exception() is None
    await h.ex.close_async()


def test_an_executor_made_outside_a_loop_binds_at_its_first_submit() -> None:
    h = Harness()
    assert h.ex.binding.loop is None

    async def go() -> asyncio.AbstractEventLoop:
        h.flow.release(1)
        h.submit(1)
        await h.done(1)
        await h.ex.close_async()
        return asyncio.get_running_loop()

    loop = asyncio.new_event_loop()
    try:
        running = loop.run_until_complete(go())
    finally:
        loop.close()
    assert h.ex.binding.loop is running and h.by_id()[1].status == "accepted"


async def test_load_and_has_tasks_count_queued_and_running() -> None:
    h = Harness(max_concurrent_rollouts=1)
    assert (h.ex.load(), h.ex.has_tasks()) == (0, False)
    h.submit(0)
    await until(lambda: h.flow.started == [0])
    assert (h.ex.load(), h.ex.has_tasks()) == (1, True)  # running only
    h.submit(1)
    h.submit(2)
    assert (h.ex.load(), h.ex.has_tasks()) == (3, True)  # one running, two queued
    await h.ex.close_async()


async def test_closing_before_the_first_step_raises_nothing() -> None:
    h = Harness()
    h.submit(0)
    h.submit(1)
    await h.ex.close_async()  # their asyncio tasks never ran a step: cancelled as they are
    assert sorted((r.task_id, r.status) for r in h.results) == [(0, "cancelled"),
                                                               (1, "cancelled")]
    assert h.flow.started == []


async def test_drain_of_a_paused_executor_starts_its_queue() -> None:
    h = Harness(max_concurrent_rollouts=2)
    h.ex.pause()
    for tid in range(3):
        h.flow.release(tid)
        h.submit(tid)
    assert h.ex.load() == 3 and h.flow.started == []
    await h.ex.close_async(drain=True)
    assert sorted((r.task_id, r.status) for r in h.results) == [
        (0, "accepted"), (1, "accepted"), (2, "accepted")]
    assert h.ex.stats()["paused"] is False and h.ex.is_paused() is False
    h.submit(3)  # after the drain: closed out at once
    assert h.by_id()[3].reason == "closed"


async def test_stall_and_closed_messages_word_for_word() -> None:
    h = Harness(max_concurrent_rollouts=10, max_staleness=0, consumer_batch_size=1)
    h.flow.release(0)
    h.submit(0)
    h.submit(1)
    h.submit(2)
    await h.done(1)
    assert h.ex.stall_reason() == (
        "staleness control stalls dispatch: 2 task(s) queued, none running, capacity 0 at "
        "version 0 (accepted=1, max_staleness=0, consumer_batch_size=1); call set_version(1) "
        "after consuming a batch, or use a larger max_staleness (None turns it off)")
    h.ex.pause()
    assert h.ex.stall_reason() == ("the worker is paused with 2 task(s) queued and none "
                                   "running; call resume()")
    await h.ex.close_async()
    with pytest.raises(ControllerStateError,
                       match=r"^submit\(\) after close_async\(\): this worker is closed$"):
        h.ex.check_room()


# -- workflow and should_accept_fn specs ----------------------------------------------------


class _LongRepr:
    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return "<" + "r" * (self.n - 2) + ">"


def test_a_spec_is_quoted_up_to_80_characters() -> None:
    with pytest.raises(ConfigError) as info:
        make_recipe(_Echo(), None, _LongRepr(80))
    assert str(info.value) == ("should_accept_fn must be callable or an import path, got "
                               + repr(_LongRepr(80)))
    with pytest.raises(ConfigError) as info:
        make_recipe(_Echo(), None, _LongRepr(81))
    assert str(info.value) == ("should_accept_fn must be callable or an import path, got <"
                               + "r" * 76 + "...")


def test_a_workflow_class_gives_a_new_instance_per_task() -> None:
    class Counted:
        made = 0

        def __init__(self) -> None:
            Counted.made += 1

        async def arun_episode(self, engine: Any, data: Any) -> Any:
            return data

    factory = make_recipe(Counted, None, None).factory
    assert Counted.made == 1  # made once at once, so that bad kwargs fail early
    first, second, third = factory(), factory(), factory()
    assert len({id(first), id(second), id(third)}) == 3 and Counted.made == 3
    shared = _Echo()
    assert make_recipe(shared, None, None).factory() is shared  # an instance is shared


def test_a_refusing_validate_is_wrapped_with_the_workflow_and_the_error() -> None:
    class Picky:
        def validate(self, data: Any) -> None:
            raise KeyError("prompt")

        async def arun_episode(self, engine: Any, data: Any) -> Any:
            return data

    factory = make_recipe(Picky(), None, None).factory
    with pytest.raises(ConfigError) as info:
        factory.validate({})
    assert str(info.value) == ("test_a_refusing_validate_is_wrapped_with_the_workflow_and_the_"
                               "error.<locals>.Picky.validate(data) refused the data: "
                               "KeyError: 'prompt'")
    assert isinstance(info.value.__cause__, KeyError)


async def test_one_slice_per_loop_turn_exactly() -> None:
    loop = asyncio.get_running_loop()
    d, started = _dispatcher(ExecutorConfig(max_concurrent_rollouts=1000))
    assert d.counts()["paused"] is False  # False, not just falsy
    d.paused = True
    for i in range(10):
        d.enqueue(_job(i), loop)
    d.paused = False
    d.dispatch(loop)
    assert len(started) == 10  # ten of this turn's slice are used
    d.paused = True
    for i in range(10, 100):
        d.enqueue(_job(i), loop)
    d.paused = False
    d.dispatch(loop)
    assert len(started) == DISPATCH_SLICE  # what is left of the slice, not a new one
    await asyncio.sleep(0)  # one loop turn: the next slice, whole
    assert len(started) == 2 * DISPATCH_SLICE
    await asyncio.sleep(0)
    assert len(started) == 3 * DISPATCH_SLICE


def test_workflow_spec_errors_word_for_word() -> None:
    class NoEpisode:
        pass

    class NeedsArg:
        def __init__(self, x: int) -> None:
            self.x = x

        async def arun_episode(self, engine: Any, data: Any) -> Any:
            return data

    with pytest.raises(ConfigError) as info:
        make_recipe(NoEpisode, None, None)
    assert str(info.value) == ("test_workflow_spec_errors_word_for_word.<locals>.NoEpisode is "
                               "not a workflow: it has no async arun_episode(engine, data) "
                               "method")
    with pytest.raises(ConfigError, match=r"^cannot create test_workflow_spec_errors_word_for_"
                                          r"word\.<locals>\.NeedsArg\(\*\*workflow_kwargs\): "):
        make_recipe(NeedsArg, {"y": 1}, None)
    with pytest.raises(ConfigError) as info:
        make_recipe(_LongRepr(20), None, None)
    assert str(info.value) == (
        "_LongRepr object <" + "r" * 18 + "> is not a workflow: expected an object with an "
        "async arun_episode(engine, data) method, its class, or an import path "
        "'pkg.module:Name'")
    with pytest.raises(ConfigError, match=r"^workflow_kwargs only apply when workflow is a "
                                          r"class or import path$"):
        make_recipe(_Echo(), {"x": 1}, None)
    with pytest.raises(ConfigError, match=r"^workflow_kwargs must be a dict, got list$"):
        make_recipe(NeedsArg, [1], None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^config must be an ExecutorConfig, got dict$"):
        WorkflowExecutor(LocalEngine(), sink=lambda r: None, config={})  # type: ignore[arg-type]


def test_a_recipe_keeps_the_specs_as_given() -> None:
    flow = _Echo()

    def accept(_traj: Any) -> bool:
        return True

    r = make_recipe(flow, None, accept, payload=b"x")
    assert (r.workflow, r.workflow_kwargs, r.should_accept_fn, r.payload) == \
        (flow, None, accept, b"x")
    assert r.accept_fn is accept and r.factory() is flow
    k = make_recipe(_Echo, {}, None)
    assert k.workflow is _Echo and k.workflow_kwargs == {} and k.payload is None
