"""The outcome of a load run: :class:`LoadRun`, its per-request frame, rates and window.

Per request (one row of :attr:`LoadRun.frame`, indexed by ``task_id``; times in seconds from
the run's start):

* ``scheduled_s``: the due time; ``submitted_s``: when the task was handed to the
  controller (up to :data:`~rollout_kit.load._runner.PRESTAGE_S`, 0.5 ms, *before* the due
  time: the task starts ahead and waits for it); ``sent_s``: when its workflow called
  ``generate_async`` (the request left for the engine; never before ``scheduled_s``);
* ``queue_wait_s``: time spent waiting for a ``max_concurrency`` slot (the *client queue*,
  vllm's ``client_queue_time``; 0 without a cap);
* ``send_lag_s = sent_s - scheduled_s - queue_wait_s``: how late the client itself was (the
  pacing loop and the loop turns it waited for, the workflow's work before its first
  generate call, and a task submitted late its start-up; with more concurrent tasks
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

The measured window starts at 0 (with ``warmup=k``: at the due time of the last warm-up
request) and ends at the last measured request's end; ``offered_rate`` is the measured
requests over their scheduled span, ``achieved_rate`` the measured requests actually sent
over their send span, and the throughputs of :meth:`LoadRun.metrics` divide by
``duration_s``.

:func:`build_load_run` makes the :class:`LoadRun` from what the runner (:mod:`._runner`)
recorded per scheduled request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .._errors import truncate
from ._metrics import compute_metrics, tpot_of
from ._spec import LoadSpec

if TYPE_CHECKING:
    from .._io import RolloutResult
    from ._workflow import TaskRecord

FRAME_COLUMNS = (
    "request_index", "scheduled_s", "submitted_s", "sent_s", "queue_wait_s", "send_lag_s",
    "done_s", "status", "reason", "error", "warmup", "prompt_tokens", "output_tokens",
    "ttft_s", "tpot_s", "e2el_s", "itl_s", "samples", "retries", "version", "done_version",
)


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
        clock_origin: the ``perf_counter()`` instant the frame's times count from.
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
    clock_origin: float = math.nan

    def metrics(self, goodput: str | dict[str, float] | None = None,
                percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
        """:func:`~._metrics.compute_metrics` of the frame, plus the run's rates.

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


def build_load_run(*, spec: LoadSpec, offsets: np.ndarray, n_items: int, start: float,
                   interrupted: bool, task_of: np.ndarray, submitted_t: np.ndarray,
                   queue_wait: np.ndarray, done_t: np.ndarray, done_version: np.ndarray,
                   results: dict[int, RolloutResult],
                   records: dict[int, TaskRecord]) -> LoadRun:
    """The :class:`LoadRun` of a run's records: one row per request that got a task id.

    Args:
        spec: the run's spec (its ``warmup``).
        offsets: the schedule (due times, seconds from the run's start), one per row.
        n_items: how many items the dataset held (``request_index`` is the row modulo it).
        start: the run's start (``perf_counter()``); the frame's times are relative to it.
        interrupted: the run was cancelled: rows without a result end ``cancelled``.
        task_of: the task id of each row (``-1``: never sent).
        submitted_t, queue_wait, done_t, done_version: per row, as the runner recorded
            them (``perf_counter()`` instants, seconds, the weight version at the end).
        results: row -> the task's result.
        records: row -> the workflow's timing of the task.
    """
    n = len(offsets)
    rows = np.flatnonzero(task_of >= 0)
    k = len(rows)
    sched = offsets[rows]
    submitted = submitted_t[rows] - start
    qwait = queue_wait[rows]
    done = done_t[rows] - start
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
        res = results.get(int(row))
        if res is None:
            status.append("cancelled" if interrupted else "pending")
            reason.append("interrupted" if interrupted else "unfinished")
            error.append(None)
        else:
            status.append(res.status)
            reason.append(res.reason)
            error.append(_error_label(res))
        rec = records.get(int(row))
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
    warm = rows < spec.warmup
    frame = pd.DataFrame({
        "request_index": (rows % n_items).astype(np.int64),
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
        "done_version": done_version[rows],
    }, index=pd.Index(task_of[rows], name="task_id"))
    w = spec.warmup
    t0 = float(offsets[w - 1]) if w else 0.0
    n_meas = n - w
    span = float(offsets[-1]) - t0
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
                   duration_s=max(duration, 0.0), interrupted=interrupted,
                   start_s=t0, unsent=n - k, scheduled=n, spec=spec, clock_origin=start)


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array (lists stay whole; no index to misalign with the frame's)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out
