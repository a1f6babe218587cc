"""rollout_kit.analysis at the edges: every derived number a user reads, against values
computed by hand on small frames holding unfinished, cancelled and failed tasks and missing
values (which give NA, never a silent 0).

The frames are chosen so that p50, p90, p99 and max all differ: with numpy's linear
interpolation the p-th percentile of ``n`` sorted values sits at rank ``p / 100 * (n - 1)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rollout_kit import ConfigError, TraceSchemaError, analysis
from rollout_kit.tracing import Tracer
from rollout_kit.tracing import schema as S
from tests._trace_factories import hand_tasks

NAN = float("nan")


def edge_tasks() -> pd.DataFrame:
    """Six tasks (ids 100..105): two accepted, one failed, one cancelled while queued (no
    dispatch), one rejected, one still pending (no end).

    total_s 1, 2, 4, 8, 16, NA  -> mean 6.2, p50 4, p90 12.8, p99 15.68, max 16
    queue_s 0, 1, 0, NA, 2, 0   -> mean 0.6, p50 0, p90 1.6, p99 1.96, max 2
    run_s   1, 1, 4, NA, 14, NA -> mean 5, p50 2.5, p90 11, p99 13.7, max 14
    """
    return pd.DataFrame({
        S.STATUS: pd.Categorical(
            ["accepted", "accepted", "failed", "cancelled", "rejected", "pending"],
            categories=list(S.STATUSES)),
        S.SUBMIT_TS: [0.0, 0.0, 1.0, 2.0, 4.0, 5.0],
        S.DISPATCH_TS: [0.0, 1.0, 1.0, NAN, 6.0, 5.0],
        S.START_TS: [0.0, 1.0, 1.0, NAN, 6.0, 5.0],
        S.END_TS: [1.0, 2.0, 5.0, 10.0, 20.0, NAN],
        S.QUEUE_S: [0.0, 1.0, 0.0, NAN, 2.0, 0.0],
        S.RUN_S: [1.0, 1.0, 4.0, NAN, 14.0, NAN],
        S.TOTAL_S: [1.0, 2.0, 4.0, 8.0, 16.0, NAN],
        S.COMPLETION_TOKENS: pd.array([10, 20, None, None, 30, None], dtype="Int64"),
        S.PROMPT_TOKENS: pd.array([1, 1, 1, None, 1, None], dtype="Int64"),
        "generate_s": [0.5, 1.0, 3.0, 0.0, 10.0, 0.0],
        "toolcall_s": [0.0] * 6,  # registered, never used
    }, index=pd.Index([100, 101, 102, 103, 104, 105], name=S.TASK_ID))


def edge_sessions() -> pd.DataFrame:
    """Sessions on servers a (5), b (1) and an unknown one (NA); a cancelled session is
    not a failed one."""
    return pd.DataFrame({
        S.SERVER: pd.array(["a", "a", "a", "a", "a", "b", None], dtype="string"),
        S.TOTAL_S: [1.0, 2.0, 4.0, 8.0, 16.0, 3.0, 0.5],
        S.STATUS: pd.Categorical(["accepted", "failed", "cancelled", "accepted", "accepted",
                                  "failed", "accepted"], categories=list(S.STATUSES)),
        S.TTFT_S: [0.1, 0.2, NAN, 0.4, 0.8, NAN, 0.05],
        S.PROMPT_TOKENS: pd.array([1, 1, 1, 1, 1, None, 1], dtype="Int64"),
        S.COMPLETION_TOKENS: pd.array([10, None, None, 20, 30, None, 5], dtype="Int64"),
        S.RETRIES: pd.array([0, 2, 0, 1, 0, 3, None], dtype="Int64"),
    }, index=pd.MultiIndex.from_tuples([(0, i) for i in range(7)],
                                       names=[S.TASK_ID, S.SESSION_ID]))


def row(table: pd.DataFrame, key: str) -> list[float]:
    return [float(x) for x in table.loc[key, list(analysis.LATENCY_STATS)]]


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y) for x, y in zip(a, b))


# -- summary -------------------------------------------------------------------------------


def test_summary_latency_rows_by_hand() -> None:
    lat = analysis.summary(edge_tasks()).latency
    assert list(lat.index) == [S.QUEUE_S, "generate_s", S.RUN_S, S.TOTAL_S]  # toolcall: unused
    assert same(row(lat, S.TOTAL_S), [5, 6.2, 4.0, 12.8, 15.68, 16.0])  # pending: left out
    assert same(row(lat, S.QUEUE_S), [5, 0.6, 0.0, 1.6, 1.96, 2.0])  # never dispatched: out
    assert same(row(lat, S.RUN_S), [4, 5.0, 2.5, 11.0, 13.7, 14.0])
    # a phase column holds 0 for tasks that never ran it: 0, 0, .5, 1, 3, 10
    assert same(row(lat, "generate_s"), [6, 14.5 / 6, 0.75, 6.5, 9.65, 10.0])
    assert lat["count"].dtype == np.int64


def test_summary_derives_queue_and_total_when_their_columns_are_absent() -> None:
    derived = analysis.summary(edge_tasks().drop(columns=[S.QUEUE_S, S.TOTAL_S, S.RUN_S]))
    lat = derived.latency
    assert S.RUN_S not in lat.index  # run_s only from its own column
    assert same(row(lat, S.TOTAL_S), [5, 6.2, 4.0, 12.8, 15.68, 16.0])  # end - submit
    assert same(row(lat, S.QUEUE_S), [5, 0.6, 0.0, 1.6, 1.96, 2.0])  # dispatch - submit
    no_dispatch = analysis.summary(edge_tasks().drop(columns=[S.QUEUE_S, S.DISPATCH_TS]))
    assert S.QUEUE_S not in no_dispatch.latency.index


def test_summary_throughput_and_status_by_hand() -> None:
    s = analysis.summary(edge_tasks())
    thr = s.throughput
    assert thr["duration_s"] == 20.0  # last end 20 - first submit 0; the pending one has none
    assert thr["tasks_per_s"] == pytest.approx(5 / 20)  # finished tasks, any status
    assert thr["accepted_per_s"] == pytest.approx(2 / 20)
    assert thr["completion_tokens_per_s"] == pytest.approx(60 / 20)  # NA counts skipped
    assert thr["prompt_tokens_per_s"] == pytest.approx(4 / 20)
    assert s.status.to_dict() == {"pending": 1, "accepted": 2, "rejected": 1, "failed": 1,
                                  "cancelled": 1}
    assert s.status.index.name == S.STATUS and s.status.dtype == np.int64


def test_summary_accepted_rate_counts_only_finished_accepted_tasks() -> None:
    t = edge_tasks()
    t.loc[105, S.STATUS] = "accepted"  # an accepted row without an end (an imported trace)
    assert analysis.summary(t).throughput["accepted_per_s"] == pytest.approx(2 / 20)


def test_summary_missing_token_counts_are_na_not_zero() -> None:
    t = edge_tasks()
    t[S.COMPLETION_TOKENS] = pd.array([None] * 6, dtype="Int64")  # no task reported tokens
    thr = analysis.summary(t.drop(columns=[S.PROMPT_TOKENS])).throughput
    assert np.isnan(thr["completion_tokens_per_s"])
    assert np.isnan(thr["prompt_tokens_per_s"])  # no column at all
    assert thr["tasks_per_s"] == pytest.approx(0.25)


def test_summary_with_nothing_finished_has_no_rates() -> None:
    t = edge_tasks().loc[[105]]  # one pending task
    s = analysis.summary(t)
    assert s.throughput["duration_s"] == 0.0
    for k in ("tasks_per_s", "accepted_per_s", "completion_tokens_per_s", "prompt_tokens_per_s"):
        assert np.isnan(s.throughput[k]), k
    lat = s.latency
    assert lat.loc[S.TOTAL_S, "count"] == 0
    assert all(np.isnan(lat.loc[S.TOTAL_S, c]) for c in ("mean", "p50", "p90", "p99", "max"))
    assert s.status["pending"] == 1 and s.status.sum() == 1


def test_summary_ttft_per_session_skips_sessions_without_one() -> None:
    s = analysis.summary(edge_tasks(), sessions=edge_sessions())
    # ttft 0.1, 0.2, 0.4, 0.8, 0.05 (two NA): sorted .05 .1 .2 .4 .8
    assert same(row(s.latency, S.TTFT_S), [5, 0.31, 0.2, 0.64, 0.784, 0.8])
    assert list(s.latency.index)[:2] == [S.QUEUE_S, S.TTFT_S]
    on_tasks = edge_tasks().assign(**{S.TTFT_S: [0.5, NAN, 1.5, NAN, NAN, NAN]})
    s2 = analysis.summary(on_tasks)  # no sessions frame: the tasks' own column
    assert same(row(s2.latency, S.TTFT_S), [2, 1.0, 1.0, 1.4, 1.49, 1.5])
    # a sessions frame without ttft_s falls back to the tasks' column
    s3 = analysis.summary(on_tasks, sessions=edge_sessions().drop(columns=[S.TTFT_S]))
    assert s3.latency.loc[S.TTFT_S, "count"] == 2


def test_summary_series_and_markdown_carry_the_hand_values() -> None:
    s = analysis.summary(edge_tasks())
    flat = s.as_series()
    assert flat["total_s p90"] == pytest.approx(12.8)
    assert flat["total_s p99"] == pytest.approx(15.68)
    assert flat["queue_s max"] == 2.0
    assert "total_s count" not in flat.index and "total_s mean" not in flat.index
    assert flat["status cancelled"] == 1.0 and flat["tasks_per_s"] == pytest.approx(0.25)
    assert list(flat.index[:4]) == ["queue_s p50", "queue_s p90", "queue_s p99", "queue_s max"]
    md = s.to_markdown()
    assert "| total_s | 5 | 6.2 | 4 | 12.8 | 15.68 | 16 |" in md
    assert "| metric | count | mean | p50 | p90 | p99 | max |" in md
    assert "| cancelled | 1 |" in md and "| duration_s | 20 |" in md
    assert md.endswith("\n") and md.count("### ") == 3
    empty = analysis.summary(edge_tasks().loc[[105]]).to_markdown()
    assert "| total_s | 0 | nan | nan | nan | nan | nan |" in empty
    html = s._repr_html_()
    assert "<h4>Throughput</h4>" in html and "<h4>Status</h4>" in html and "12.8" in html


# -- compare -------------------------------------------------------------------------------


def test_compare_by_hand_with_sessions_for_one_run() -> None:
    t = analysis.compare({"edge": edge_tasks(), "hand": hand_tasks()},
                         sessions={"edge": edge_sessions()})
    assert list(t.columns) == ["edge", "hand"] and t.index.name == "metric"
    assert t.loc["total_s p90", "edge"] == pytest.approx(12.8)
    assert t.loc["total_s p50", "hand"] == pytest.approx(1.5)
    assert t.loc["ttft_s p50", "edge"] == pytest.approx(0.2)
    assert np.isnan(t.loc["ttft_s p50", "hand"])  # no sessions for that run
    assert np.isnan(t.loc["run_s p50", "hand"])  # hand_tasks has no run_s column
    assert t.loc["status pending", "edge"] == 1 and t.loc["status pending", "hand"] == 0
    assert t.loc["accepted_per_s", "edge"] == pytest.approx(0.1)
    assert t.loc["accepted_per_s", "hand"] == pytest.approx(0.5)
    assert list(t.index[:8]) == ["queue_s p50", "queue_s p90", "queue_s p99", "queue_s max",
                                 "ttft_s p50", "ttft_s p90", "ttft_s p99", "ttft_s max"]
    # a metric only the second run has is appended after the first run's metrics
    flipped = analysis.compare({"hand": hand_tasks(), "edge": edge_tasks()})
    first = list(analysis.summary(hand_tasks()).as_series().index)
    assert list(flipped.index[:len(first)]) == first
    assert "run_s p50" in flipped.index[len(first):]


# -- throughput ----------------------------------------------------------------------------


def test_throughput_windows_by_hand() -> None:
    thr = analysis.throughput(edge_tasks(), window=5.0)
    # ends 1, 2 | 5 | 10 | - | 20 (the pending task has none)
    assert list(thr.index) == [0.0, 5.0, 10.0, 15.0, 20.0] and thr.index.name == "time"
    assert thr["tasks"].tolist() == [2, 1, 1, 0, 1]
    assert thr["accepted"].tolist() == [2, 0, 0, 0, 0]
    assert thr["tasks_per_s"].tolist() == pytest.approx([0.4, 0.2, 0.2, 0.0, 0.2])
    tok = thr["completion_tokens_per_s"].tolist()
    # 30 tokens in the first window; the failed and the cancelled task reported none (NA,
    # not 0); nothing finished in the fourth (a true 0)
    assert tok[0] == pytest.approx(6.0) and tok[3] == 0.0 and tok[4] == pytest.approx(6.0)
    assert np.isnan(tok[1]) and np.isnan(tok[2])
    assert thr["tasks"].dtype == np.int64 and thr["accepted"].dtype == np.int64


def test_throughput_origin_and_window_edges() -> None:
    t = edge_tasks()
    late = analysis.throughput(t, window=5.0, t0=3.0)  # ends before t0 land in negative bins
    assert list(late.index) == [-5.0, 0.0, 5.0, 10.0, 15.0]
    assert late["tasks"].tolist() == [2, 1, 1, 0, 1]
    exact = analysis.throughput(t.loc[[100, 101]], window=1.0)  # ends 1 and 2: bin starts
    assert list(exact.index) == [0.0, 1.0, 2.0] and exact["tasks"].tolist() == [0, 1, 1]
    no_tokens = analysis.throughput(t.drop(columns=[S.COMPLETION_TOKENS]), window=5.0)
    assert no_tokens["completion_tokens_per_s"].isna().all()
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="window"):
            analysis.throughput(t, window=bad)
    pending = analysis.throughput(t.loc[[105]])
    assert pending.empty and list(pending.columns) == ["tasks", "accepted", "tasks_per_s",
                                                       "completion_tokens_per_s"]
    assert pending.index.name == "time"


# -- concurrency ---------------------------------------------------------------------------


def test_concurrency_running_by_hand() -> None:
    c = analysis.concurrency(edge_tasks())
    # [0,1] [1,2] [1,5] [6,20] and the pending [5, open -> 20]; never dispatched: none
    assert c["time"].tolist() == [0.0, 1.0, 2.0, 5.0, 6.0, 20.0]
    assert c["in_flight"].tolist() == [1, 2, 1, 1, 2, 0]
    shifted = analysis.concurrency(edge_tasks(), t0=-1.0)
    assert shifted["time"].tolist() == [1.0, 2.0, 3.0, 6.0, 7.0, 21.0]


def test_concurrency_running_falls_back_to_dispatch() -> None:
    t = edge_tasks()
    t[S.START_TS] = [NAN, 1.0, 1.0, NAN, NAN, NAN]  # start marks lost: dispatch stands in
    c = analysis.concurrency(t)
    assert c["in_flight"].tolist() == [1, 2, 1, 1, 2, 0]
    c2 = analysis.concurrency(t.drop(columns=[S.START_TS]))
    assert c2["in_flight"].tolist() == [1, 2, 1, 1, 2, 0]


def test_concurrency_queued_ends_at_the_end_of_a_task_never_dispatched() -> None:
    q = analysis.concurrency(edge_tasks(), kind="queued")
    # submit -> dispatch: [0,0] [0,1] [1,1] [4,6] [5,5]; the cancelled task left the queue
    # when it ended (10), it is not queued until the last time seen
    assert q["time"].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 10.0]
    assert q["in_flight"].tolist() == [1, 0, 1, 2, 2, 1, 0]
    still = edge_tasks()
    still.loc[103, S.END_TS] = NAN  # still queued: open until the last submit/dispatch (6)
    still.loc[103, S.STATUS] = "pending"
    q2 = analysis.concurrency(still, kind="queued")
    assert q2["time"].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0]
    assert q2["in_flight"].tolist() == [1, 0, 1, 2, 2, 0]


def test_concurrency_total_by_hand_and_bad_kind() -> None:
    tot = analysis.concurrency(edge_tasks(), kind="total")
    # submit -> end: [0,1] [0,2] [1,5] [2,10] [4,20] [5, open -> 20]
    assert tot["time"].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 10.0, 20.0]
    assert tot["in_flight"].tolist() == [2, 2, 2, 3, 3, 2, 0]
    with pytest.raises(ConfigError, match="kind"):
        analysis.concurrency(edge_tasks(), kind="runing")
    with pytest.raises(TraceSchemaError, match="phase"):
        analysis.concurrency(edge_tasks(), phase="generate")  # a tasks frame has no phase


def test_concurrency_of_spans_with_an_origin_and_no_rows() -> None:
    spans = pd.DataFrame({S.PHASE: ["generate", "generate", "reward"],
                          S.START: [2.0, 3.0, 2.5], S.END: [4.0, NAN, 3.0]})
    c = analysis.concurrency(spans)  # origin: the first span start
    assert c["time"].tolist() == [0.0, 0.5, 1.0, 2.0]
    assert c["in_flight"].tolist() == [1, 2, 2, 0]
    g = analysis.concurrency(spans, phase="generate", t0=0.0)
    assert g["time"].tolist() == [2.0, 3.0, 4.0] and g["in_flight"].tolist() == [1, 2, 0]
    none = analysis.concurrency(spans.iloc[:0])
    assert none.empty and none["in_flight"].dtype == np.int64


# -- by_server / by_phase ------------------------------------------------------------------


def test_by_server_tail_percentiles_and_totals_by_hand() -> None:
    t = analysis.by_server(edge_sessions())
    assert list(t.index) == ["?", "a", "b"] and t.index.name == S.SERVER
    assert list(t.columns) == ["sessions", "failed", "mean", "p50", "p90", "p99", "max",
                               "ttft_p50", S.PROMPT_TOKENS, S.COMPLETION_TOKENS,
                               "completion_tokens_per_s", S.RETRIES]
    a = t.loc["a"]
    assert a["sessions"] == 5 and a["failed"] == 1  # the cancelled session is not failed
    assert [a[c] for c in ("mean", "p50", "p90", "p99", "max")] == pytest.approx(
        [6.2, 4.0, 12.8, 15.68, 16.0])
    assert a["ttft_p50"] == pytest.approx(0.3)  # .1 .2 .4 .8: the NA one left out
    assert a[S.PROMPT_TOKENS] == 5 and a[S.COMPLETION_TOKENS] == 60
    assert a["completion_tokens_per_s"] == pytest.approx(60 / 31)
    assert a[S.RETRIES] == 3
    b = t.loc["b"]
    assert b["sessions"] == 1 and b["failed"] == 1 and b["p99"] == 3.0
    assert np.isnan(b["ttft_p50"])
    # b reported no token counts: NA, not 0 tokens and 0 tokens/s
    assert np.isnan(b[S.PROMPT_TOKENS]) and np.isnan(b[S.COMPLETION_TOKENS])
    assert np.isnan(b["completion_tokens_per_s"])
    unknown = t.loc["?"]
    assert unknown["sessions"] == 1 and unknown["failed"] == 0
    assert unknown["completion_tokens_per_s"] == pytest.approx(10.0)
    assert np.isnan(unknown[S.RETRIES])  # not recorded: NA


def test_by_server_without_optional_columns_and_from_an_index_level() -> None:
    plain = edge_sessions()[[S.SERVER, S.TOTAL_S]]
    t = analysis.by_server(plain)
    assert "failed" not in t.columns and "ttft_p50" not in t.columns
    assert t[S.COMPLETION_TOKENS].isna().all() and t[S.RETRIES].isna().all()
    assert t.loc["a", "p90"] == pytest.approx(12.8)
    zero = edge_sessions().assign(**{S.TOTAL_S: 0.0})
    assert analysis.by_server(zero)["completion_tokens_per_s"].isna().all()  # no busy time
    indexed = edge_sessions().set_index(S.SERVER, append=True)
    assert analysis.by_server(indexed).loc["a", "p99"] == pytest.approx(15.68)


def test_by_phase_tail_percentiles_totals_and_shares_by_hand() -> None:
    spans = pd.DataFrame({
        S.PHASE: ["generate"] * 5 + ["reward", "reward", "zz_custom", "toolcall"],
        S.START: [0.0] * 9,
        S.END: [1.0, 2.0, 4.0, 8.0, 16.0, 0.5, NAN, 2.0, NAN],  # two spans still open
    })
    t = analysis.by_phase(spans)
    assert list(t.index) == ["generate", "reward", "toolcall", "zz_custom"]
    assert list(t.columns) == ["count", "mean", "p50", "p90", "p99", "max", "total_s", "share"]
    g = t.loc["generate"]
    assert [g[c] for c in ("count", "mean", "p50", "p90", "p99", "max", "total_s")] == \
        pytest.approx([5, 6.2, 4.0, 12.8, 15.68, 16.0, 31.0])
    assert g["share"] == pytest.approx(31 / 33.5)
    assert t.loc["reward", "count"] == 1 and t.loc["reward", "total_s"] == 0.5
    assert t.loc["reward", "share"] == pytest.approx(0.5 / 33.5)
    # only an open span: no duration known -> NA, not 0 s and a share of 0
    assert t.loc["toolcall", "count"] == 0
    assert np.isnan(t.loc["toolcall", "total_s"]) and np.isnan(t.loc["toolcall", "share"])
    assert t["share"].sum() == pytest.approx(1.0)
    with_duration = analysis.by_phase(spans.assign(**{S.DURATION: spans[S.END] - spans[S.START],
                                                      S.END: 99.0}))
    assert with_duration.loc["generate", "p99"] == pytest.approx(15.68)  # duration column wins


def test_by_phase_all_zero_durations_have_no_share() -> None:
    spans = pd.DataFrame({S.PHASE: ["generate", "reward"], S.DURATION: [0.0, 0.0]})
    t = analysis.by_phase(spans)
    assert t["total_s"].tolist() == [0.0, 0.0] and t["share"].isna().all()
    assert analysis.by_phase(spans.iloc[:0]).empty


# -- slowest -------------------------------------------------------------------------------


def test_slowest_by_hand_keeps_task_ids_and_puts_unfinished_last() -> None:
    t = edge_tasks()
    assert list(analysis.slowest(t, 3).index) == [104, 103, 102]
    assert list(analysis.slowest(t, 5).index) == [104, 103, 102, 101, 100]
    assert list(analysis.slowest(t, 10).index) == [104, 103, 102, 101, 100, 105]  # NA last
    assert analysis.slowest(t, 0).empty
    # ties keep frame order: queue_s 2 | 1 | 0, 0, 0
    assert list(analysis.slowest(t, 3, by=S.QUEUE_S).index) == [104, 101, 100]
    top = analysis.slowest(t, 2, columns=[S.STATUS, S.TOTAL_S])
    assert list(top.columns) == [S.STATUS, S.TOTAL_S] and top[S.TOTAL_S].tolist() == [16, 8]
    assert list(top[S.STATUS]) == ["rejected", "cancelled"]
    with pytest.raises(ConfigError, match="-1"):
        analysis.slowest(t, -1)
    with pytest.raises(TraceSchemaError, match="nope"):
        analysis.slowest(t, 2, columns=["nope"])


# -- helpers -------------------------------------------------------------------------------


def test_phase_names_and_required_columns() -> None:
    tasks = edge_tasks().assign(zz_s=1.0, aa_s=1.0, generate_session_s=2.0)
    assert analysis.phase_names(tasks) == ["generate", "toolcall", "aa", "zz"]
    spans = pd.DataFrame({S.PHASE: ["zz", "reward", None, "aa", "reward"]})
    assert analysis.phase_names(spans) == ["reward", "aa", "zz"]
    assert analysis.is_spans(spans) and not analysis.is_spans(tasks)
    with pytest.raises(TraceSchemaError, match=r"\['end_ts', 'nope'\]"):
        analysis.require_columns(tasks.drop(columns=[S.END_TS]), [S.END_TS, S.STATUS, "nope"],
                                 "tasks")
    with pytest.raises(TraceSchemaError, match="tasks: expected a pandas DataFrame, got dict"):
        analysis.require_columns({}, [S.END_TS], "tasks")
    out = analysis.require_columns(edge_sessions(), [S.TASK_ID, S.SERVER], "sessions")
    assert S.TASK_ID in out.columns and S.SESSION_ID not in out.columns  # only what is asked
    assert analysis.require_columns(tasks, [S.END_TS], "tasks") is tasks


def test_on_real_frames_a_task_cancelled_in_the_queue() -> None:
    """The same numbers through the tracer: a task cancelled before dispatch has an end
    and no dispatch; it is finished for throughput and ends its queue time then."""
    tr = Tracer()
    base = 10**12
    sec = 10**9
    tr.epoch_ns = base
    tr.register_task(0)
    tr.mark(0, "submit", base)
    tr.mark(0, "dispatch", base + 1 * sec)
    tr.mark(0, "start", base + 1 * sec)
    tr.mark(0, "end", base + 3 * sec)
    tr.finalize(0, "accepted")
    tr.register_task(1)
    tr.mark(1, "submit", base)
    tr.mark(1, "end", base + 2 * sec)
    tr.finalize(1, "cancelled", reason="cancelled")
    f = tr.frames()
    assert np.isnan(f.tasks.loc[1, S.DISPATCH_TS]) and f.tasks.loc[1, S.END_TS] == 2.0
    q = analysis.concurrency(f.tasks, kind="queued")
    assert q["time"].tolist() == [0.0, 1.0, 2.0] and q["in_flight"].tolist() == [2, 1, 0]
    s = analysis.summary(f.tasks)
    assert s.status["cancelled"] == 1 and s.throughput["tasks_per_s"] == pytest.approx(2 / 3)
    assert s.latency.loc[S.QUEUE_S, "count"] == 1  # the cancelled one has no queue time
    assert np.isnan(s.throughput["completion_tokens_per_s"])  # no session: no tokens known


# -- exact output formats, dtypes and messages -----------------------------------------------


def test_markdown_is_exact() -> None:
    t = pd.DataFrame({S.STATUS: pd.Categorical(["accepted", "failed"],
                                               categories=list(S.STATUSES)),
                      S.SUBMIT_TS: [0.0, 0.0], S.END_TS: [2.0, 4.0]})
    md = analysis.summary(t).to_markdown()
    assert md == (
        "### Latency (seconds)\n\n"
        "| metric | count | mean | p50 | p90 | p99 | max |\n"
        "|---|---|---|---|---|---|---|\n"
        "| total_s | 2 | 3 | 3 | 3.8 | 3.98 | 4 |\n\n"
        "### Throughput\n\n"
        "|  | value |\n"
        "|---|---|\n"
        "| duration_s | 4 |\n| tasks_per_s | 0.5 |\n| accepted_per_s | 0.25 |\n"
        "| completion_tokens_per_s | nan |\n| prompt_tokens_per_s | nan |\n\n"
        "### Status\n\n"
        "| status | tasks |\n"
        "|---|---|\n"
        "| pending | 0 |\n| accepted | 1 |\n| rejected | 0 |\n| failed | 1 |\n"
        "| cancelled | 0 |\n")


def test_html_is_exact() -> None:
    t = edge_tasks()
    t[S.COMPLETION_TOKENS] = pd.array([1, None, None, None, None, None], dtype="Int64")
    s = analysis.summary(t)  # 1 token in 20 s: 0.05, and 1.234e-05 below, exponent form
    s.throughput["prompt_tokens_per_s"] = 1.234e-05
    fmt = "{:.4g}".format
    assert s._repr_html_() == (
        "<h4>Latency (s)</h4>" + s.latency.to_html(float_format=fmt)
        + "<h4>Throughput</h4>" + s.throughput.to_frame("value").to_html(float_format=fmt)
        + "<h4>Status</h4>" + s.status.to_frame("tasks").to_html(float_format=fmt))
    assert "1.234e-05" in s._repr_html_() and "<th>value</th>" in s._repr_html_()
    assert "<th>tasks</th>" in s._repr_html_()


def test_status_counts_of_a_plain_string_column_keep_every_status() -> None:
    t = edge_tasks()
    t[S.STATUS] = pd.array(["accepted", "accepted", "failed", "failed", "failed", None],
                           dtype="string")
    s = analysis.summary(t)
    assert list(s.status.index) == list(S.STATUSES)  # schema order, not by count
    assert s.status.tolist() == [0, 2, 0, 3, 0] and s.status.dtype == np.int64
    assert s.throughput["accepted_per_s"] == pytest.approx(2 / 20)
    t.loc[104, S.STATUS] = None  # a finished task whose status is NA: not accepted
    assert analysis.summary(t).throughput["accepted_per_s"] == pytest.approx(2 / 20)
    assert analysis.throughput(t, window=20.0)["accepted"].tolist() == [2, 0]
    cat = analysis.summary(edge_tasks()).status
    assert list(cat.index) == list(S.STATUSES)  # accepted (2) would come first by count


def test_times_off_zero_and_columns_that_win_over_marks() -> None:
    t = edge_tasks()
    for c in (S.SUBMIT_TS, S.DISPATCH_TS, S.START_TS, S.END_TS):
        t[c] = t[c] + 100.0  # a trace whose clock does not start at 0
    s = analysis.summary(t)
    assert s.throughput["duration_s"] == 20.0 and s.throughput["tasks_per_s"] == 0.25
    c = analysis.concurrency(t)
    assert c["time"].tolist() == [0.0, 1.0, 2.0, 5.0, 6.0, 20.0]
    given = edge_tasks().assign(**{S.TOTAL_S: [9.0, 9.0, 9.0, 9.0, 9.0, NAN]})
    assert analysis.summary(given).latency.loc[S.TOTAL_S, "p50"] == 9.0  # the column wins
    short = edge_tasks().loc[[100]].assign(**{S.END_TS: 0.5})
    thr = analysis.summary(short).throughput  # a run shorter than a second still has rates
    assert thr["duration_s"] == 0.5 and thr["tasks_per_s"] == pytest.approx(2.0)


def test_running_starts_at_start_and_origins_without_submits() -> None:
    t = edge_tasks()
    t[S.START_TS] = [0.5, 1.0, 1.0, NAN, 6.0, 5.0]  # task 100 waited in the worker
    c = analysis.concurrency(t)
    assert c["time"].tolist() == [0.5, 1.0, 2.0, 5.0, 6.0, 20.0]
    no_submit = t.assign(**{S.SUBMIT_TS: NAN})
    c0 = analysis.concurrency(no_submit)  # no submit at all: times are as given
    assert c0["time"].tolist() == [0.5, 1.0, 2.0, 5.0, 6.0, 20.0]
    plain = t[[S.STATUS, S.SUBMIT_TS, S.END_TS]]  # no dispatch or start columns
    q = analysis.concurrency(plain, kind="queued")  # then queued until it ended
    assert q["time"].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 10.0, 20.0]
    assert q["in_flight"].tolist() == [2, 2, 2, 3, 3, 2, 0]
    assert analysis.concurrency(plain).empty  # never started: nothing ran


def test_output_dtypes() -> None:
    c = analysis.concurrency(edge_tasks())
    assert c["in_flight"].dtype == np.int64 and c["time"].dtype == np.float64
    empty = analysis.concurrency(edge_tasks().iloc[:0])
    assert empty["time"].dtype == np.float64 and empty["in_flight"].dtype == np.int64
    thr = analysis.throughput(edge_tasks(), window=2)  # an int window: float times still
    assert thr.index.dtype == np.float64 and thr["tasks_per_s"].dtype == np.float64
    none = analysis.throughput(edge_tasks().drop(columns=[S.COMPLETION_TOKENS]))
    assert none["completion_tokens_per_s"].dtype == np.float64
    nothing = analysis.throughput(edge_tasks().loc[[105]])
    assert nothing.index.dtype == np.float64
    assert all(nothing[c].dtype == np.float64 for c in nothing.columns)
    srv = analysis.by_server(edge_sessions())
    assert srv["sessions"].dtype == np.int64 and srv["failed"].dtype == np.int64
    plain = analysis.by_server(edge_sessions()[[S.SERVER, S.TOTAL_S]])
    assert plain[S.COMPLETION_TOKENS].dtype == np.float64
    assert plain[S.RETRIES].dtype == np.float64
    assert analysis.by_phase(pd.DataFrame({S.PHASE: ["generate"], S.DURATION: [1.0]}))[
        "count"].dtype == np.int64


def test_throughput_default_window_and_partly_known_tokens() -> None:
    t = edge_tasks()
    t[S.COMPLETION_TOKENS] = pd.array([10, None, None, None, 30, None], dtype="Int64")
    thr = analysis.throughput(t)  # one-second windows by default
    assert list(thr.index) == [float(i) for i in range(21)]
    assert thr["completion_tokens_per_s"].iloc[1] == 10.0  # ends at 1: task 100 only
    five = analysis.throughput(t, window=5.0)
    assert five["completion_tokens_per_s"].iloc[0] == pytest.approx(2.0)  # 10 known, 1 NA


def test_by_phase_order_na_phase_and_a_small_total() -> None:
    spans = pd.DataFrame({S.PHASE: pd.array(["aaa", "generate", None], dtype="string"),
                          S.DURATION: [0.25, 0.125, 0.125]})
    t = analysis.by_phase(spans)
    assert list(t.index) == ["generate", "aaa", "?"]  # registered first, then the others
    assert t.loc["?", "total_s"] == 0.125 and t.loc["?", "count"] == 1
    assert t["share"].tolist() == pytest.approx([0.25, 0.5, 0.25])  # a total below 1 s


def test_phase_names_session_companions() -> None:
    only = pd.DataFrame({"generate_session_s": [1.0], S.TOTAL_S: [1.0]})
    assert analysis.phase_names(only) == []  # a registered phase's companion, alone
    both = pd.DataFrame({"warm_s": [1.0], "warm_session_s": [2.0]})
    assert analysis.phase_names(both) == ["warm"]  # an unregistered phase and its sum


def test_summary_coerces_text_values_to_na() -> None:
    sess = edge_sessions().assign(**{S.TTFT_S: ["0.5", "n/a", None, "1.5", "x", "y", "z"]})
    lat = analysis.summary(edge_tasks(), sessions=sess).latency
    assert lat.loc[S.TTFT_S, "count"] == 2 and lat.loc[S.TTFT_S, "p50"] == 1.0


def test_slowest_default_n() -> None:
    many = pd.DataFrame({S.TOTAL_S: np.arange(15, dtype=float)})
    top = analysis.slowest(many)
    assert len(top) == 10 and list(top.index) == list(range(14, 4, -1))


@pytest.mark.parametrize("call,what", [
    (lambda: analysis.summary(pd.DataFrame({S.STATUS: []})), "tasks"),
    (lambda: analysis.throughput(pd.DataFrame({S.STATUS: []})), "tasks"),
    (lambda: analysis.concurrency(pd.DataFrame({S.SUBMIT_TS: [0.0]})), "tasks"),
    (lambda: analysis.concurrency(pd.DataFrame({S.PHASE: ["g"], S.START: [0.0]})), "spans"),
    (lambda: analysis.concurrency(pd.DataFrame({S.SUBMIT_TS: [0.0]}), phase="g"), "spans"),
    (lambda: analysis.by_server(pd.DataFrame({S.SERVER: ["a"]})), "sessions"),
    (lambda: analysis.by_phase(pd.DataFrame({S.START: [0.0]})), "spans"),
    (lambda: analysis.by_phase(pd.DataFrame({S.PHASE: ["g"], S.START: [0.0]})), "spans"),
    (lambda: analysis.slowest(pd.DataFrame({"x": [1.0]})), "tasks"),
])
def test_missing_column_messages_name_the_frame(call: Any, what: str) -> None:
    with pytest.raises(TraceSchemaError, match=f"^{what} frame lacks required column"):
        call()


def test_messages_of_compare_and_a_wide_frame() -> None:
    with pytest.raises(ConfigError, match=r"^compare\(\) needs at least one run$"):
        analysis.compare({})
    wide = pd.DataFrame({f"c{i:02d}": [0] for i in range(25)})
    with pytest.raises(TraceSchemaError) as info:
        analysis.require_columns(wide, ["nope"], "tasks")
    listed = str(info.value).split("; has ")[1]
    assert listed == repr([f"c{i:02d}" for i in range(20)])  # the first 20 columns
