"""Edges of the goodput SLOs, the replay comparison and the server-span join that the suites of
``load/``, ``otel/`` and ``replay/`` left unguarded: each test fails on one hand-made mutant
(an SLO dropped, ``<=`` made ``<``, a mean computed as a max, a continuation's queue time or
the first arrival taken from the wrong span)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from rollout_kit.load import compute_metrics
from rollout_kit.otel import join_server_spans
from rollout_kit.replay._calls import Replayed
from rollout_kit.replay._compare import compare_call


def _requests(ttft: list[float], e2el: list[float], tokens: list[int]) -> pd.DataFrame:
    n = len(ttft)
    return pd.DataFrame({"status": ["accepted"] * n, "ttft_s": ttft, "e2el_s": e2el,
                         "prompt_tokens": [8] * n, "output_tokens": tokens})


def _good(frame: pd.DataFrame, slo: str) -> float:
    return float(compute_metrics(frame, duration_s=1.0, goodput=slo)["request_goodput"])


def test_an_e2el_slo_alone_counts_only_requests_within_it() -> None:
    frame = _requests([0.01, 0.01, 0.01], [0.5, 1.5, 2.5], [4, 4, 4])
    assert _good(frame, "e2el:1000") == 1.0
    assert _good(frame, "e2el:3000") == 3.0


def test_an_slo_is_met_at_exactly_its_limit() -> None:
    frame = _requests([0.2, 0.2000001, 0.1], [1.0, 1.0, 1.0], [4, 4, 4])
    assert _good(frame, "ttft:200") == 2.0  # 200 ms on the dot is within "ttft:200"
    assert _good(frame, "e2el:1000") == 3.0


def test_the_mean_logprob_delta_is_a_mean_not_the_max() -> None:
    call: dict[str, Any] = {"output_ids": [1, 2, 3, 4], "logprobs": [-1.0, -1.0, -1.0, -1.0],
                            "seed": 7, "stop_reason": "length"}
    now = Replayed(output_ids=[1, 2, 3, 4], logprobs=[-1.0, -1.4, -1.0, -1.0], text="",
                   stop_reason="length", server="s", latency_s=0.1, ttft_s=float("nan"))
    row = compare_call(call, now, None, 0)
    assert row["logprob_max_abs_delta"] == pytest.approx(0.4)
    assert row["logprob_mean_abs_delta"] == pytest.approx(0.1)


def _span(start: float, queue: float, e2e: float, prefix: str) -> dict[str, Any]:
    return {"name": "llm_request", "kind": "SERVER", "start_wall": start,
            "end_wall": start + e2e, "service": "x", "span_id": "11" * 8,
            "trace_id": prefix + f"{3:016x}", "parent_span_id": f"{8:016x}",
            "attributes": {"gen_ai.latency.time_in_queue": queue,
                           "gen_ai.latency.time_to_first_token": 0.05,
                           "gen_ai.latency.e2e": e2e}}


def test_a_continued_session_sums_its_spans_and_starts_at_the_first() -> None:
    """A generation aborted and continued has one server span per response."""
    sessions = pd.DataFrame({"generate_s": [2.0]}, index=pd.MultiIndex.from_tuples(
        [(3, 7)], names=["task_id", "session_id"]))
    prefix = "ab" * 8
    later, first = _span(101.0, 0.3, 0.6, prefix), _span(100.2, 0.1, 0.5, prefix)
    view = join_server_spans(sessions, pd.DataFrame([later, first]), trace_prefix=prefix,
                             wall_epoch=100.0)
    row = view.sessions.loc[(3, 7)]
    assert row["server_spans"] == 2
    assert row["server_queue_s"] == pytest.approx(0.4)  # both responses' queue time
    assert row["server_e2e_s"] == pytest.approx(1.1)
    assert row["server_start_ts"] == pytest.approx(0.2)  # the first arrival, not the last
