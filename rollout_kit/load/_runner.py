"""Open-loop load: send requests on a schedule through the controller and record each one.

Every request is a task of the given :class:`~rollout_kit.RolloutController`
(``submit_reserved``: its id comes from the controller's one counter, the tracer registers
it, the tasks / sessions / spans frames and the timeline show it; the result comes back to
this run, never to a concurrent ``wait()``).

Pacing: the due times come from :class:`~._arrivals.Arrivals`; request ``i`` is sent when
``perf_counter()`` reaches ``start + offsets[i]`` — an absolute deadline from one start
instant, so lateness never accumulates. The runner sleeps on an :class:`~._alarm.Alarm` (on
Linux a kernel timer, not the loop's millisecond one) until :data:`PRESTAGE_S` before a
deadline and submits the request's task then, with its due time: the task is dispatched and
started, and waits (yielding to the loop) until the instant, then runs the workflow. What a
submission costs before the request leaves (the id, the tracer's marks, the task, the loop
turn it starts in, the executor's prologue: a large share of a send's lateness, more so in a
process woken from idle) is paid before the due time instead of after it (the pacing rows of
``bench/bench_load.py``). So a task's ``submitted_s`` is up to
``PRESTAGE_S`` before its ``scheduled_s``, and with ``max_concurrency`` it holds its slot
from then on. When it is behind it sends the due requests in slices of 64, yielding between
slices (a run at thousands of requests per second never holds the loop). As
``vllm bench serve`` does, the objects that exist when the run starts are frozen out of the
garbage collector's passes for the run (:class:`~rollout_kit._gc.GcHold`) to keep its pauses
short.

Failures: a request whose server went down ends ``failed`` with the engine's ``reason``
(``connection_error``, ``no_healthy_server``, …); it is counted and kept out of the latency
statistics, and the run goes on. Interruption: cancelling the coroutine (Ctrl-C in a
notebook cell or a script) stops sending, cancels the in-flight tasks through the
controller (a task still waiting for its due time among them: it ends ``cancelled``, never
sent) and *returns* the partial :class:`LoadRun` with ``interrupted=True`` (the blocking
twin does the same on ``KeyboardInterrupt``).

What load to offer is a :class:`~._spec.LoadSpec` (:mod:`._spec`). What a run returns, the
:class:`~._results.LoadRun` (one row per request with its times, status and latencies, the
offered and achieved rates, the measured window), is built and documented in
:mod:`._results`. TTFT and ITL come from the stream: use ``EngineConfig(stream=True)``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._config import GenerationConfig
from .._errors import ConfigError, ControllerStateError, RolloutKitError
from .._gc import GcHold
from ._alarm import Alarm
from ._results import LoadRun, build_load_run
from ._spec import LoadSpec
from ._workflow import GenerateRequest, LoadItem, Measured, TaskRecord

if TYPE_CHECKING:
    from .._controller import RolloutController
    from .._io import RolloutResult

#: how long before its due time a request's task is submitted (it waits for the instant)
PRESTAGE_S = 0.0005
#: the same lead where the alarm is the loop's own timer (whole milliseconds, rounded up)
PRESTAGE_COARSE_S = 0.0015
#: due requests sent before the runner yields to the loop
SEND_SLICE = 64
#: seconds to wait for cancelled tasks to report after an interruption
CANCEL_WAIT_S = 10.0


class _Run:
    """One run's state: the schedule, the sender, the completion callback, the frame."""

    def __init__(self, controller: RolloutController, requests: Sequence[Any], spec: LoadSpec,
                 workflow: Any, gconfig: GenerationConfig | None, progress: bool) -> None:
        if not isinstance(spec, LoadSpec):
            raise ConfigError(f"spec must be a LoadSpec, got {type(spec).__name__}")
        try:
            items = list(requests)
        except TypeError:
            raise ConfigError(f"requests must be a sequence, got "
                              f"{type(requests).__name__}") from None
        if not items:
            raise ConfigError("the dataset is empty: a load run needs at least one request")
        if workflow is not None and gconfig is not None:
            raise ConfigError("gconfig configures the default GenerateRequest workflow; with "
                              "workflow= set the sampling in your workflow")
        self.controller = controller
        self.items = items
        self.spec = spec
        self.measured = Measured(workflow if workflow is not None else GenerateRequest(gconfig))
        self.recipe = controller.prepare(self.measured, None, None)
        for i, item in enumerate(items):  # every item before the first task id is taken
            try:
                self.measured.validate(item)
            except ConfigError as exc:
                raise ConfigError(f"requests[{i}]: {exc}") from exc
        self.offsets = spec.schedule(len(items))
        n = len(self.offsets)
        self.n = n
        self.limit = spec.max_concurrency
        self.submitted = np.full(n, np.nan)
        self.queue_wait = np.zeros(n)
        self.done_t = np.full(n, np.nan)
        self.done_version = np.full(n, -1, dtype=np.int64)
        self.task_of = np.full(n, -1, dtype=np.int64)
        self.results: dict[int, RolloutResult] = {}
        self.records: dict[int, TaskRecord] = {}
        self.in_flight: dict[int, int] = {}  # task id -> row
        self.pending: deque[tuple[int, float]] = deque()  # (row, arrival time): client queue
        self.next_row = 0
        self.sending = True
        self.interrupted = False
        self.start = math.nan
        self.task: asyncio.Task[LoadRun] | None = None
        self._alarm: Alarm | None = None
        self._bar: Any = None
        self._progress = progress

    # -- completion side -------------------------------------------------------------
    def on_done(self, tid: int) -> None:
        now = time.perf_counter()
        row = self.in_flight.pop(tid, None)
        if row is None:
            return
        self.done_t[row] = now
        ctl = self.controller
        self.done_version[row] = ctl.get_version()
        self.results[row] = ctl.take(tid)
        rec = self.measured.records.pop(row, None)
        if rec is not None:
            self.records[row] = rec
        if self._bar is not None:
            self._bar.update(1)
        if self.pending or not self.sending:
            self._poke()

    def _poke(self) -> None:
        if self._alarm is not None:
            self._alarm.ring()

    def _alarm_on_loop(self) -> Alarm:
        alarm = self._alarm
        if alarm is None:
            alarm = self._alarm = Alarm(asyncio.get_running_loop())
        return alarm

    async def _nap(self, until: float | None) -> None:
        """Sleep until ``perf_counter()`` reaches ``until`` (``None``: until poked); a
        completion pokes it early."""
        await self._alarm_on_loop().wait(until)

    # -- send side -------------------------------------------------------------------
    async def _submit(self, row: int, arrived: float) -> None:
        ctl = self.controller
        item = LoadItem(row, self.items[row % len(self.items)], arrived)
        tid = await ctl.submit_reserved(item, self.recipe, self.on_done)
        now = time.perf_counter()
        self.in_flight[tid] = row
        self.task_of[row] = tid
        self.submitted[row] = now
        self.queue_wait[row] = max(0.0, now - arrived) if self.limit is not None else 0.0

    async def _drain_pending(self) -> None:
        limit = self.limit
        while self.pending and self.sending and (limit is None or len(self.in_flight) < limit):
            row, arrived = self.pending.popleft()
            await self._submit(row, arrived)

    async def _send_all(self) -> None:
        offsets = self.offsets
        n = self.n
        limit = self.limit
        start = self.start
        lead = PRESTAGE_S if self._alarm_on_loop().precise else PRESTAGE_COARSE_S
        burst = 0
        while self.next_row < n and self.sending:
            if self.pending:
                await self._drain_pending()
            due = start + float(offsets[self.next_row])
            if due - time.perf_counter() > lead:
                burst = 0
                await self._nap(due - lead)
                continue
            row = self.next_row
            self.next_row += 1
            if limit is None or (not self.pending and len(self.in_flight) < limit):
                await self._submit(row, due)
            else:
                self.pending.append((row, due))
            burst += 1
            if burst >= SEND_SLICE:
                burst = 0
                await asyncio.sleep(0)
        while self.pending and self.sending:
            await self._drain_pending()
            if self.pending:
                await self._nap(None)

    async def _wait_in_flight(self, timeout: float | None) -> bool:
        """Wait until nothing is in flight; ``False`` when ``timeout`` ran out first."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        while self.in_flight:
            if deadline is not None and time.perf_counter() >= deadline:
                return False
            await self._nap(deadline)
        return True

    async def _cancel_in_flight(self) -> None:
        ctl = self.controller
        for tid in list(self.in_flight):
            try:
                ctl.cancel(tid)
            except RolloutKitError:
                pass
        try:
            await self._wait_in_flight(CANCEL_WAIT_S)
        except (asyncio.CancelledError, KeyboardInterrupt):
            pass
        for tid in list(self.in_flight):  # never reported: their results go to wait()
            try:
                ctl.release(tid)
            except RolloutKitError:
                pass

    async def run_async(self) -> LoadRun:
        self.task = asyncio.current_task()
        self.controller.binding.bind()
        if self._progress:
            from .._controller.batching import progress_bar

            self._bar = progress_bar(self.n, "load", True)
        hold = GcHold()  # as vllm bench serve: no collector pass over what exists already
        self.start = time.perf_counter()
        try:
            await self._send_all()
            self.sending = False
            if not await self._wait_in_flight(self.spec.drain_timeout):
                await self._cancel_in_flight()
        except ControllerStateError:
            self.sending = False
            self.interrupted = True  # the controller closed mid-run
            await self._cancel_in_flight()
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.sending = False
            self.interrupted = True
            await self._cancel_in_flight()
        finally:
            hold.release()
            self._close_alarm()
            if self._bar is not None:
                self._bar.close()
        return self.result()

    def _close_alarm(self) -> None:
        alarm, self._alarm = self._alarm, None
        if alarm is not None:
            alarm.close()

    async def interrupt_async(self) -> LoadRun:
        """After a ``KeyboardInterrupt`` escaped the loop: cancel the run, return it."""
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            try:
                run: LoadRun = await task
                return run
            except (asyncio.CancelledError, KeyboardInterrupt):
                pass
        self.sending = False
        self.interrupted = True
        if self.in_flight:
            try:
                await self._cancel_in_flight()
            finally:
                self._close_alarm()
        return self.result()

    # -- the outcome -----------------------------------------------------------------
    def result(self) -> LoadRun:
        return build_load_run(spec=self.spec, offsets=self.offsets, n_items=len(self.items),
                              start=self.start, interrupted=self.interrupted,
                              task_of=self.task_of, submitted_t=self.submitted,
                              queue_wait=self.queue_wait, done_t=self.done_t,
                              done_version=self.done_version, results=self.results,
                              records=self.records)


async def run_load_async(controller: RolloutController, requests: Sequence[Any],
                         spec: LoadSpec | None = None, *, workflow: Any = None,
                         gconfig: GenerationConfig | None = None,
                         progress: bool = False) -> LoadRun:
    """Offer open-loop load through ``controller``; return every request's record.

    Args:
        controller: the controller whose workers send the requests (in-process workers).
        requests: ``LoadRequest`` items (from the loaders of :mod:`rollout_kit.load`) for the
            default workflow, or the data items of ``workflow``; cycled when the schedule
            is longer.
        spec: arrivals, bounds, concurrency cap, warm-up (default ``LoadSpec()``: every
            request at once).
        workflow: a workflow instance to run per request instead of one plain generate
            (e.g. ``SingleTurnWorkflow``: generate + reward); its generate calls are timed.
        gconfig: sampling settings of the default workflow.
        progress: show a tqdm bar of finished requests.

    Returns:
        The :class:`LoadRun` (``interrupted=True`` and partial when cancelled).

    Raises:
        ConfigError: an empty dataset, a bad spec or item, ``gconfig`` with ``workflow``.
    """
    return await _Run(controller, requests, spec or LoadSpec(), workflow, gconfig,
                      progress).run_async()


def run_load(controller: RolloutController, requests: Sequence[Any],
             spec: LoadSpec | None = None, *, workflow: Any = None,
             gconfig: GenerationConfig | None = None, progress: bool = False) -> LoadRun:
    """Blocking twin of :func:`run_load_async` (a script, or a notebook cell without
    ``await``); ``KeyboardInterrupt`` returns the partial run with ``interrupted=True``."""
    run = _Run(controller, requests, spec or LoadSpec(), workflow, gconfig, progress)
    binding = controller.binding
    try:
        return binding.blocking(run.run_async(), "run_load()")
    except KeyboardInterrupt:
        return binding.blocking(run.interrupt_async(), "run_load()")
