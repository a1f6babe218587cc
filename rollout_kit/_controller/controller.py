"""``RolloutController``: the facade a notebook user holds.

It owns the one :class:`~rollout_kit.TaskIdGenerator` (0, 1, 2, …), the one
:class:`~rollout_kit.tracing.Tracer` and the one :class:`~.results.ResultBook`, and holds
its *workers* (:mod:`rollout_kit.workers`), built by the worker pool (``scheduler=``). Each
``submit`` checks the workflow spec, takes the next id (or claims the caller's), picks a
worker and hands it the task with its id; the worker reports the result to the book.

Naming: every coroutine method ends in ``_async``; its blocking twin has the plain name and
works in a script (private ``asyncio.Runner``), in a notebook cell (re-entering the kernel
loop via nest-asyncio2) and fails clearly under uvloop. Capacity settings
(``executor_config``) apply per worker.

Usage::

    ctl = RolloutController(sglang=["127.0.0.1:30000"])
    tid = ctl.submit({"prompt": "What is 2+3?"}, workflow)
    [result] = ctl.wait(1)
    ctl.traces().loc[tid]

One class, in the order a user meets it: construction and lifecycle, ``submit``, then the
calls on submitted tasks: results (``peek``, ``take``, ``wait``, ``wait_for``), the batch
calls, control (pause, cancel, versions), replay and the traces.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .._errors import ConfigError, ControllerStateError
from .._executor import Job, Recipe
from .._gc import GcHold
from .._ids import TaskIdGenerator
from .._io import RolloutResult
from .._loop import LoopBinding
from ..replay import replay_through
from ..tracing import Tracer, TrajectoryDump
from ..workers import LocalScheduler, Worker, WorkerPool, WorkerSpec
from .batching import prepare_batch, rollout_batch
from .results import ResultBook
from .waiting import Waiters

if TYPE_CHECKING:
    import os

    import pandas as pd

    from .._config import EngineConfig, ExecutorConfig
    from .._executor import AcceptFnSpec, WorkflowSpec
    from ..engines import InferenceEngine, MetricsScraper
    from ..replay import ReplaySource

_TOTALS = ("enqueued", "running", "accepted", "rejected", "failed", "cancelled", "submitted",
           "capacity")


def _addresses(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _servers(servers: Mapping[str, str | Sequence[str]] | None, **shortcuts: str | Sequence[str]
             ) -> dict[str, tuple[str, ...]]:
    """Addresses by flavour, ``sglang=`` / ``vllm=`` merged in; unknown flavours refused."""
    from ..engines import flavour_names

    if servers is not None and not isinstance(servers, Mapping):
        raise ConfigError(f"servers must map a flavour name to addresses, got {servers!r}")
    merged = {k: _addresses(v) for k, v in (servers or {}).items()}
    for flavour, addrs in shortcuts.items():
        if addrs and flavour in merged:
            raise ConfigError(f"{flavour} addresses given twice: in servers= and {flavour}=")
        if addrs:
            merged[flavour] = _addresses(addrs)
    known = flavour_names()
    for flavour in merged:
        if flavour not in known:
            raise ConfigError(f"unknown server flavour {flavour!r} in servers=; known: "
                              f"{', '.join(known)}")
    return merged


class RolloutController:
    """Submit rollouts to workers with one id source, one tracer and one result owner.

    Args:
        engines: engines to run on (one or a sequence); the caller keeps ownership.
        servers: server addresses by flavour (``{"vllm": [...], "vllm-chat": [...]}``; the
            names are :func:`rollout_kit.engines.flavour_names`): one engine per flavour
            over all of its addresses, each a worker named after its flavour.
        sglang: shortcut for ``servers={"sglang": ...}``.
        vllm: shortcut for ``servers={"vllm": ...}``.
        engine_config: settings for the engines created from addresses.
        executor_config: capacity settings of each worker.
        tracer: the tracer to record into (default: a new one, writing ``trace_path``).
        trace_path: JSONL file for the default tracer.
        dump: a trajectory dump (a directory, or a
            :class:`~rollout_kit.tracing.TrajectoryDump`) for the default tracer: every
            engine call is sent with a seed and recorded for exact replay
            (:meth:`replay_async`); give a ``tracer`` its own ``dump=`` instead.
        scheduler: the worker pool: builds the workers and picks one per task (default
            ``LocalScheduler()``: in-process workers, round robin; ``RayScheduler``: Ray
            actors, built from the addresses of one flavour).
        tune_gc: from construction until :meth:`close_async`, keep the garbage collector's
            pauses short (the heap that exists now is frozen out
            of its passes and the youngest generation's threshold is raised to 10,000);
            ``False`` leaves the collector as it is.
        scrape_interval: seconds between two scrapes of each server's ``/metrics`` while
            the controller lives (from :meth:`initialize_async` or the first submit until
            :meth:`close_async`), into the tracer's server metrics frame
            (:meth:`server_metrics`, :func:`rollout_kit.analysis.server_series`;
            :class:`~rollout_kit.engines.MetricsScraper`); ``None`` scrapes nothing. Only the
            servers of in-process engines are scraped.

    Raises:
        ConfigError: no engines at all, two workers with the same name, both ``tracer``
            and ``dump``, or a ``scrape_interval`` that is not ``None`` nor a number > 0.
    """

    def __init__(
        self,
        engines: InferenceEngine | Sequence[InferenceEngine] | None = None,
        *,
        servers: Mapping[str, str | Sequence[str]] | None = None,
        sglang: str | Sequence[str] = (),
        vllm: str | Sequence[str] = (),
        engine_config: EngineConfig | None = None,
        executor_config: ExecutorConfig | None = None,
        tracer: Tracer | None = None,
        trace_path: str | os.PathLike[str] | None = None,
        dump: TrajectoryDump | str | os.PathLike[str] | None = None,
        scheduler: WorkerPool | None = None,
        tune_gc: bool = True,
        scrape_interval: float | None = 0.5,
    ) -> None:
        from ..engines import InferenceEngine, MetricsScraper

        self._scrape_interval = MetricsScraper.check_interval(scrape_interval)
        self.scraper: MetricsScraper | None = None

        given: list[InferenceEngine]
        if engines is None:
            given = []
        elif isinstance(engines, InferenceEngine):
            given = [engines]
        else:
            given = list(engines)
        self.scheduler: WorkerPool = scheduler or LocalScheduler()
        if tracer is not None and dump is not None:
            raise ConfigError("dump= configures the controller's own tracer: pass it to the "
                              "Tracer you give (Tracer(dump=...))")
        self.tracer = tracer if tracer is not None else Tracer(path=trace_path, dump=dump)
        self._owns_tracer = tracer is None
        self.ids = TaskIdGenerator()
        self.binding = LoopBinding()
        self.results = ResultBook(self.tracer, self.ids)
        self.workers: list[Worker] = self.scheduler.create_workers(WorkerSpec(
            engines=given, servers=_servers(servers, sglang=sglang, vllm=vllm),
            engine_config=engine_config, executor_config=executor_config,
            tracer=self.tracer, sink=self.results.deliver, binding=self.binding))
        if not self.workers:
            raise ConfigError("RolloutController needs engines, or servers= addresses")
        names = [w.name for w in self.workers]
        if len(set(names)) != len(names):
            raise ConfigError(f"workers need distinct names, got {names}")
        self._queue_size = None if executor_config is None else executor_config.queue_size
        self._last_recipe: Recipe | None = None
        self._closed = False
        # a controller dropped without close() gives its hold back when it is collected
        self._gc_hold = weakref.finalize(self, GcHold().release) if tune_gc else None

    @property
    def engines(self) -> list[InferenceEngine]:
        """The workers' engines, in order."""
        return [w.engine for w in self.workers]

    @property
    def waiters(self) -> Waiters:
        """Woken whenever a result arrives or the controller's state changes."""
        return self.results.waiters

    # -- lifecycle ---------------------------------------------------------------------
    async def initialize_async(self) -> None:
        """Initialize every worker (engine health checks) and start scraping the servers'
        metrics; ``async with`` calls it."""
        self.binding.bind()
        await asyncio.gather(*(w.initialize_async() for w in self.workers))
        self.start_scraping(asyncio.get_running_loop())

    def start_scraping(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the metrics scraper on ``loop`` (once; a no-op when ``scrape_interval`` is
        ``None``, when no engine names servers to scrape, with a disabled tracer, or once
        closed)."""
        if self._scrape_interval is None or self._closed:
            return
        if not self.tracer.enabled:
            self._scrape_interval = None  # nothing to record into: later submits skip this
            return
        if self.scraper is None:
            from ..engines import MetricsScraper

            targets = [t for e in self.engines for t in e.scrape_targets()]
            if not targets:
                self._scrape_interval = None
                return
            self.scraper = MetricsScraper(targets, self.tracer.record_server_metrics,
                                          interval=self._scrape_interval)
        self.scraper.start(loop)

    def initialize(self) -> None:
        """Blocking twin of :meth:`initialize_async`."""
        self.binding.blocking(self.initialize_async(), "initialize()")

    async def close_async(self, *, drain: bool = False) -> None:
        """Cancel (or, with ``drain``, finish) every task, close owned engines, flush traces
        (and close the tracer this controller made: its file is compacted to Parquet).

        Idempotent; leaves no asyncio task behind. Finished results stay available from
        ``wait()`` and traces from ``traces()``.
        """
        self._closed = True
        try:
            if self.binding.loop is not None:
                self.binding.bind()
                try:
                    await asyncio.gather(*(w.close_async(drain=drain) for w in self.workers))
                finally:
                    if self.scraper is not None:  # after a drain: its tasks were scraped
                        await self.scraper.stop_async()
        finally:
            if self._gc_hold is not None:
                self._gc_hold()  # release (once)
        if self._owns_tracer:
            self.tracer.close()  # its own trace file: flushed and compacted to Parquet
        else:
            self.tracer.flush()  # a tracer it was given: its owner closes it
        self.waiters.wake()

    def close(self, *, drain: bool = False) -> None:
        """Blocking twin of :meth:`close_async`."""
        self.binding.blocking(self.close_async(drain=drain), "close()")


    async def __aenter__(self) -> Self:
        try:
            await self.initialize_async()
        except BaseException:
            await self.close_async()  # no half-open sessions when a server is down
            raise
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close_async()

    def __enter__(self) -> Self:
        try:
            self.initialize()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close_async` was called."""
        return self._closed

    def check_open(self, what: str) -> None:
        """Raise ``ControllerStateError`` naming the call ``what`` if this is closed."""
        if self._closed:
            raise ControllerStateError(f"{what} after close(): this controller is closed")

    # -- submit ------------------------------------------------------------------------
    @property
    def queue_size(self) -> int | None:
        """The per-worker queue bound."""
        return self._queue_size

    def prepare(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                should_accept_fn: object) -> Recipe:
        """Check a workflow / ``should_accept_fn`` spec once (raises ``ConfigError``).

        A loop of ``submit`` with the same workflow object (and no ``workflow_kwargs``)
        reuses the last recipe instead of checking the spec again per task.
        """
        last = self._last_recipe
        if (last is not None and workflow_kwargs is None and last.workflow is workflow
                and last.workflow_kwargs is None
                and last.should_accept_fn is should_accept_fn):
            return last
        recipe = self.scheduler.prepare(workflow, workflow_kwargs, should_accept_fn)
        self._last_recipe = recipe
        return recipe

    def submit(
        self,
        data: Any,
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        task_id: int | None = None,
        *,
        worker: str | None = None,
    ) -> int:
        """Queue one rollout on a worker; return its task id at once (non-blocking).

        Callable from async code, from sync code while the loop runs (widget callbacks),
        from sync code with no running loop (the task runs when a blocking call runs the
        private loop) and from other threads (scheduled onto the loop).

        Args:
            data: the item handed to the workflow.
            workflow: instance, class (+ ``workflow_kwargs``) or import path.
            workflow_kwargs: constructor arguments for a class / import path.
            should_accept_fn: ``fn(trajectory) -> bool`` or import path.
            task_id: an explicit id (must be unused in this controller) or ``None``.
            worker: run on the worker of this name (see ``worker_names()``) instead of the
                scheduler's choice.

        Raises:
            ConfigError: bad workflow spec, or data the workflow's ``validate(data)``
                refuses (no task id is taken then).
            DuplicateTaskIdError, InvalidTaskIdError: bad explicit id.
            ControllerStateError: closed, or the worker's queue is full.
        """
        if self._closed:
            self.check_open("submit()")
        recipe = self.prepare(workflow, workflow_kwargs, should_accept_fn)
        named = self._worker_named(worker) if worker is not None else None
        recipe.factory.validate(data)
        target = named if named is not None else self.scheduler.choose(self.workers)
        loop = self.binding.here()  # None: another thread (hand the job over to the loop)
        target.check_room()
        if self._scrape_interval is not None and self.scraper is None and loop is not None:
            self.start_scraping(loop)
        tid = self.ids.next() if task_id is None else self.ids.claim(task_id)
        self.results.add(tid, target)
        job = Job(tid, data, recipe)
        if loop is not None:
            self._hand_over(target, job)
        else:
            bound = self.binding.loop
            assert bound is not None  # a thread other than the owner's: a loop is bound
            bound.call_soon_threadsafe(self._hand_over, target, job)
        return tid

    def _hand_over(self, worker: Worker, job: Job) -> None:
        try:
            worker.submit(job)
        except BaseException:
            self.results.forget(job.task_id)
            raise

    async def submit_reserved(self, data: Any, recipe: Recipe,
                              on_done: Callable[[int], None]) -> int:
        """Submit for a batch call: waits for queue room; the result goes to ``on_done``.

        The batch call has already run the workflow's ``validate`` on ``data``.
        """
        self.check_open("submit()")
        target = self.scheduler.choose(self.workers)
        loop = self.binding.bind()
        if self._scrape_interval is not None and self.scraper is None:
            self.start_scraping(loop)
        if not target.has_room():
            await self.waiters.until(target.has_room, timeout=None,
                                     what="waiting for queue room",
                                     stall_reason=self.stall_reason)
        self.check_open("submit()")
        tid = self.ids.next()
        self.results.add(tid, target, on_done)
        self._hand_over(target, Job(tid, data, recipe))
        return tid

    def worker_names(self) -> list[str]:
        """Names of the workers, in order (usable as ``submit(..., worker=name)``)."""
        return [w.name for w in self.workers]

    def _worker_named(self, name: str) -> Worker:
        for w in self.workers:
            if w.name == name:
                return w
        raise ConfigError(f"no worker named {name!r}; workers are {self.worker_names()}")

    def stall_reason(self) -> str | None:
        """Why no worker can progress without outside action, or ``None``."""
        if any(w.is_running_any() for w in self.workers):
            return None
        reasons = [f"{w.name}: {r}" for w in self.workers if (r := w.stall_reason()) is not None]
        return "; ".join(reasons) or None

    # -- results -----------------------------------------------------------------------
    def peek(self, task_id: int) -> RolloutResult | None:
        """The result of ``task_id`` if finished and not consumed, else ``None``."""
        return self.results.peek(task_id)

    def take(self, task_id: int) -> RolloutResult:
        """Consume a finished result (marks ``consume`` in the trace)."""
        return self.results.take(task_id)

    def release(self, task_id: int) -> None:
        """End a batch reservation: the result goes to ``wait()``."""
        self.results.release(task_id)

    async def wait_async(self, count: int | None = None, timeout: float | None = None,
                         raise_on_failure: bool = False) -> list[RolloutResult]:
        """Wait for ``count`` results (``None`` = every outstanding task), completion order.

        Each result carries its ``task_id``. Results of batch calls are not counted.

        Args:
            count: how many results; must not exceed the outstanding tasks.
            timeout: seconds; ``None`` waits as long as progress is possible.
            raise_on_failure: raise ``WorkflowError`` for the first failed result among
                them (only that result is consumed; the others stay for the next wait).

        Raises:
            RolloutTimeoutError: time ran out; nothing is consumed.
            ControllerStateError: ``timeout=None`` but nothing can progress (paused /
                staleness stall).
            ConfigError: ``count`` exceeds the outstanding tasks.
            WorkflowError: see ``raise_on_failure``.
        """
        self.binding.bind()
        return await self.results.wait_async(count, timeout, raise_on_failure,
                                             stall_reason=self.stall_reason)

    def wait(self, count: int | None = None, timeout: float | None = None,
             raise_on_failure: bool = False) -> list[RolloutResult]:
        """Blocking twin of :meth:`wait_async`."""
        return self.binding.blocking(self.wait_async(count, timeout, raise_on_failure),
                                     "wait()")

    async def wait_for_async(self, task_id: int, timeout: float | None = None,
                             raise_on_failure: bool = False) -> RolloutResult:
        """Wait for one task's result and consume it.

        Raises:
            UnknownTaskIdError: never submitted here, or already consumed.
            RolloutTimeoutError: time ran out (the task keeps running).
            WorkflowError: the task failed and ``raise_on_failure``.
        """
        self.binding.bind()
        return await self.results.wait_for_async(task_id, timeout, raise_on_failure,
                                                 stall_reason=self.stall_reason)

    def wait_for(self, task_id: int, timeout: float | None = None,
                 raise_on_failure: bool = False) -> RolloutResult:
        """Blocking twin of :meth:`wait_for_async`."""
        return self.binding.blocking(
            self.wait_for_async(task_id, timeout, raise_on_failure), "wait_for()")

    async def rollout_batch_async(
        self,
        data: Sequence[Any],
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Run one task per item; return one result per item in input order (rejected too).

        On a timeout (``RolloutTimeoutError``) the tasks keep running and all their results
        come back from ``wait()``. ``progress=True`` shows a tqdm bar.
        """
        self.check_open("rollout_batch()")
        self.binding.bind()
        return await rollout_batch(self, data, workflow, workflow_kwargs, should_accept_fn,
                                   timeout, progress)

    def rollout_batch(
        self,
        data: Sequence[Any],
        workflow: WorkflowSpec,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Blocking twin of :meth:`rollout_batch_async`."""
        return self.binding.blocking(self.rollout_batch_async(
            data, workflow, workflow_kwargs, should_accept_fn, timeout, progress),
            "rollout_batch()")

    async def prepare_batch_async(
        self,
        data: Iterable[Any],
        workflow: WorkflowSpec,
        batch_size: int,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        raise_on_failure: bool = True,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Submit items from ``data`` until ``batch_size`` are accepted; return those.

        Each call uses the arguments it is given (AReaL caches the first call's). Pass an
        iterator to continue where the previous call stopped. Rejected results are dropped
        (they remain in the traces).

        Raises:
            ConfigError: ``batch_size`` larger than ``queue_size``, or the data ran out.
            WorkflowError: a task failed and ``raise_on_failure`` (default).
            RolloutTimeoutError: time ran out; results go to ``wait()``.
        """
        self.check_open("prepare_batch()")
        self.binding.bind()
        return await prepare_batch(self, data, workflow, batch_size, workflow_kwargs,
                                   should_accept_fn, timeout, raise_on_failure, progress)

    def prepare_batch(
        self,
        data: Iterable[Any],
        workflow: WorkflowSpec,
        batch_size: int,
        workflow_kwargs: dict[str, Any] | None = None,
        should_accept_fn: AcceptFnSpec | None = None,
        timeout: float | None = None,
        raise_on_failure: bool = True,
        progress: bool = False,
    ) -> list[RolloutResult]:
        """Blocking twin of :meth:`prepare_batch_async`."""
        return self.binding.blocking(self.prepare_batch_async(
            data, workflow, batch_size, workflow_kwargs, should_accept_fn, timeout,
            raise_on_failure, progress), "prepare_batch()")

    # -- control -----------------------------------------------------------------------
    def pause(self) -> None:
        """Stop dispatching new rollouts on every worker (running ones continue)."""
        for w in self.workers:
            w.pause()

    def resume(self) -> None:
        """Restart dispatching on every worker."""
        for w in self.workers:
            w.resume()
        self.waiters.wake()

    def cancel(self, task_id: int) -> bool:
        """Cancel one task; ``False`` if it already finished."""
        worker = self.results.worker_of(task_id)
        if not self.results.is_unfinished(task_id):
            return False
        worker.cancel(task_id)
        return True

    def cancel_all(self) -> int:
        """Cancel every unfinished task whose cancel was not requested yet; how many."""
        book = self.results
        return sum(1 for tid in book.unfinished() if book.worker_of(tid).cancel(tid))

    def set_version(self, version: int) -> None:
        """Set the weight version on every worker and re-check staleness capacity."""
        for w in self.workers:
            w.set_version(version)
        self.waiters.wake()

    def get_version(self) -> int:
        """The weight version (of the first worker; all are set together)."""
        return self.workers[0].engine.get_version()

    async def pause_generation_async(self) -> None:
        """Server side: abort in-flight generations and hold new ones on every server."""
        await asyncio.gather(*(w.engine.pause_generation_async() for w in self.workers))

    def pause_generation(self) -> None:
        """Blocking twin of :meth:`pause_generation_async`."""
        self.binding.blocking(self.pause_generation_async(), "pause_generation()")

    async def continue_generation_async(self) -> None:
        """Server side: undo :meth:`pause_generation_async`."""
        await asyncio.gather(*(w.engine.continue_generation_async() for w in self.workers))

    def continue_generation(self) -> None:
        """Blocking twin of :meth:`continue_generation_async`."""
        self.binding.blocking(self.continue_generation_async(), "continue_generation()")

    def stats(self) -> dict[str, Any]:
        """Totals over workers (enqueued, running, accepted, …) plus ``workers`` detail."""
        per = {w.name: w.stats() for w in self.workers}
        total: dict[str, Any] = {key: sum(int(s[key]) for s in per.values()) for key in _TOTALS}
        book = self.results
        total.update(consumed=total["submitted"] - book.n_tracked(), ready=book.n_ready(),
                     outstanding=book.n_tracked(), version=self.get_version(),
                     paused=all(bool(s["paused"]) for s in per.values()),
                     closed=self.closed, next_task_id=self.ids.peek, workers=per)
        return total

    # -- replay ------------------------------------------------------------------------
    async def replay_async(self, source: ReplaySource, *, task_ids: Sequence[int] | None = None,
                           check_determinism: bool = True, timeout: float | None = None,
                           ) -> pd.DataFrame:
        """Re-issue recorded calls as traced tasks of this controller and compare them.

        One task per recorded task (new ids from this controller's counter, in the
        ``replay_task_id`` column), run on its workers' engines; the frame is
        :func:`rollout_kit.replay.replay_async`'s, indexed by the recorded
        ``(task_id, session_id, call)``. A replay task that fails leaves ``failed`` rows.
        The tracer is flushed first, so ``source`` may be this controller's own dump (the
        replayed calls are then recorded there too, as tasks of their own).
        """
        self.check_open("replay()")
        self.tracer.flush()  # this controller's own dump may be the source: write it out
        return await replay_through(functools.partial(self.rollout_batch_async, timeout=timeout),
                                    source, task_ids=task_ids,
                                    check_determinism=check_determinism)

    def replay(self, source: ReplaySource, *, task_ids: Sequence[int] | None = None,
               check_determinism: bool = True, timeout: float | None = None) -> pd.DataFrame:
        """Blocking twin of :meth:`replay_async`."""
        return self.binding.blocking(self.replay_async(
            source, task_ids=task_ids, check_determinism=check_determinism, timeout=timeout),
            "replay()")

    # -- traces ------------------------------------------------------------------------
    def traces(self) -> pd.DataFrame:
        """The tasks DataFrame, indexed by ``task_id``."""
        return self.tracer.tasks_df()

    def sessions(self) -> pd.DataFrame:
        """The sessions DataFrame, indexed by ``(task_id, session_id)``."""
        return self.tracer.sessions_df()

    def spans(self) -> pd.DataFrame:
        """The spans DataFrame (one row per phase span)."""
        return self.tracer.spans_df()

    def server_metrics(self) -> pd.DataFrame:
        """The samples scraped from the servers' ``/metrics`` so far (columns ``ts``,
        ``server``, ``metric``, ``labels``, ``value``; ``scrape_interval``): the frame
        :func:`rollout_kit.analysis.server_series` reads."""
        return self.tracer.server_metrics_df()

    def __repr__(self) -> str:
        s = self.stats()
        return (f"RolloutController(workers={self.worker_names()}, "
                f"outstanding={s['outstanding']}, running={s['running']}, "
                f"accepted={s['accepted']}, closed={s['closed']})")
