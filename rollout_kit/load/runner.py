"""Open-loop load: send requests on a schedule through the controller and record each one.

Every request is a task of the given :class:`~rollout_kit.controller.RolloutController`
(``submit_reserved``: its id comes from the controller's one counter, the tracer registers
it, the tasks / sessions / spans frames and the timeline show it; the result comes back to
this run, never to a concurrent ``wait()``).

Pacing: the due times come from :class:`~.arrivals.Arrivals`; request ``i`` is sent when
``perf_counter()`` reaches ``start + offsets[i]`` — an absolute deadline from one start
instant, so lateness never accumulates. The runner sleeps until about 0.5 ms before a deadline
and then yields to the loop (``sleep(0)``) until it passes, so sends are not late by the
loop's millisecond timer granularity; when it is behind it sends the due requests in slices
of 64, yielding between slices (a run at thousands of requests per second never holds the
loop). As ``vllm bench serve`` does, the objects that exist when the run starts are frozen out
of the garbage collector's passes (``gc.freeze()``, undone at the end) to keep its pauses
short.

Per request (one row of :attr:`LoadRun.frame`, indexed by ``task_id``; times in seconds from
the run's start):

* ``scheduled_s``: the due time; ``submitted_s``: when the task was handed to the
  controller; ``sent_s``: when its workflow called ``generate_async`` (the request left for
  the engine);
* ``queue_wait_s``: time spent waiting for a ``max_concurrency`` slot (the *client queue*,
  vllm's ``client_queue_time``; 0 without a cap);
* ``send_lag_s = sent_s - scheduled_s - queue_wait_s``: how late the client itself was (the
  pacing loop, then the executor's own queue and task start-up; with more concurrent tasks
  than ``ExecutorConfig.max_concurrent_rollouts`` allows, the executor's queue time shows
  here — raise it for open-loop load). Never negative by more than float rounding.
* ``done_s``, ``status``, ``reason``, ``error`` (a short label for failures, e.g.
  ``connection error (127.0.0.1:8000)``), ``warmup``, ``prompt_tokens``, ``output_tokens``,
  ``ttft_s``, ``tpot_s``, ``e2el_s``, ``itl_s`` (the list of gaps), ``samples`` (generate
  calls), ``retries`` (the engine's retries: a retried request's latency includes the backoff;
  ``vllm bench serve`` never retries, so measure with ``RetryPolicy(max_retries=0)``),
  ``version`` / ``done_version`` (weight version when sent / finished),
  ``request_index`` (the position in ``requests``, which is cycled when the run is longer).

TTFT and ITL come from the stream: use ``EngineConfig(stream=True)`` (without it ``ttft_s``
is NaN and ``itl_s`` empty; ``e2el_s`` is still measured).

Failures: a request whose server went down ends ``failed`` with the engine's ``reason``
(``connection_error``, ``no_healthy_server``, …); it is counted and kept out of the latency
statistics, and the run goes on. Interruption: cancelling the coroutine (Ctrl-C in a
notebook cell or a script) stops sending, cancels the in-flight tasks through the
controller and *returns* the partial :class:`LoadRun` with ``interrupted=True`` (the blocking
twin does the same on ``KeyboardInterrupt``).

The measured window starts at 0 (with ``warmup=k``: at the due time of the last warm-up
request) and ends at the last measured request's end; ``offered_rate`` is the measured
requests over their scheduled span, ``achieved_rate`` the measured requests actually sent
over their send span, and the throughputs of :meth:`LoadRun.metrics` divide by
``duration_s``.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..config import GenerationConfig
from ..errors import ConfigError, ControllerStateError, RolloutKitError, truncate
from .arrivals import Arrivals
from .metrics import compute_metrics, tpot_of
from .workflow import GenerateRequest, LoadItem, Measured, TaskRecord

if TYPE_CHECKING:
    from ..controller import RolloutController
    from ..io import RolloutResult

__all__ = ["FRAME_COLUMNS", "LoadRun", "LoadSpec", "run_load", "run_load_async"]

#: before a deadline the runner stops sleeping and yields to the loop until it passes
SPIN_S = 0.0005
#: due requests sent before the runner yields to the loop
SEND_SLICE = 64
#: seconds to wait for cancelled tasks to report after an interruption
CANCEL_WAIT_S = 10.0

FRAME_COLUMNS = (
    "request_index", "scheduled_s", "submitted_s", "sent_s", "queue_wait_s", "send_lag_s",
    "done_s", "status", "reason", "error", "warmup", "prompt_tokens", "output_tokens",
    "ttft_s", "tpot_s", "e2el_s", "itl_s", "samples", "retries", "version", "done_version",
)


def _opt_int(name: str, value: object, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum} or None, got {value!r}")


def _opt_seconds(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 < float(value) < math.inf):
        raise ConfigError(f"{name} must be a number of seconds > 0 and finite, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """What load to offer: arrivals, a bound, a concurrency cap and warm-up.

    Args:
        arrivals: the arrival process (default: everything at ``t = 0``).
        num_requests: bound in requests (default, without ``duration``: one request per
            item of ``requests``, or per timestamp of a fixed schedule).
        duration: bound in seconds: requests due before it are sent (with
            ``num_requests`` too, whichever comes first).
        max_concurrency: at most this many requests in flight; a due request waits in the
            client queue for a slot (``queue_wait_s``), as ``vllm bench serve
            --max-concurrency`` does.
        warmup: the first ``warmup`` requests are sent on the schedule but left out of the
            statistics (``warmup`` column).
        drain_timeout: after the last send, wait at most this long for the requests in
            flight, then cancel them (they end ``cancelled``); default: wait for all.

    Raises:
        ConfigError: a bad field.
    """

    arrivals: Arrivals = field(default_factory=Arrivals)
    num_requests: int | None = None
    duration: float | None = None
    max_concurrency: int | None = None
    warmup: int = 0
    drain_timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.arrivals, Arrivals):
            raise ConfigError(f"arrivals must be an Arrivals, got {type(self.arrivals).__name__}")
        _opt_int("num_requests", self.num_requests, 1)
        _opt_seconds("duration", self.duration)
        _opt_int("max_concurrency", self.max_concurrency, 1)
        _opt_int("warmup", self.warmup, 0)
        _opt_seconds("drain_timeout", self.drain_timeout)

    def schedule(self, n_requests: int) -> np.ndarray:
        """The due times of this spec's requests (``n_requests``: the dataset's size).

        Raises:
            ConfigError: no bound is possible, or warm-up leaves nothing to measure.
        """
        arr = self.arrivals
        if self.num_requests is not None:
            offsets = arr.offsets(self.num_requests)
            if self.duration is not None:
                offsets = offsets[offsets < self.duration]
        elif self.duration is not None:
            offsets = arr.until(self.duration)
        else:
            n = len(arr.timestamps) if arr.timestamps is not None else n_requests
            offsets = arr.offsets(n)
        if self.warmup >= len(offsets):
            raise ConfigError(f"warmup={self.warmup} leaves none of the {len(offsets)} "
                              "scheduled requests to measure")
        return offsets


@dataclass(slots=True, kw_only=True)
class LoadRun:
    """The outcome of one load run: a row per sent request, rates and the window.

    Attributes:
        frame: one row per request that got a task id (see the module docstring).
        offered_rate: measured requests / their scheduled span (req/s; ``inf``: all at 0).
        achieved_rate: measured requests sent / their actual send span (req/s).
        duration_s: the measured window (the throughputs' denominator).
        interrupted: the run was cancelled (Ctrl-C) or its controller closed mid-run.
        start_s: where the measured window starts (seconds from the run's start).
        unsent: requests scheduled but never sent (an interrupted run).
        scheduled: how many requests the schedule held.
        spec: the spec of the run.
    """

    frame: pd.DataFrame
    offered_rate: float
    achieved_rate: float
    duration_s: float
    interrupted: bool = False
    start_s: float = 0.0
    unsent: int = 0
    scheduled: int = 0
    spec: LoadSpec | None = None

    def metrics(self, goodput: str | dict[str, float] | None = None,
                percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
        """:func:`~.metrics.compute_metrics` of the frame, plus the run's rates.

        Adds ``offered_rate``, ``achieved_rate``, ``interrupted``, ``unsent`` and
        ``completion_rate`` (:meth:`completion_rate`: the rate the server kept up with,
        whatever the latency of the last request).
        """
        m = compute_metrics(self.frame, duration_s=self.duration_s, goodput=goodput,
                            percentiles=percentiles)
        m.update(offered_rate=self.offered_rate, achieved_rate=self.achieved_rate,
                 interrupted=self.interrupted, unsent=self.unsent,
                 completion_rate=self.completion_rate())
        return m

    def completion_rate(self) -> float:
        """The rate the server kept up with, on the scale of ``offered_rate`` (req/s).

        ``offered_rate × (k − 1)/(m − 1) × scheduled span / completion span`` over the
        measured rows: ``m`` of them scheduled over ``scheduled span`` (first to last due
        time), ``k`` completed over ``completion span`` (first to last completion). Equal
        to ``offered_rate`` when every request completes and completions keep the
        arrivals' pace (any constant latency); below it when the server falls behind or
        requests fail. NaN with fewer than 2 completions or an infinite offered rate.
        """
        df = self.frame
        if not len(df) or not math.isfinite(self.offered_rate):
            return math.nan
        meas = df[~df["warmup"].astype(bool)]
        sched = meas["scheduled_s"].to_numpy(dtype=float)
        ok = meas[meas["status"].isin(("accepted", "rejected"))]
        done = ok["done_s"].to_numpy(dtype=float)
        done = done[~np.isnan(done)]
        m, k = len(sched), len(done)
        if k < 2 or m < 2:
            return math.nan
        sched_span = float(sched.max() - sched.min())
        done_span = float(done.max() - done.min())
        if sched_span <= 0 or done_span <= 0:
            return math.nan
        return float(self.offered_rate * (k - 1) / (m - 1) * sched_span / done_span)

    def __repr__(self) -> str:
        n = len(self.frame)
        status = self.frame["status"].value_counts().to_dict() if n else {}
        return (f"LoadRun(requests={n}, offered_rate={self.offered_rate:.4g}, "
                f"achieved_rate={self.achieved_rate:.4g}, duration_s={self.duration_s:.4g}, "
                f"status={status}, interrupted={self.interrupted})")


def _error_label(result: RolloutResult) -> str | None:
    err = result.error
    if err is None:
        return None
    brief = getattr(err, "brief", None)
    if isinstance(brief, str):
        return brief
    return truncate(f"{type(err).__name__}: {err}", 200)


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
        self._wake: asyncio.Future[None] | None = None
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
        fut = self._wake
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _nap(self, delay: float | None) -> None:
        """Sleep ``delay`` seconds (``None``: until poked); a completion pokes it early."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._wake = fut
        handle = None if delay is None else loop.call_later(delay, _resolve, fut)
        try:
            await fut
        finally:
            self._wake = None
            if handle is not None:
                handle.cancel()

    # -- send side -------------------------------------------------------------------
    async def _submit(self, row: int, arrived: float) -> None:
        ctl = self.controller
        item = LoadItem(row, self.items[row % len(self.items)])
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
        burst = 0
        while self.next_row < n and self.sending:
            if self.pending:
                await self._drain_pending()
            due = start + float(offsets[self.next_row])
            now = time.perf_counter()
            wait = due - now
            if wait > SPIN_S:
                burst = 0
                await self._nap(wait - SPIN_S)
                continue
            if wait > 0:
                burst = 0
                await asyncio.sleep(0)
                continue
            row = self.next_row
            self.next_row += 1
            if limit is None or (not self.pending and len(self.in_flight) < limit):
                await self._submit(row, now)
            else:
                self.pending.append((row, now))
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
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return False
            await self._nap(left)
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
            from ..controller.batching import progress_bar

            self._bar = progress_bar(self.n, "load", True)
        gc.collect()
        gc.freeze()  # as vllm bench serve: no collector pass over what exists already
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
            gc.unfreeze()
            if self._bar is not None:
                self._bar.close()
        return self.result()

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
            await self._cancel_in_flight()
        return self.result()

    # -- the outcome -----------------------------------------------------------------
    def result(self) -> LoadRun:
        rows = np.flatnonzero(self.task_of >= 0)
        start = self.start
        k = len(rows)
        sched = self.offsets[rows]
        submitted = self.submitted[rows] - start
        qwait = self.queue_wait[rows]
        done = self.done_t[rows] - start
        sent = np.full(k, np.nan)
        first = np.full(k, np.nan)
        end = np.full(k, np.nan)
        prompt_tokens = np.zeros(k, dtype=np.int64)
        output_tokens = np.zeros(k, dtype=np.int64)
        samples = np.zeros(k, dtype=np.int64)
        retries = np.zeros(k, dtype=np.int64)
        version = np.full(k, -1, dtype=np.int64)
        itl: list[list[float]] = [[] for _ in range(k)]
        status: list[str] = []
        reason: list[str | None] = []
        error: list[str | None] = []
        for j, row in enumerate(rows):
            res = self.results.get(int(row))
            if res is None:
                status.append("cancelled" if self.interrupted else "pending")
                reason.append("interrupted" if self.interrupted else "unfinished")
                error.append(None)
            else:
                status.append(res.status)
                reason.append(res.reason)
                error.append(_error_label(res))
            rec = self.records.get(int(row))
            if rec is None:
                continue
            sent[j] = rec.sent - start
            version[j] = rec.version
            samples[j] = rec.calls
            retries[j] = rec.retries
            if res is not None and res.status == "failed":
                continue  # no latencies or token counts for failures
            first[j] = rec.first_token - start
            end[j] = rec.end - start
            prompt_tokens[j] = rec.prompt_tokens
            output_tokens[j] = rec.output_tokens
            itl[j] = rec.itl
        ttft = first - sent
        e2el = end - sent
        warm = rows < self.spec.warmup
        frame = pd.DataFrame({
            "request_index": (rows % len(self.items)).astype(np.int64),
            "scheduled_s": sched,
            "submitted_s": submitted,
            "sent_s": sent,
            "queue_wait_s": qwait,
            "send_lag_s": sent - sched - qwait,
            "done_s": done,
            "status": _objects(status),
            "reason": _objects(reason),
            "error": _objects(error),
            "warmup": warm,
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "ttft_s": ttft,
            "tpot_s": tpot_of(e2el, ttft, output_tokens),
            "e2el_s": e2el,
            "itl_s": _objects(itl),
            "samples": samples,
            "retries": retries,
            "version": version,
            "done_version": self.done_version[rows],
        }, index=pd.Index(self.task_of[rows], name="task_id"))
        w = self.spec.warmup
        t0 = float(self.offsets[w - 1]) if w else 0.0
        n_meas = self.n - w
        span = float(self.offsets[-1]) - t0
        offered = math.inf if span <= 0 else n_meas / span
        meas = ~warm
        sent_at = np.where(np.isnan(sent), submitted, sent)[meas]
        achieved = math.nan
        if len(sent_at):
            last = float(np.nanmax(sent_at)) - t0
            achieved = math.inf if last <= 0 else len(sent_at) / last
        ends = done[meas]
        ends = ends[~np.isnan(ends)]
        if len(ends):
            duration = float(ends.max()) - t0
        elif len(sent_at):
            duration = float(np.nanmax(sent_at)) - t0
        else:
            duration = 0.0
        return LoadRun(frame=frame, offered_rate=offered, achieved_rate=achieved,
                       duration_s=max(duration, 0.0), interrupted=self.interrupted,
                       start_s=t0, unsent=self.n - k, scheduled=self.n, spec=self.spec)


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array (lists stay whole; no index to misalign with the frame's)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def run_load_async(controller: RolloutController, requests: Sequence[Any],
                         spec: LoadSpec | None = None, *, workflow: Any = None,
                         gconfig: GenerationConfig | None = None,
                         progress: bool = False) -> LoadRun:
    """Offer open-loop load through ``controller``; return every request's record.

    Args:
        controller: the controller whose workers send the requests (in-process workers).
        requests: ``LoadRequest`` items (from :mod:`rollout_kit.load.datasets`) for the
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
