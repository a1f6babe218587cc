"""Views of an RL loop's steps (``Traces.steps`` / ``Traces.step_samples``): where each
step's time went, how idle each side was, how stale and partial the samples were.

The figures under the names verl and AReaL log them:

* **trainer idle ratio** (verl ``trainer/idle_ratio``): the share of a step spent waiting for
  its batch — the trainer had nothing to do.
* **rollout idle ratio** (verl ``rollouter/idle_ratio``): the share of a step during which
  no generation ran: nothing in flight, or generation paused for the weight update (from the
  servers' scraped ``running`` series when given).
* **partial ratio**, **max partial span** (verl ``partial/partial_ratio``,
  ``partial/max_partial_span``): the share of samples whose tokens carry two or more
  weight versions (a weight update cut their generation), and the widest version span.
* **stale samples** (verl ``stale_samples_processed``): samples with staleness > 0.
* **staleness avg / max** (AReaL ``sample_staleness_*``): the consuming step's version minus
  the oldest version among a sample's tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..tracing import schema as S
from ._common import floats, require_columns
from ._server import server_series

#: the columns of :func:`rl_steps`, in order
RL_STEP_COLUMNS = (
    "start", "end", "step_s", "wait_s", "train_s", "sync_s", "trainer_idle_ratio",
    "rollout_idle_ratio", "samples", "tokens", "samples_per_s", "tokens_per_s",
    "staleness_avg", "staleness_max", "stale_samples", "partial_ratio", "max_partial_span",
    "held_by", "held_by_tokens", "median_tokens", "status",
)
_STEP_NEEDS = (S.VERSION, *S.STEP_TIMES, S.SAMPLES, S.TOKENS, S.STEP_STATUS)
_SAMPLE_NEEDS = S.STEP_SAMPLE_COLUMNS


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted disjoint intervals."""
    ok = np.isfinite(starts) & np.isfinite(ends) & (ends > starts)
    if not ok.any():
        return np.empty(0), np.empty(0)
    order = np.argsort(starts[ok], kind="stable")
    s, e = starts[ok][order], ends[ok][order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    groups = np.cumsum(new) - 1
    return s[new], np.asarray(pd.Series(e).groupby(groups).max())


def _covered(ms: np.ndarray, me: np.ndarray, a: float, b: float) -> float:
    """Seconds of ``[a, b]`` covered by the disjoint intervals ``ms``/``me``."""
    if not len(ms) or not b > a:
        return 0.0
    return float(np.clip(np.minimum(me, b) - np.maximum(ms, a), 0, None).sum())


def _generating(spans: pd.DataFrame | None, tasks: pd.DataFrame | None,
                steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """When some generation ran: the union of ``generate`` spans (else of tasks' start–end),
    minus the weight-update windows (generation paused)."""
    if spans is not None and len(spans):
        gen = spans[spans[S.PHASE].astype(str) == "generate"]
        ms, me = _merge(floats(gen[S.START]), floats(gen[S.END]))
    elif tasks is not None and len(tasks):
        ms, me = _merge(floats(tasks[S.START_TS]), floats(tasks[S.END_TS]))
    else:
        return np.empty(0), np.empty(0)
    us, ue = floats(steps[S.UPDATE_START_TS]), floats(steps[S.UPDATE_END_TS])
    for a, b in zip(us, ue, strict=True):  # cut each update window out
        if not (np.isfinite(a) and np.isfinite(b) and b > a) or not len(ms):
            continue
        keep_s = np.concatenate([ms, np.maximum(ms, b)])
        keep_e = np.concatenate([np.minimum(me, a), me])
        ms, me = _merge(keep_s, keep_e)
    return ms, me


def _server_running(server_metrics: pd.DataFrame | None
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """When the servers ran requests, from their scraped ``running`` series (summed over
    servers, each value held until its next scrape); ``None`` without that series."""
    if server_metrics is None or server_metrics.empty:
        return None
    series = server_series(server_metrics)
    run = series[series["series"].astype(str) == "running"]
    if run.empty:
        return None
    table = run.pivot_table(index=S.TS, columns=S.SERVER, values=S.VALUE, aggfunc="last",
                            observed=True).sort_index().ffill().fillna(0.0)
    t = table.index.to_numpy(dtype=np.float64)
    busy = table.sum(axis=1).to_numpy() > 0
    return _merge(t[:-1][busy[:-1]], t[1:][busy[:-1]])


def rl_steps(steps: pd.DataFrame, step_samples: pd.DataFrame, *,
             tasks: pd.DataFrame | None = None, spans: pd.DataFrame | None = None,
             server_metrics: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per step: the split of its wall time, idle ratios, throughput, staleness.

    A step runs from ``start`` (it began waiting for its batch) to ``end`` (its weight
    update ended): ``step_s = wait_s + train_s + sync_s`` (waiting for the batch — the
    trainer idle —, training, weight sync — generation paused). ``held_by`` is the sample
    whose result came last into the batch (the one a synchronous step waited for; needs
    ``tasks``), with its output tokens beside the batch's median.

    Args:
        steps: ``Traces.steps``.
        step_samples: ``Traces.step_samples``.
        tasks: ``Traces.tasks``: for ``held_by`` and, without spans, the rollout idle ratio.
        spans: ``Traces.spans``: generation time for the rollout idle ratio.
        server_metrics: ``Traces.server_metrics``: with the servers' ``running`` series
            scraped, the rollout idle ratio is the share of the step during which no server
            ran a request (as coarse as the scrape interval); else it comes from the spans
            (or tasks), minus the update windows.

    Returns:
        Indexed by ``step``; columns :data:`RL_STEP_COLUMNS`. Ratios are NaN where a step
        did not finish (``status`` other than ``ok``).

    Raises:
        TraceSchemaError: a frame lacks a column it needs.
    """
    steps = require_columns(steps, _STEP_NEEDS, "steps")
    samples = require_columns(step_samples, _SAMPLE_NEEDS, "step_samples")
    if tasks is not None:
        tasks = require_columns(tasks, (S.START_TS, S.END_TS), "tasks")
    if spans is not None:
        spans = require_columns(spans, (S.PHASE, S.START, S.END), "spans")
    start = floats(steps[S.START_TS])
    end = floats(steps[S.UPDATE_END_TS])
    wait = floats(steps[S.BATCH_READY_TS]) - start
    train = floats(steps[S.TRAIN_END_TS]) - floats(steps[S.TRAIN_START_TS])
    sync = end - floats(steps[S.UPDATE_START_TS])
    step_s = end - start
    scraped = _server_running(server_metrics)
    ms, me = scraped if scraped is not None else _generating(spans, tasks, steps)
    gen = np.array([_covered(ms, me, a, b) if np.isfinite(b) else np.nan
                    for a, b in zip(start, end, strict=True)])
    n = floats(steps[S.SAMPLES].astype("Float64").fillna(np.nan))
    tok = floats(steps[S.TOKENS].astype("Float64").fillna(np.nan))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame({
            "start": start, "end": end, "step_s": step_s, "wait_s": wait, "train_s": train,
            "sync_s": sync, "trainer_idle_ratio": wait / step_s,
            "rollout_idle_ratio": 1.0 - gen / step_s, "samples": n, "tokens": tok,
            "samples_per_s": n / step_s, "tokens_per_s": tok / step_s,
        }, index=steps.index)
    by = samples.groupby(S.STEP)
    known = samples[samples[S.STALENESS] >= 0].groupby(S.STEP)[S.STALENESS]
    out["staleness_avg"] = known.mean().reindex(out.index)
    out["staleness_max"] = known.max().reindex(out.index)
    out["stale_samples"] = (samples[S.STALENESS] > 0).groupby(samples[S.STEP]).sum() \
        .reindex(out.index).fillna(0).astype("int64")
    out["partial_ratio"] = by[S.PARTIAL].mean().reindex(out.index)
    span = (samples[S.VERSION_MAX] - samples[S.VERSION_MIN]).where(samples[S.PARTIAL], 0)
    out["max_partial_span"] = span.groupby(samples[S.STEP]).max().reindex(out.index) \
        .fillna(0).astype("int64")
    out["held_by"], out["held_by_tokens"] = _held_by(samples, tasks, out.index)
    out["median_tokens"] = by[S.TOKENS].median().reindex(out.index)
    out["status"] = steps[S.STEP_STATUS]
    return out[list(RL_STEP_COLUMNS)]


def _held_by(samples: pd.DataFrame, tasks: pd.DataFrame | None,
             index: pd.Index) -> tuple[pd.Series, pd.Series]:
    none = pd.Series(pd.NA, index=index, dtype="Int64")
    if tasks is None or samples.empty:
        return none, none.copy()
    ends = tasks[S.END_TS].reindex(samples.index)
    frame = pd.DataFrame({S.STEP: samples[S.STEP].to_numpy(), "end": ends.to_numpy(),
                          S.TOKENS: samples[S.TOKENS].to_numpy(),
                          S.TASK_ID: samples.index.to_numpy()}).dropna(subset=["end"])
    if frame.empty:
        return none, none.copy()
    last = frame.loc[frame.groupby(S.STEP)["end"].idxmax()].set_index(S.STEP)
    return (last[S.TASK_ID].reindex(index).astype("Int64"),
            last[S.TOKENS].reindex(index).astype("Int64"))


def rl_summary(steps: pd.DataFrame, step_samples: pd.DataFrame, *,
               tasks: pd.DataFrame | None = None, spans: pd.DataFrame | None = None,
               server_metrics: pd.DataFrame | None = None) -> pd.Series[Any]:
    """The run's figures, over its finished steps: ``steps``, ``wall_s``,
    ``steps_per_s``, ``samples_per_s``, ``tokens_per_s``, the time split
    (``trainer_idle_ratio`` — waiting —, ``train_share``, ``sync_share``), ``rollout_idle_ratio``,
    ``partial_ratio``, ``max_partial_span``, ``stale_samples``, ``staleness_avg``,
    ``staleness_max`` (see the module docstring for their meaning)."""
    per = rl_steps(steps, step_samples, tasks=tasks, spans=spans,
                   server_metrics=server_metrics)
    done = per[per["status"] == "ok"]
    wall = float(done["end"].max() - done["start"].min()) if len(done) else float("nan")
    total = float(done["step_s"].sum())
    samples = step_samples[step_samples[S.STEP].isin(done.index)]
    known = samples[samples[S.STALENESS] >= 0][S.STALENESS]
    nan = float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.Series({
            "steps": len(done), "wall_s": wall,
            "steps_per_s": len(done) / wall if wall > 0 else nan,
            "samples_per_s": float(done["samples"].sum()) / wall if wall > 0 else nan,
            "tokens_per_s": float(done["tokens"].sum()) / wall if wall > 0 else nan,
            "train_share": float(done["train_s"].sum()) / total if total > 0 else nan,
            "sync_share": float(done["sync_s"].sum()) / total if total > 0 else nan,
            "trainer_idle_ratio": float(done["wait_s"].sum()) / total if total > 0 else nan,
            "rollout_idle_ratio": float((done["rollout_idle_ratio"] * done["step_s"]).sum())
            / total if total > 0 else nan,
            "partial_ratio": float(samples[S.PARTIAL].mean()) if len(samples) else nan,
            "max_partial_span": int(done["max_partial_span"].max()) if len(done) else 0,
            "stale_samples": int((samples[S.STALENESS] > 0).sum()),
            "staleness_avg": float(known.mean()) if len(known) else nan,
            "staleness_max": int(known.max()) if len(known) else 0,
        })
