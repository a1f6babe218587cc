"""Edges of the load metrics: each SLO alone and at its limit, frames without the optional
columns, missing values given as None, failure reasons, a zero duration, exact messages."""

from __future__ import annotations

import math
import re
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rollout_kit import ConfigError
from rollout_kit.load import accepted_samples_per_s, compute_metrics, parse_goodput, time_to_batch
from rollout_kit.load._metrics import tpot_of


def _raises(message: str) -> AbstractContextManager[pytest.ExceptionInfo[ConfigError]]:
    """The whole message, not a part of it."""
    return pytest.raises(ConfigError, match="^" + re.escape(message) + "$")


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Rows of (status, ttft, e2el, output tokens); 10 prompt tokens each."""
    return pd.DataFrame(rows, columns=["status", "ttft_s", "e2el_s", "output_tokens"]).assign(
        prompt_tokens=10)


#: TTFT, TPOT, E2EL (ms) of each request:
#:   a  100  250  600     b  300   50  400     c  100  600  1300    d  50  (one token: 0)  50
_SLO_FRAME = [("accepted", 0.1, 0.6, 3), ("accepted", 0.3, 0.4, 3),
              ("rejected", 0.1, 1.3, 3), ("accepted", 0.05, 0.05, 1)]


@pytest.mark.parametrize(("spec", "good"), [
    ("tpot:250", 3),               # a (at the limit), b, d (one token: TPOT 0)
    ("tpot:249", 2),
    ("ttft:200", 3),               # b is too slow to start
    ("e2el:600", 3),               # c is too slow to end
    ("ttft:200 tpot:1000", 3),     # the TTFT SLO alone rules b out
    ("tpot:300,ttft:200", 2),      # commas too, any order: b and c out
    ("tpot:250 ttft:1000", 3),     # the TPOT SLO alone rules c out
    ("ttft:200 e2el:2000", 3),     # the TTFT SLO alone rules b out
    ("e2el:500 tpot:1000", 2),     # the E2EL SLO alone rules a and c out
    ("ttft:200 tpot:250 e2el:500", 1),
])
def test_each_slo_counts_on_its_own(spec: str, good: int) -> None:
    m = compute_metrics(_frame(_SLO_FRAME), duration_s=2.0, goodput=spec)
    assert m["request_goodput"] == good / 2


def test_a_tpot_slo_counts_a_two_token_request() -> None:
    frame = _frame([("accepted", 0.1, 1.1, 2), ("accepted", 0.1, 0.3, 2)])
    np.testing.assert_allclose(tpot_of(frame["e2el_s"], frame["ttft_s"],
                                       frame["output_tokens"]), [1.0, 0.2])
    assert compute_metrics(frame, duration_s=1.0, goodput="tpot:500")["request_goodput"] == 1.0


def test_missing_values_given_as_none_give_nan() -> None:
    out = tpot_of([1.0, None, 1.0, 1.0], [0.2, 0.2, None, 0.2], [5, 5, 5, None])  # type: ignore[arg-type]
    assert out[0] == pytest.approx(0.2) and np.isnan(out[1:]).all()


def test_a_frame_with_only_a_status() -> None:
    """No latency or token columns: counts and throughputs, NaN latencies, no tokens."""
    frame = pd.DataFrame({"status": ["accepted", "accepted", "failed"]})
    m = compute_metrics(frame, duration_s=2.0, goodput="e2el:100")
    assert m["completed"] == 2 and m["failed"] == 1 and m["unfinished"] == 0
    assert m["total_input_tokens"] == 0 and m["total_output_tokens"] == 0
    assert m["output_throughput"] == 0.0 and m["total_token_throughput"] == 0.0
    assert m["request_goodput"] == 0.0  # an unknown E2EL is not within the SLO
    assert m["failure_reasons"] == {"unknown": 1}
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert math.isnan(m[f"mean_{name}_ms"]) and math.isnan(m[f"p99_{name}_ms"])


def test_a_frame_without_a_status_is_all_accepted() -> None:
    frame = pd.DataFrame({"ttft_s": [0.1, 0.3], "e2el_s": [0.5, 0.7],
                          "output_tokens": [3, 3], "prompt_tokens": [4, 4]})
    m = compute_metrics(frame, duration_s=1.0)
    assert m["completed"] == 2 and m["failed"] == 0 and m["unfinished"] == 0
    assert m["total_output_tokens"] == 6 and m["total_input_tokens"] == 8
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_tpot_ms"] == pytest.approx(200.0)
    assert m["error_rate"] == 0.0 and m["failure_reasons"] == {}


def test_columns_of_python_objects_with_none() -> None:
    """Columns as loaded from JSON records: objects, None for what is missing."""
    frame = pd.DataFrame({
        "status": ["accepted", "accepted", "accepted"],
        "ttft_s": pd.Series([0.1, None, 0.3], dtype=object),
        "e2el_s": pd.Series([0.5, 0.6, None], dtype=object),
        "output_tokens": pd.Series([5, 5, None], dtype=object),
        "prompt_tokens": pd.Series([1, None, 2], dtype=object),
        "itl_s": [[0.1, None, 0.3], None, float("nan")],
        "send_lag_s": pd.Series([0.001, None, 0.003], dtype=object),
    })
    m = compute_metrics(frame, duration_s=1.0)
    assert m["total_output_tokens"] == 10 and m["total_input_tokens"] == 3
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_e2el_ms"] == pytest.approx(550.0)
    assert m["mean_tpot_ms"] == pytest.approx(100.0)  # only the first has both
    assert m["mean_itl_ms"] == pytest.approx(200.0)  # the missing gap left out
    assert m["max_send_lag_ms"] == pytest.approx(3.0)


def test_no_send_lag_measured_gives_nan() -> None:
    frame = _frame(_SLO_FRAME).assign(send_lag_s=math.nan)
    m = compute_metrics(frame, duration_s=1.0)
    assert math.isnan(m["max_send_lag_ms"]) and math.isnan(m["mean_send_lag_ms"])


def test_failure_reasons() -> None:
    frame = _frame([("accepted", 0.1, 0.5, 3), ("failed", None, None, 0),
                    ("failed", None, None, 0), ("failed", None, None, 0)])
    assert compute_metrics(frame, duration_s=1.0)["failure_reasons"] == {"unknown": 3}
    frame["reason"] = [None, "timeout", None, "timeout"]
    m = compute_metrics(frame, duration_s=1.0)
    assert m["failure_reasons"] == {"timeout": 2, "unknown": 1}
    assert m["error_rate"] == 3 / 4
    # a reason on a row that did not fail is no failure reason
    ok = _frame([("accepted", 0.1, 0.5, 3)]).assign(reason="fine")
    assert compute_metrics(ok, duration_s=1.0)["failure_reasons"] == {}


def test_error_rate_of_even_and_of_no_requests() -> None:
    frame = _frame([("accepted", 0.1, 0.5, 3), ("failed", None, None, 0)])
    assert compute_metrics(frame, duration_s=1.0)["error_rate"] == 0.5
    m = compute_metrics(_frame([("cancelled", None, None, 0)]), duration_s=1.0)
    assert m["unfinished"] == 1 and math.isnan(m["error_rate"])


def test_a_zero_duration_gives_nan_rates() -> None:
    m = compute_metrics(_frame(_SLO_FRAME), duration_s=0, goodput="ttft:200")
    assert m["duration"] == 0.0 and m["completed"] == 4
    for key in ("request_throughput", "request_goodput", "output_throughput",
                "total_token_throughput"):
        assert math.isnan(m[key]), key


def test_percentiles_zero_and_hundred_are_the_extremes() -> None:
    m = compute_metrics(_frame(_SLO_FRAME), duration_s=1.0, percentiles=(0, 100))
    assert m["p0_ttft_ms"] == pytest.approx(50.0) and m["p100_ttft_ms"] == pytest.approx(300.0)


def test_bad_arguments_are_named() -> None:
    frame = _frame(_SLO_FRAME)
    with _raises("percentiles must be numbers in [0, 100], got ('high',)"):
        compute_metrics(frame, duration_s=1.0, percentiles=("high",))  # type: ignore[arg-type]
    with _raises("percentiles must be in [0, 100], got (-1,)"):
        compute_metrics(frame, duration_s=1.0, percentiles=(-1,))
    for bad in (True, -1.0, "1"):
        with _raises(f"duration_s must be a number >= 0, got {bad!r}"):
            compute_metrics(frame, duration_s=bad)  # type: ignore[arg-type]
    with _raises("goodput SLO 'ttft' is not NAME:MILLISECONDS (e.g. 'ttft:200 tpot:50')"):
        parse_goodput("ttft")
    with _raises("unknown goodput SLO name 'itl'; use one of ttft, tpot, e2el (milliseconds)"):
        parse_goodput("itl:5")
    # the name is what comes before the first colon
    with _raises("goodput SLO ttft:'2:0' needs a number of milliseconds"):
        parse_goodput("ttft:2:0")
    assert parse_goodput("ttft:200,tpot:50") == {"ttft": 200.0, "tpot": 50.0}
    assert parse_goodput({"e2el": 5}) == {"e2el": 5.0}


def _rl_frame() -> pd.DataFrame:
    return pd.DataFrame({"status": ["accepted", "accepted", "rejected"],
                         "done_s": [1.0, 2.0, 0.5], "version": [0, 0, 0],
                         "done_version": [0, 2, 0]})


def test_rl_goodput_defaults_and_missing_sample_counts() -> None:
    df = _rl_frame()
    assert accepted_samples_per_s(df, duration_s=2.0) == 1.0  # one sample per task
    df["samples"] = [4, math.nan, 4]
    assert accepted_samples_per_s(df, duration_s=2.0) == 2.0  # a missing count adds nothing
    assert accepted_samples_per_s(df, duration_s=2.0, max_staleness=1) == 2.0
    assert time_to_batch(df, batch_size=2) == 2.0
    assert math.isnan(time_to_batch(df, batch_size=2, max_staleness=1))


@pytest.mark.parametrize("bad", [True, 1.5, -1])
def test_rl_goodput_bad_arguments_are_named(bad: Any) -> None:
    df = _rl_frame()
    with _raises(f"max_staleness must be an int >= 0 or None, got {bad!r}"):
        time_to_batch(df, batch_size=1, max_staleness=bad)
    with _raises(f"group_size must be an int >= 1, got {bad!r}"):
        accepted_samples_per_s(df, duration_s=1.0, group_size=bad)
    with _raises(f"batch_size must be an int >= 1, got {bad!r}"):
        time_to_batch(df, batch_size=bad)


@pytest.mark.parametrize("bad", [True, 0, -1.5, "1"])
def test_rl_goodput_needs_a_positive_duration(bad: Any) -> None:
    with _raises(f"duration_s must be a number > 0, got {bad!r}"):
        accepted_samples_per_s(_rl_frame(), duration_s=bad)


def test_a_staleness_bound_needs_the_version_columns() -> None:
    with _raises("a staleness bound needs the frame's 'version' and 'done_version' columns "
                 "(LoadRun.frame has them)"):
        time_to_batch(_rl_frame().drop(columns="done_version"), batch_size=1, max_staleness=0)
