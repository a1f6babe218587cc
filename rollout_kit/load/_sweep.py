"""Sweeps: one load run per request rate (or per concurrency cap), stopping at saturation.

Each level runs :func:`~._runner.run_load_async` with the template spec changed at one field
(``arrivals.rate`` for ``rates=``, ``max_concurrency`` for ``concurrencies=``) on the same
controller, so task ids keep counting and every level is in the same traces. Levels run in
the order given; the sweep stops after the first *saturated* level (that row is kept, with
``saturated=True`` and its ``stop_reason``). :class:`Saturation` says when a level is
saturated:

* ``min_ratio``: the server did not keep up — the completion rate
  (:meth:`LoadRun.completion_rate`: completions' pace on the offered rate's scale) or the
  achieved send rate is below ``min_ratio × offered_rate`` (only for a finite offered rate);
* ``max_error_rate``: failed / (completed + failed) above it;
* ``p99_ms``: a p99 latency above its limit, e.g. ``{"ttft": 2000, "e2el": 10000}``;
* ``min_gain`` (concurrency sweeps, or an infinite rate): the request throughput grew less
  than this fraction over the previous level's.

One row per level: ``level, offered_rate, achieved_rate, max_concurrency`` then every metric
of :meth:`LoadRun.metrics` (vllm key names; ``failure_reasons`` as a dict), ``error_rate,
saturated, stop_reason``, and ``start_ts`` / ``end_ts``: when the level began and ended on
the trace clock (the clock of the controller's traces and of its server metrics frame, so
``load_sweep_figure(..., server_metrics=ctl.server_metrics())`` draws each level's server
state).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from .._errors import ConfigError
from ._metrics import LATENCY_METRICS, parse_goodput
from ._results import LoadRun
from ._runner import run_load_async
from ._spec import LoadSpec

if TYPE_CHECKING:
    from .._config import GenerationConfig
    from .._controller import RolloutController


@dataclass(frozen=True, slots=True, kw_only=True)
class Saturation:
    """When a sweep level counts as saturated (the sweep stops after it).

    Args:
        min_ratio: saturated when the completion rate or the achieved send rate is below
            ``min_ratio × offered_rate`` (finite offered rates only).
        max_error_rate: saturated when more than this fraction of requests failed
            (``None``: never).
        p99_ms: per-metric p99 limits in ms (``ttft``, ``tpot``, ``itl``, ``e2el``).
        min_gain: saturated when the request throughput grew by less than this fraction
            over the previous level (only where the offered rate is infinite: concurrency
            sweeps); ``None``: never.

    Raises:
        ConfigError: a bad value or an unknown metric name in ``p99_ms``.
    """

    min_ratio: float = 0.95
    max_error_rate: float | None = 0.05
    p99_ms: Mapping[str, float] = field(default_factory=dict)
    min_gain: float | None = 0.05

    def __post_init__(self) -> None:
        if not isinstance(self.min_ratio, int | float) or not 0 < self.min_ratio <= 1:
            raise ConfigError(f"min_ratio must be in (0, 1], got {self.min_ratio!r}")
        if self.max_error_rate is not None and not (
                isinstance(self.max_error_rate, int | float) and 0 <= self.max_error_rate <= 1):
            raise ConfigError(f"max_error_rate must be in [0, 1] or None, got "
                              f"{self.max_error_rate!r}")
        if self.min_gain is not None and not (
                isinstance(self.min_gain, int | float) and self.min_gain >= 0):
            raise ConfigError(f"min_gain must be >= 0 or None, got {self.min_gain!r}")
        for name, ms in dict(self.p99_ms).items():
            if name not in LATENCY_METRICS:
                raise ConfigError(f"unknown p99 limit {name!r}; use one of "
                                  f"{', '.join(LATENCY_METRICS)} (milliseconds)")
            if not isinstance(ms, int | float) or math.isnan(ms) or ms <= 0:
                raise ConfigError(f"p99 limit {name} must be > 0 ms, got {ms!r}")

    def check(self, m: Mapping[str, Any], previous: Mapping[str, Any] | None) -> str | None:
        """Why the level with metrics ``m`` is saturated, or ``None``."""
        offered = float(m.get("offered_rate", math.nan))
        if math.isfinite(offered) and offered > 0:
            floor = self.min_ratio * offered
            for key in ("achieved_rate", "completion_rate"):
                got = float(m.get(key, math.nan))
                if not math.isnan(got) and got < floor:
                    return (f"{key} {got:.4g} < {self.min_ratio:g} x offered "
                            f"{offered:.4g} req/s")
            if m.get("completed", 0) == 0:
                return "no request completed"
        err = float(m.get("error_rate", math.nan))
        if self.max_error_rate is not None and not math.isnan(err) and err > self.max_error_rate:
            return f"error_rate {err:.3g} > {self.max_error_rate:g}"
        for name, limit in dict(self.p99_ms).items():
            got = float(m.get(f"p99_{name}_ms", math.nan))
            if not math.isnan(got) and got > limit:
                return f"p99_{name}_ms {got:.4g} > {limit:g}"
        if (self.min_gain is not None and previous is not None
                and not (math.isfinite(offered) and offered > 0)):
            prev = float(previous.get("request_throughput", math.nan))
            now = float(m.get("request_throughput", math.nan))
            if prev > 0 and now < prev * (1 + self.min_gain):
                return (f"request_throughput {now:.4g} grew less than {self.min_gain:.0%} over "
                        f"{prev:.4g} req/s")
        return None


def _levels(rates: Sequence[float] | None,
            concurrencies: Sequence[int] | None) -> tuple[str, list[Any]]:
    if (rates is None) == (concurrencies is None):
        raise ConfigError("a sweep takes rates= or concurrencies= (exactly one)")
    kind = "rate" if rates is not None else "max_concurrency"
    given = rates if rates is not None else concurrencies
    try:
        levels = list(given)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError(f"{kind} levels must be a sequence, got {given!r}") from None
    if not levels:
        raise ConfigError(f"a sweep needs at least one level; {kind} levels are empty")
    return kind, levels


def _spec_at(template: LoadSpec, kind: str, level: Any) -> LoadSpec:
    if kind == "rate":
        arrivals = dataclasses.replace(template.arrivals, rate=level)
        return dataclasses.replace(template, arrivals=arrivals)
    return dataclasses.replace(template, max_concurrency=level)


async def sweep_async(controller: RolloutController, requests: Sequence[Any], *,
                      rates: Sequence[float] | None = None,
                      concurrencies: Sequence[int] | None = None,
                      spec_template: LoadSpec | None = None, stop: Saturation | None = None,
                      goodput: str | Mapping[str, float] | None = None,
                      workflow: Any = None, gconfig: GenerationConfig | None = None,
                      percentiles: Sequence[float] = (50, 90, 99), progress: bool = False,
                      runs: list[LoadRun] | None = None) -> pd.DataFrame:
    """Run one load level after another until one saturates; one row per level run.

    Args:
        controller: the controller (one for all levels).
        requests: as for :func:`~._runner.run_load_async`.
        rates: request rates (req/s) to offer, in order; or
        concurrencies: ``max_concurrency`` caps, in order (the template's rate applies;
            default ``inf``: as fast as the cap lets).
        spec_template: every other setting of a level (bound, warm-up, burstiness, seed).
        stop: the saturation rule (default ``Saturation()``).
        goodput: SLOs for ``request_goodput`` (``"ttft:200 tpot:50"``).
        workflow, gconfig, progress: as for ``run_load_async``.
        percentiles: which ``p{P}_*_ms`` columns.
        runs: a list to append each level's :class:`LoadRun` to (per-request frames).

    Returns:
        The sweep frame (see the module docstring). An interrupted level is kept
        (``stop_reason="interrupted"``) and ends the sweep.

    Raises:
        ConfigError: no levels, both or neither of ``rates``/``concurrencies``, a bad level,
            an unknown SLO name.
    """
    kind, levels = _levels(rates, concurrencies)
    template = spec_template or LoadSpec()
    if not isinstance(template, LoadSpec):
        raise ConfigError(f"spec_template must be a LoadSpec, got {type(template).__name__}")
    specs = [_spec_at(template, kind, level) for level in levels]  # bad levels raise here
    slos = parse_goodput(goodput)
    rule = stop or Saturation()
    rows: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for level, spec in zip(levels, specs, strict=True):
        start_ts = _trace_now(controller)
        run = await run_load_async(controller, requests, spec, workflow=workflow,
                                   gconfig=gconfig, progress=progress)
        end_ts = _trace_now(controller)
        if runs is not None:
            runs.append(run)
        m = run.metrics(goodput=slos or None, percentiles=percentiles)
        reason = "interrupted" if run.interrupted else rule.check(m, previous)
        row: dict[str, Any] = {"level": level, "offered_rate": run.offered_rate,
                               "achieved_rate": run.achieved_rate,
                               "max_concurrency": spec.max_concurrency}
        row.update({k: v for k, v in m.items() if k not in row})
        row["saturated"] = reason is not None and not run.interrupted
        row["stop_reason"] = reason
        row["start_ts"], row["end_ts"] = start_ts, end_ts
        rows.append(row)
        if reason is not None:
            break
        previous = m
    return pd.DataFrame(rows)


def _trace_now(controller: Any) -> float:
    """Now in seconds on the controller's trace clock (that of its frames); NaN without a
    tracer."""
    tracer = getattr(controller, "tracer", None)
    epoch = getattr(tracer, "epoch_ns", None)
    return (time.perf_counter_ns() - epoch) / 1e9 if isinstance(epoch, int) else math.nan


def sweep(controller: RolloutController, requests: Sequence[Any], **kwargs: Any) -> pd.DataFrame:
    """Blocking twin of :func:`sweep_async` (same keyword arguments)."""
    return controller.binding.blocking(sweep_async(controller, requests, **kwargs), "sweep()")
