"""Every load metric on a hand-made frame, against values worked out by hand.

The frame (seconds), duration 2 s:

    row  status     warmup  in  out  ttft   e2el   itl gaps
    A    accepted   no      10  5    0.10   0.50   0.1 x4
    B    accepted   no      20  5    0.20   1.00   0.2 x4
    C    accepted   no       5  1    0.05   0.05   -
    D    rejected   no       7  3    0.30   0.90   0.3 x2
    E    failed     no      99  50   0.001  0.002  0.001 x49   (excluded: failed)
    F    cancelled  no      99  50   0.001  0.002  0.001 x49   (excluded: unfinished)
    W    accepted   yes     99  50   9.0    9.9    5.0 x49     (excluded: warm-up)

TPOT = (e2el - ttft)/(out - 1): A 0.1, B 0.2, D 0.3 (C has one token: no TPOT).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rollout_kit import ConfigError
from rollout_kit.load import (
    accepted_samples_per_s,
    compute_metrics,
    parse_goodput,
    time_to_batch,
)
from rollout_kit.load._metrics import percentile_key, tpot_of


def _frame() -> pd.DataFrame:
    rows = [
        # status, warmup, in, out, ttft, e2el, itl, reason
        ("accepted", False, 10, 5, 0.10, 0.50, [0.1] * 4, None),
        ("accepted", False, 20, 5, 0.20, 1.00, [0.2] * 4, None),
        ("accepted", False, 5, 1, 0.05, 0.05, [], None),
        ("rejected", False, 7, 3, 0.30, 0.90, [0.3] * 2, "returned_none"),
        ("failed", False, 99, 50, 0.001, 0.002, [0.001] * 49, "connection_error"),
        ("cancelled", False, 99, 50, 0.001, 0.002, [0.001] * 49, "interrupted"),
        ("accepted", True, 99, 50, 9.0, 9.9, [5.0] * 49, None),
    ]
    df = pd.DataFrame(rows, columns=["status", "warmup", "prompt_tokens", "output_tokens",
                                     "ttft_s", "e2el_s", "itl_s", "reason"])
    df.index.name = "task_id"
    return df


def test_every_metric_matches_the_hand_computed_value() -> None:
    m = compute_metrics(_frame(), duration_s=2.0)
    assert m["completed"] == 4 and m["failed"] == 1 and m["unfinished"] == 1
    assert m["duration"] == 2.0
    assert m["total_input_tokens"] == 10 + 20 + 5 + 7
    assert m["total_output_tokens"] == 5 + 5 + 1 + 3
    assert m["request_throughput"] == pytest.approx(4 / 2)
    assert m["output_throughput"] == pytest.approx(14 / 2)
    assert m["total_token_throughput"] == pytest.approx((42 + 14) / 2)
    assert m["error_rate"] == pytest.approx(1 / 5)
    assert m["failure_reasons"] == {"connection_error": 1}
    assert math.isnan(m["request_goodput"])  # no SLOs given
    expected = {
        # TTFT ms sorted 50, 100, 200, 300
        "ttft": dict(mean=162.5, median=150.0, std=math.sqrt(36875 / 4), p50=150.0,
                     p90=270.0, p99=297.0),
        # TPOT ms 100, 200, 300 (C left out: one output token)
        "tpot": dict(mean=200.0, median=200.0, std=math.sqrt(20000 / 3), p50=200.0,
                     p90=280.0, p99=298.0),
        # ITL: every gap, pooled: 4 x 100, 4 x 200, 2 x 300
        "itl": dict(mean=180.0, median=200.0, std=math.sqrt((4 * 80**2 + 4 * 20**2
                                                              + 2 * 120**2) / 10),
                    p50=200.0, p90=300.0, p99=300.0),
        # E2EL ms sorted 50, 500, 900, 1000
        "e2el": dict(mean=612.5, median=700.0,
                     std=math.sqrt((562.5**2 + 112.5**2 + 287.5**2 + 387.5**2) / 4),
                     p50=700.0, p90=970.0, p99=997.0),
    }
    for name, stats in expected.items():
        for stat, value in stats.items():
            assert m[f"{stat}_{name}_ms"] == pytest.approx(value), f"{stat}_{name}_ms"


def test_goodput_with_two_slos() -> None:
    df = _frame()
    # ttft <= 250 and tpot <= 250: A (100, 100), B (200, 200), C (50, tpot 0 with one
    # token, as vllm) are good; D has TTFT 300
    m = compute_metrics(df, duration_s=2.0, goodput="ttft:250 tpot:250")
    assert m["request_goodput"] == pytest.approx(3 / 2)
    assert m["goodput_slos_ms"] == {"ttft": 250.0, "tpot": 250.0}
    # ttft <= 150 and e2el <= 600: A (100, 500) and C (50, 50)
    m = compute_metrics(df, duration_s=2.0, goodput={"ttft": 150, "e2el": 600})
    assert m["request_goodput"] == pytest.approx(2 / 2)
    # an SLO at exactly the value is met (<=)
    m = compute_metrics(df, duration_s=2.0, goodput="e2el:1000")
    assert m["request_goodput"] == pytest.approx(4 / 2)


def test_vllm_key_names_and_percentile_names() -> None:
    m = compute_metrics(_frame(), duration_s=2.0, percentiles=(99.9, 25))
    for key in ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput",
                "request_goodput"):
        assert key in m
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99.9", "p25"):
            assert f"{stat}_{name}_ms" in m
    assert percentile_key(99) == "p99" and percentile_key(99.9) == "p99.9"


def test_nothing_completed_gives_nan_statistics_and_counts() -> None:
    df = _frame().iloc[[4, 5]]
    m = compute_metrics(df, duration_s=1.0, goodput="ttft:1")
    assert m["completed"] == 0 and m["failed"] == 1 and m["error_rate"] == 1.0
    assert math.isnan(m["mean_ttft_ms"]) and math.isnan(m["p99_itl_ms"])
    assert m["request_goodput"] == 0.0 and m["request_throughput"] == 0.0


def test_send_lag_and_queue_wait_columns_are_summarized() -> None:
    df = _frame()
    df["send_lag_s"] = [0.001, 0.002, 0.003, 0.004, 0.005, np.nan, 1.0]
    df["queue_wait_s"] = 0.0
    m = compute_metrics(df, duration_s=2.0)
    # every measured row that was sent (failed included: lag is about the client)
    assert m["median_send_lag_ms"] == pytest.approx(3.0)
    assert m["max_send_lag_ms"] == pytest.approx(5.0)
    assert m["p99_queue_wait_ms"] == 0.0


def test_tpot_of_leaves_out_single_token_requests() -> None:
    out = tpot_of(np.array([1.0, 1.0]), np.array([0.2, 0.2]), np.array([5, 1]))
    assert out[0] == pytest.approx(0.2) and math.isnan(out[1])


def test_parse_goodput() -> None:
    assert parse_goodput("ttft:200 tpot:50 e2el:2000") == {
        "ttft": 200.0, "tpot": 50.0, "e2el": 2000.0}
    assert parse_goodput(["ttft:200", "tpot:50"]) == {"ttft": 200.0, "tpot": 50.0}
    assert parse_goodput(None) == {}
    with pytest.raises(ConfigError, match="unknown goodput SLO name 'ttfb'"):
        parse_goodput("ttfb:200")
    with pytest.raises(ConfigError, match="NAME:MILLISECONDS"):
        parse_goodput("ttft")
    with pytest.raises(ConfigError, match="number of milliseconds"):
        parse_goodput("ttft:fast")
    with pytest.raises(ConfigError, match=">= 0"):
        parse_goodput("ttft:-1")
    with pytest.raises(ConfigError, match="unknown goodput SLO name"):
        compute_metrics(_frame(), duration_s=1.0, goodput="itl:5")


def test_bad_duration_and_percentiles() -> None:
    with pytest.raises(ConfigError, match="duration_s"):
        compute_metrics(_frame(), duration_s=float("nan"))
    with pytest.raises(ConfigError, match="percentiles"):
        compute_metrics(_frame(), duration_s=1.0, percentiles=(101,))


def _rl_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "status": ["accepted", "accepted", "rejected", "accepted", "failed", "accepted",
                   "accepted"],
        "warmup": [True, False, False, False, False, False, False],
        "done_s": [0.1, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0],
        "version": [0, 0, 0, 0, 1, 1, 0],
        "done_version": [0, 0, 1, 1, 1, 1, 3],
        "samples": [4, 4, 4, 4, 4, 4, 4],
    })


def test_rl_goodput_time_to_batch() -> None:
    df = _rl_frame()
    # accepted, measured groups finish at 1.0, 2.0, 3.0, 4.0
    assert time_to_batch(df, batch_size=1) == pytest.approx(1.0)
    assert time_to_batch(df, batch_size=3) == pytest.approx(3.0)
    assert time_to_batch(df, batch_size=3, start_s=0.5) == pytest.approx(2.5)
    assert math.isnan(time_to_batch(df, batch_size=5))
    # staleness 0: the group sent at version 0 and done at 1 (2.0) and at 3 (4.0) are stale
    assert time_to_batch(df, batch_size=2, max_staleness=0) == pytest.approx(3.0)
    assert math.isnan(time_to_batch(df, batch_size=3, max_staleness=0))
    with pytest.raises(ConfigError, match="batch_size"):
        time_to_batch(df, batch_size=0)


def test_rl_goodput_accepted_samples_per_s() -> None:
    df = _rl_frame()
    assert accepted_samples_per_s(df, duration_s=2.0) == pytest.approx(4 * 4 / 2)
    assert accepted_samples_per_s(df, duration_s=2.0, max_staleness=1) == pytest.approx(
        3 * 4 / 2)
    assert accepted_samples_per_s(df.drop(columns="samples"), duration_s=1.0,
                                  group_size=2) == pytest.approx(4 * 2)
    with pytest.raises(ConfigError, match="version"):
        accepted_samples_per_s(df.drop(columns="version"), duration_s=1.0, max_staleness=0)
    with pytest.raises(ConfigError, match="duration_s"):
        accepted_samples_per_s(df, duration_s=0)
