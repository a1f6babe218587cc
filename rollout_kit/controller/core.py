"""What a controller owns and how a task gets in: the id counter, the tracer, the result
book, the loop binding and the workers (built by the worker pool); initializing and
closing them; ``submit`` and the reserved submit of the batch calls.
:class:`~.controller.RolloutController` adds the calls on submitted tasks."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .._gc import GcHold
from .._loop import LoopBinding
from ..errors import ConfigError, ControllerStateError
from ..executor import Job, Recipe
from ..ids import TaskIdGenerator
from ..tracing import Tracer, TrajectoryDump
from ..workers import LocalScheduler, Worker, WorkerPool, WorkerSpec
from .results import ResultBook
from .waiting import Waiters

if TYPE_CHECKING:
    import os

    from ..config import EngineConfig, ExecutorConfig
    from ..engines import InferenceEngine, MetricsScraper
    from ..executor import AcceptFnSpec, WorkflowSpec

__all__ = ["ControllerCore"]


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


class ControllerCore:
    """The construction, lifecycle and submission of a :class:`~.controller.RolloutController`
    (its arguments are documented there)."""

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
        from ..engines import InferenceEngine
        from ..engines.scrape import check_interval

        self._scrape_interval = check_interval(scrape_interval)
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
        if self._scrape_interval is None or self._closed or not self.tracer.enabled:
            return
        if self.scraper is None:
            from ..engines.scrape import MetricsScraper, scrape_targets

            targets = scrape_targets(self.engines)
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

