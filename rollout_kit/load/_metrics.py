"""Load metrics with ``vllm bench serve``'s definitions and ``--save-result`` key names.

Over the *measured* rows of a run's frame (``warmup`` rows are left out):

* **completed** requests: ``status`` ``accepted`` or ``rejected`` (the request was served; a
  rejection is the workflow's verdict on the answer). **failed**: ``status == "failed"``,
  counted apart (``failed``, ``failure_reasons``, ``error_rate``) and never part of a latency
  statistic. Cancelled and unfinished rows (an interrupted run) are in neither: ``unfinished``.
* **TTFT** (``ttft_s``): send → first token. **E2EL** (``e2el_s``): send → last token.
* **TPOT** per request: ``(e2el - ttft) / (output_tokens - 1)``, only for
  ``output_tokens > 1`` (the first token is left out); for goodput a request with one output
  token has TPOT 0, as in vllm.
* **ITL**: every gap between token-carrying stream events of every completed request, pooled
  (``itl_s`` holds a list per row) — a per-gap statistic, not a per-request mean.
* throughputs divide by ``duration_s``: ``request_throughput = completed / duration``,
  ``output_throughput = output tokens / duration``, ``total_token_throughput = (input +
  output tokens) / duration``.
* **goodput** (DistServe, vllm ``--goodput``): completed requests whose every listed metric is
  at most its SLO (milliseconds), per second: ``request_goodput = good / duration``.
* mean, median, std (population, ``ddof=0``) and ``p{P}`` (linear interpolation,
  ``numpy.percentile``) of each latency, in milliseconds: ``mean_ttft_ms``,
  ``median_tpot_ms``, ``p99_itl_ms``, ``std_e2el_ms``, ….

Where vllm writes 0 for a statistic of nothing (no request completed), this module writes NaN.

RL goodput (:func:`time_to_batch`, :func:`accepted_samples_per_s`) counts what a trainer
could use: see their docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .._errors import ConfigError

#: statuses whose requests were served (their latencies count)
COMPLETED_STATUSES = ("accepted", "rejected")
#: latency metrics reported, in this order
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
#: SLO names ``--goodput`` accepts (vllm's)
SLO_NAMES = ("ttft", "tpot", "e2el")

_MS = 1000.0


def parse_goodput(spec: str | Mapping[str, float] | Iterable[str] | None) -> dict[str, float]:
    """SLOs in milliseconds from ``"ttft:200 tpot:50 e2el:2000"`` (vllm ``--goodput``).

    Also accepts a list of ``"name:ms"`` strings (argparse ``nargs='+'``), a mapping, or
    ``None`` (no SLOs: ``{}``).

    Raises:
        ConfigError: an unknown name (not ``ttft``, ``tpot``, ``e2el``), a malformed pair,
            or a value that is not a number ≥ 0.
    """
    if spec is None:
        return {}
    pairs: list[tuple[str, object]]
    if isinstance(spec, Mapping):
        pairs = [(str(k), v) for k, v in spec.items()]
    else:
        items = spec.replace(",", " ").split() if isinstance(spec, str) else list(spec)
        pairs = []
        for item in items:
            key, sep, text = str(item).partition(":")
            if not sep:
                raise ConfigError(f"goodput SLO {item!r} is not NAME:MILLISECONDS "
                                  "(e.g. 'ttft:200 tpot:50')")
            pairs.append((key.strip(), text.strip()))
    out: dict[str, float] = {}
    for name, value in pairs:
        if name not in SLO_NAMES:
            raise ConfigError(f"unknown goodput SLO name {name!r}; use one of "
                              f"{', '.join(SLO_NAMES)} (milliseconds)")
        try:
            ms = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"goodput SLO {name}:{value!r} needs a number of "
                              "milliseconds") from None
        if math.isnan(ms) or ms < 0:
            raise ConfigError(f"goodput SLO {name} must be >= 0 ms, got {value!r}")
        out[name] = ms
    return out


def percentile_key(p: float) -> str:
    """vllm's name of a percentile: ``99 -> "p99"``, ``99.9 -> "p99.9"``."""
    return f"p{int(p) if float(p).is_integer() else p}"


def tpot_of(e2el: np.ndarray, ttft: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """Per-request TPOT ``(e2el - ttft) / (output_tokens - 1)``; NaN where tokens ≤ 1."""
    e2el = np.asarray(e2el, dtype=float)
    ttft = np.asarray(ttft, dtype=float)
    n = np.asarray(output_tokens, dtype=float)
    out = np.full(e2el.shape, np.nan)
    many = n > 1
    out[many] = (e2el[many] - ttft[many]) / (n[many] - 1)
    return out


def _stats(name: str, values_s: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    v = values_s[~np.isnan(values_s)] * _MS
    if not len(v):
        out = {f"mean_{name}_ms": math.nan, f"median_{name}_ms": math.nan,
               f"std_{name}_ms": math.nan}
        out.update({f"{percentile_key(p)}_{name}_ms": math.nan for p in percentiles})
        return out
    out = {f"mean_{name}_ms": float(np.mean(v)), f"median_{name}_ms": float(np.median(v)),
           f"std_{name}_ms": float(np.std(v))}
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}_ms"] = float(np.percentile(v, p))
    return out


def _col(frame: pd.DataFrame, name: str) -> np.ndarray:
    """The column as floats, NaN where missing (and all NaN without the column)."""
    if name in frame.columns:
        return frame[name].to_numpy(dtype=float)  # NA and None become NaN
    return np.full(len(frame), math.nan)


def _measured(frame: pd.DataFrame) -> pd.DataFrame:
    if "warmup" in frame.columns:
        return frame[~frame["warmup"].astype(bool)]
    return frame


def _check_percentiles(percentiles: Sequence[float]) -> tuple[float, ...]:
    try:
        ps = tuple(float(p) for p in percentiles)
    except (TypeError, ValueError):
        raise ConfigError(f"percentiles must be numbers in [0, 100], got "
                          f"{percentiles!r}") from None
    if any(math.isnan(p) or not 0 <= p <= 100 for p in ps):
        raise ConfigError(f"percentiles must be in [0, 100], got {percentiles!r}")
    return ps


def compute_metrics(frame: pd.DataFrame, *, duration_s: float,
                    goodput: str | Mapping[str, float] | None = None,
                    percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
    """The metrics of a run's frame (see the module docstring for every definition).

    Args:
        frame: per-request rows with ``status``, ``warmup``, ``prompt_tokens``,
            ``output_tokens``, ``ttft_s``, ``e2el_s``, ``itl_s`` (a list of gaps per row);
            ``send_lag_s``, ``queue_wait_s``, ``reason`` when present.
        duration_s: the measured window, seconds (the throughputs' denominator).
        goodput: SLOs, ``"ttft:200 tpot:50"`` or ``{"ttft": 200}`` (milliseconds).
        percentiles: which ``p{P}_*_ms`` to report.

    Returns:
        ``completed, failed, unfinished, duration, total_input_tokens,
        total_output_tokens, request_throughput, request_goodput, output_throughput,
        total_token_throughput, error_rate, failure_reasons`` and
        ``{mean,median,std,p<P>}_{ttft,tpot,itl,e2el}_ms`` (and of ``send_lag`` and
        ``queue_wait`` when those columns exist).

    Raises:
        ConfigError: an unknown SLO name, bad percentiles, or a bad ``duration_s``.
    """
    slos = parse_goodput(goodput)
    ps = _check_percentiles(percentiles)
    if isinstance(duration_s, bool) or not isinstance(duration_s, int | float) or (
            math.isnan(duration_s) or duration_s < 0):
        raise ConfigError(f"duration_s must be a number >= 0, got {duration_s!r}")
    df = _measured(frame)
    status = df["status"].astype(str).to_numpy() if "status" in df.columns else \
        np.full(len(df), "accepted")
    done = np.isin(status, COMPLETED_STATUSES)
    failed = status == "failed"
    ok = df[done]
    ttft = _col(ok, "ttft_s")
    e2el = _col(ok, "e2el_s")
    out_tok = np.nan_to_num(_col(ok, "output_tokens"))  # unknown counts: 0
    in_tok = np.nan_to_num(_col(ok, "prompt_tokens"))
    tpot = tpot_of(e2el, ttft, out_tok)
    itl: list[float] = []
    if "itl_s" in ok.columns:
        for gaps in ok["itl_s"]:
            if gaps is not None and not (isinstance(gaps, float) and math.isnan(gaps)):
                itl.extend(gaps)
    completed = int(done.sum())
    n_failed = int(failed.sum())
    total_in = int(in_tok.sum())
    total_out = int(out_tok.sum())
    dur = float(duration_s)

    def per_s(x: float) -> float:
        return x / dur if dur > 0 else math.nan

    request_goodput = math.nan
    if slos:
        # a request with one output token has TPOT 0 here (vllm's goodput)
        slo_values = {"ttft": ttft, "tpot": np.where(out_tok > 1, tpot, 0.0), "e2el": e2el}
        good_mask = np.ones(completed, dtype=bool)
        for name, ms in slos.items():
            good_mask &= slo_values[name] <= ms / _MS
        request_goodput = per_s(int(good_mask.sum()))
    reasons: dict[str, int] = {}
    if "reason" in df.columns:  # none failed: no reasons
        counts = df.loc[failed, "reason"].fillna("unknown").astype(str).value_counts()
        reasons = {str(k): int(v) for k, v in counts.items()}
    elif n_failed:
        reasons = {"unknown": n_failed}
    m: dict[str, Any] = {
        "completed": completed,
        "failed": n_failed,
        "unfinished": int(len(df) - completed - n_failed),
        "duration": dur,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(completed),
        "request_goodput": request_goodput,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "error_rate": n_failed / (completed + n_failed) if completed + n_failed else math.nan,
        "failure_reasons": reasons,
    }
    if slos:
        m["goodput_slos_ms"] = dict(slos)
    series = {"ttft": ttft, "tpot": tpot, "itl": np.asarray(itl, dtype=float), "e2el": e2el}
    for name in LATENCY_METRICS:
        m.update(_stats(name, series[name], ps))
    for col, name in (("send_lag_s", "send_lag"), ("queue_wait_s", "queue_wait")):
        if col in df.columns:
            sent = _col(df, col)
            m.update(_stats(name, sent, ps))
            m[f"max_{name}_ms"] = float(np.nanmax(sent) * _MS) if np.any(
                ~np.isnan(sent)) else math.nan
    return m


# -- RL goodput -------------------------------------------------------------------------

def _within_staleness(frame: pd.DataFrame, max_staleness: int | None) -> np.ndarray:
    if max_staleness is None:
        return np.ones(len(frame), dtype=bool)
    if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) or (
            max_staleness < 0):
        raise ConfigError(f"max_staleness must be an int >= 0 or None, got {max_staleness!r}")
    if "version" not in frame.columns or "done_version" not in frame.columns:
        raise ConfigError("a staleness bound needs the frame's 'version' and 'done_version' "
                          "columns (LoadRun.frame has them)")
    lag = _col(frame, "done_version") - _col(frame, "version")
    return np.asarray(lag <= max_staleness)


def _accepted(frame: pd.DataFrame, max_staleness: int | None) -> pd.DataFrame:
    df = _measured(frame)
    ok = (df["status"].astype(str) == "accepted").to_numpy()
    out: pd.DataFrame = df[ok & _within_staleness(df, max_staleness)]
    return out


def time_to_batch(frame: pd.DataFrame, *, batch_size: int, max_staleness: int | None = None,
                  start_s: float = 0.0) -> float:
    """Seconds from ``start_s`` until ``batch_size`` accepted groups are done (RL goodput).

    A *group* is one task (one prompt with its samples, e.g. ``SingleTurnWorkflow`` with
    ``n_samples``); it counts when its ``status`` is ``accepted`` (failed, rejected,
    cancelled and warm-up rows never count) and, with ``max_staleness``, when
    ``done_version - version ≤ max_staleness`` (the weight version when it finished minus
    the version when it was sent: AReaL's off-policyness bound). The answer is the
    ``done_s`` of the ``batch_size``-th such group in completion order, minus ``start_s``:
    how long a trainer waits for its first full batch. NaN when the run never had that many.

    Raises:
        ConfigError: ``batch_size`` not an int ≥ 1, a bad ``max_staleness``, or a staleness
            bound on a frame without version columns.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
    ok = _accepted(frame, max_staleness)
    done = np.sort(_col(ok, "done_s"))
    done = done[~np.isnan(done)]
    if len(done) < batch_size:
        return math.nan
    return float(done[batch_size - 1] - start_s)


def accepted_samples_per_s(frame: pd.DataFrame, *, duration_s: float,
                           max_staleness: int | None = None, group_size: int = 1) -> float:
    """Accepted samples per second within the staleness bound (RL goodput).

    The samples of every *accepted* measured task (``status == "accepted"``; with
    ``max_staleness``, only tasks with ``done_version - version ≤ max_staleness``), divided
    by ``duration_s``. A task's samples are its ``samples`` column (the number of generate
    calls the runner saw) when present, else ``group_size``. Failed, rejected, cancelled
    and warm-up tasks add nothing: this is the rate of training data, not of requests.

    Raises:
        ConfigError: ``duration_s`` not > 0, a bad ``group_size`` or ``max_staleness``.
    """
    if isinstance(duration_s, bool) or not isinstance(duration_s, int | float) or not (
            duration_s > 0):
        raise ConfigError(f"duration_s must be a number > 0, got {duration_s!r}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"group_size must be an int >= 1, got {group_size!r}")
    ok = _accepted(frame, max_staleness)
    if "samples" in ok.columns:
        n = float(ok["samples"].sum())  # a missing count adds nothing
    else:
        n = float(len(ok) * group_size)
    return n / float(duration_s)
