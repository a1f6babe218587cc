"""``RayWorkerHandle``: the controller-side :class:`~rollout_kit.workers.Worker` of one Ray
actor.

The queue and capacity rule stay on the controller side, in a
:class:`~rollout_kit._executor.Dispatcher` this handle composes (as the in-process executor
does); each task the dispatcher lets run becomes ONE actor call (``run``) whose
``ObjectRef`` is awaited, no polling. The actor echoes the task id and returns the task's
trace record, which is merged into the controller's tracer on the controller's clock
(:mod:`.traces`) before the result goes to the controller's sink.

When the actor dies, the handle is marked dead (never chosen for new tasks) and its tasks,
queued or running, run on live workers with the same ids (trace attributes
``redispatched`` and ``lost_workers``); every id gets exactly one result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import traceback
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from ..._config import ExecutorConfig
from ..._errors import ControllerStateError, SchedulerError, TaskIdMismatchError
from ..._executor import Dispatcher, Job, error_text
from ..._io import RolloutResult, Status
from ...tracing import controller_record, reanchor
from .engine import RayEngineProxy
from .wire import RemoteOutcome, Shipment, import_ray, ship

if TYPE_CHECKING:
    from ...engines import InferenceEngine
    from .._base import WorkerSpec


class RayWorkerHandle:
    """One Ray worker as seen by the controller: queue here, runs in the actor.

    Args:
        name: the worker's name (``worker`` column).
        actor: the Ray actor handle (a :class:`~.actor.RayWorker`).
        spec: the controller's tracer, sink, loop binding and executor config.
        reroute: gives a live worker for the tasks of this one once its actor died
            (``None``: no other worker; such tasks fail).
    """

    def __init__(self, name: str, actor: Any, spec: WorkerSpec, *,
                 reroute: Callable[[], RayWorkerHandle] | None = None) -> None:
        self._name = name
        self.actor = actor
        self.alive = True
        self.pid: int | None = None
        self.offset_s = 0.0  # measured: worker trace clock minus controller trace clock
        self._sink = spec.sink
        self._tracer = spec.tracer
        self._binding = spec.binding
        self._reroute = reroute
        self._engine = RayEngineProxy(self, name)
        self._queue = Dispatcher(spec.executor_config or ExecutorConfig(),
                                 version=self._engine.get_version, start=self._start)
        self._counts = {"accepted": 0, "rejected": 0, "failed": 0, "cancelled": 0,
                        "submitted": 0}
        self._marks: dict[int, dict[str, int]] = {}  # perf_counter_ns by lifecycle event
        self._seq = itertools.count()
        self._started: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def name(self) -> str:
        """The worker's name (``worker`` column of the traces)."""
        return self._name

    @property
    def engine(self) -> InferenceEngine:
        """A proxy forwarding engine calls to the actor's engine."""
        return self._engine

    def next_seq(self) -> int:
        """The next sequence number of a fire-and-forget control call."""
        return next(self._seq)

    # -- actor lifecycle ---------------------------------------------------------------------
    async def ensure_started(self) -> None:
        """Start the actor's engine and measure its clock offset, once."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start_actor())
        await asyncio.shield(self._started)

    async def _start_actor(self) -> None:
        info = await self.actor.start.remote()
        self.pid = int(info["pid"])
        best: tuple[float, float] | None = None
        clock = self._tracer.trace_clock  # the two trace axes, not the wall clocks
        for _ in range(3):
            t0 = clock()
            w = float(await self.actor.clock.remote())
            t1 = clock()
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, w - (t0 + t1) / 2)
        assert best is not None
        rtt, off = best
        self.offset_s = 0.0 if abs(off) <= rtt / 2 else off

    async def initialize_async(self) -> None:
        """Start the actor's engine (its health checks run in the worker).

        Raises:
            SchedulerError: the worker failed to start.
        """
        try:
            await self.ensure_started()
        except Exception as exc:
            raise SchedulerError(f"Ray worker {self._name!r} failed to start: {exc}") from exc

    def mark_dead(self) -> None:
        """Drop this worker: never chosen again, its actor killed for good."""
        if not self.alive:
            return
        self.alive = False
        try:
            import_ray().kill(self.actor, no_restart=True)
        except Exception:
            pass

    async def call(self, task_id: int, shipment: Shipment, data: Any,
                   lost: tuple[str, ...] = ()) -> RemoteOutcome:
        """Run one task in this worker's actor (``lost``: workers that died running it).

        Cancelling the call asks the actor to cancel the task.
        """
        await self.ensure_started()
        ref = self.actor.run.remote(task_id, shipment.key, shipment.blob, data, len(lost),
                                    lost)
        try:
            out: RemoteOutcome = await ref
        except asyncio.CancelledError:
            if self.alive:
                self.actor.cancel.remote(task_id)
            raise
        return out

    async def remote_stats(self) -> dict[str, Any]:
        """The worker-side executor counters (``paused``, ``version``, ``pid``, …)."""
        return dict(await self.actor.stats.remote())

    # -- submit and run ----------------------------------------------------------------------
    def check_room(self) -> None:
        """Raise ``ControllerStateError`` when closed or the queue bound is reached."""
        if self._closed:
            raise ControllerStateError("submit() after close_async(): this worker is closed")
        self._queue.check_room()

    def has_room(self) -> bool:
        """Whether the queue bound allows one more task now."""
        return self._queue.has_room()

    def submit(self, job: Job) -> None:
        """Queue ``job``; a recipe without a shipment is serialized now (``ConfigError``)."""
        if not isinstance(job.recipe.payload, Shipment):
            r = job.recipe
            job.recipe = dataclasses.replace(
                r, payload=ship(r.workflow, r.workflow_kwargs, r.should_accept_fn))
        self._marks[job.task_id] = {"submit": perf_counter_ns()}
        self._counts["submitted"] += 1
        if self._closed:
            self._closed_out(job)
            return
        self._queue.enqueue(job, self._binding.bind())

    def _start(self, job: Job) -> None:
        if self._closed and not self._queue.draining:
            self._closed_out(job)
            return
        self._marks[job.task_id]["dispatch"] = perf_counter_ns()
        loop = self._binding.bind()
        job.handle = loop.create_task(self._run(job), name=f"ray-rollout-{job.task_id}")
        job.handle.add_done_callback(functools.partial(self._on_handle_done, job))

    def _on_handle_done(self, job: Job, _handle: asyncio.Task[None]) -> None:
        if job.task_id in self._queue.running:  # cancelled before its first step
            self._finish(job, "cancelled", "cancelled")

    async def _run(self, job: Job) -> None:
        tid = job.task_id
        self._marks[tid]["start"] = perf_counter_ns()
        shipment = job.recipe.payload
        assert isinstance(shipment, Shipment)
        try:
            out, runner = await self._execute(tid, shipment, job.data)
        except asyncio.CancelledError:
            self._finish(job, "cancelled", "cancelled")
            return
        except Exception as exc:
            self._finish(job, "failed", "worker_error", error=exc, tb=traceback.format_exc())
            return
        if out.task_id != tid:
            err = TaskIdMismatchError(f"worker {out.worker!r} echoed task_id {out.task_id} "
                                      f"for task {tid}")
            self._finish(job, "failed", "task_id_mismatch", error=err)
            return
        self._finish(job, out.status, out.reason, error=out.error, tb=out.traceback,
                     trajectory=out.trajectory, outcome=out, offset_s=runner.offset_s)

    async def _execute(self, task_id: int, shipment: Shipment,
                       data: Any) -> tuple[RemoteOutcome, RayWorkerHandle]:
        """Run the task here, or on live workers while the workers running it die."""
        ray = import_ray()
        runner: RayWorkerHandle = self
        lost: list[str] = []
        while True:
            if not runner.alive:
                if self._reroute is None:
                    raise SchedulerError(f"Ray worker {self._name!r} died and there is no "
                                         "other worker")
                runner = self._reroute()
            try:
                return await runner.call(task_id, shipment, data, tuple(lost)), runner
            except ray.exceptions.RayActorError:
                runner.mark_dead()
                lost.append(runner.name)
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None

    def _finish(self, job: Job, status: Status, reason: str | None, *,
                error: BaseException | None = None, tb: str | None = None,
                trajectory: Any = None, outcome: RemoteOutcome | None = None,
                offset_s: float = 0.0) -> None:
        tid = job.task_id
        self._queue.done(job, status == "accepted")
        self._counts[status] += 1
        worker = self._name if outcome is None else outcome.worker
        self._record(tid, worker, status, reason, error, outcome, offset_s)
        self._sink(RolloutResult(task_id=tid, status=status, reason=reason, error=error,
                                 traceback=tb, trajectory=trajectory, worker=worker))
        self._redispatch()

    def _record(self, tid: int, worker: str, status: Status, reason: str | None,
                error: BaseException | None, outcome: RemoteOutcome | None,
                offset_s: float) -> None:
        """Merge the task's trace into the controller's tracer (before the sink sees it)."""
        marks = self._marks.pop(tid, {})
        tracer = self._tracer
        if not tracer.enabled:
            return
        remote = None if outcome is None or not outcome.header else outcome.record
        if remote is None:
            marks.setdefault("end", perf_counter_ns())
        local = controller_record(tracer, tid, worker, status=status, reason=reason,
                                  error=None if error is None else error_text(error),
                                  marks=marks)
        if remote is None:
            tracer.ingest(local)
            return
        assert outcome is not None
        # the worker's record, with submit / dispatch as the controller saw them
        tracer.ingest(reanchor(outcome.header, remote, clock_offset_s=offset_s, local=local))

    # -- control -----------------------------------------------------------------------------
    def _redispatch(self) -> None:
        loop = self._binding.loop
        if loop is not None:
            self._queue.dispatch(loop)

    def _send_paused(self, paused: bool) -> None:
        if self.alive:
            self.actor.set_paused.remote(paused, self.next_seq())

    def pause(self) -> None:
        """Stop dispatching here and inside the worker."""
        self._queue.paused = True
        self._send_paused(True)

    def resume(self) -> None:
        """Restart dispatching here and inside the worker."""
        self._queue.paused = False
        self._send_paused(False)
        self._redispatch()

    def set_version(self, version: int) -> None:
        """Set the weight version here and in the worker; re-check staleness capacity."""
        self._engine.set_version(version)
        self._redispatch()

    def cancel(self, task_id: int) -> bool:
        """Cancel a queued or running task; whether this call requested it."""
        return self._queue.cancel(task_id, self._drop)

    def _drop(self, job: Job) -> None:
        self._finish(job, "cancelled", "cancelled")

    def _closed_out(self, job: Job) -> None:
        self._finish(job, "cancelled", "closed")

    # -- state -------------------------------------------------------------------------------
    def load(self) -> int:
        """Queued plus running tasks."""
        return len(self._queue.pending) + len(self._queue.running)

    def is_running_any(self) -> bool:
        """Whether any task runs now."""
        return bool(self._queue.running)

    def stall_reason(self) -> str | None:
        """Why nothing can progress without outside action, or ``None``."""
        return self._queue.stall_reason()

    def stats(self) -> dict[str, Any]:
        """Counters of the controller-side queue (enqueued, running, accepted, …)."""
        return {**self._counts, **self._queue.counts(), "version": self._engine.get_version(),
                "closed": self._closed, "alive": self.alive, "pid": self.pid}

    async def close_async(self, *, drain: bool = False) -> None:
        """Cancel (or, with ``drain``, finish) every task, then close the actor. Idempotent."""
        self._closed = True
        if self._binding.loop is not None:
            await self._queue.close_async(self._binding.bind(), drain=drain,
                                          drop=self._closed_out)
        self._queue.release()
        if self.alive and self._started is not None:
            try:
                await asyncio.wait_for(self.actor.close.remote(), timeout=10)
            except Exception:
                pass
        self.mark_dead()

    def __repr__(self) -> str:
        return (f"RayWorkerHandle(name={self._name!r}, alive={self.alive}, pid={self.pid}, "
                f"load={self.load()})")
