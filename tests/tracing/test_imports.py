"""Other tools' result files in this project's frames: vllm bench serve, aiperf, AReaL.

``data/vllm-bench-sim.json`` is a real ``vllm bench serve`` result (vLLM 0.32 from the CPU
venv) recorded against ``rollout-kit sim --api vllm`` (16 random prompts of 16 tokens,
8 out, Poisson 30 req/s, ``--max-concurrency 2``, the simulator answering 15 % with HTTP
500); the command is in ``data/README.md``. ``data/aiperf-profile_export.jsonl`` and
``data/areal/sessions-r*.jsonl`` are small files written by hand after the documented
schemas (aiperf's "Working with Profile Export Files"; ``shared/reference/areal.md``
§1.7). Values are checked against the files row by row and against vllm's own aggregates.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from rollout_kit import ConfigError, RolloutController, TraceSchemaError, analysis, plotting
from rollout_kit.load import Arrivals, LoadSpec, run_load_async, synthetic
from rollout_kit.sim import SimCluster
from rollout_kit.testing import fast_engine_config
from rollout_kit.testing._plugin import ControllerFactory
from rollout_kit.tracing import (
    TornTraceWarning,
    Tracer,
    Traces,
    load_traces,
    read_aiperf,
    read_areal_sessions_trace,
    read_vllm_bench,
)
from rollout_kit.tracing._frames.readers import file_kind
from tests._trace_factories import reference_traces

DATA = Path(__file__).parent / "data"
VLLM = DATA / "vllm-bench-sim.json"
AIPERF = DATA / "aiperf-profile_export.jsonl"
AREAL = [DATA / "areal" / "sessions-r0.jsonl", DATA / "areal" / "sessions-r1.jsonl"]
MS = 1e-3
T0_AIPERF = 1759813207.5
T0_AREAL = 1734999251.67


def _vllm() -> dict[str, Any]:
    out: dict[str, Any] = json.loads(VLLM.read_text())
    return out


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _write_lines(path: Path, rows: list[Any], tail: str = "") -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in rows) + tail)
    return path


def _same_dtypes(got: Traces) -> None:
    ref = reference_traces()
    for frame, want in ((got.tasks, ref.tasks), (got.sessions, ref.sessions),
                        (got.spans, ref.spans)):
        assert list(frame.columns[:len(want.columns)]) == list(want.columns)
        for col in want.columns:
            assert frame[col].dtype == want[col].dtype, col
        assert frame.index.names == want.index.names


# ---------------------------------------------------------------- vllm bench serve
def test_vllm_bench_serve_result_in_the_frames(tmp_path: Path) -> None:
    raw = _vllm()
    tr = read_vllm_bench(VLLM)
    assert file_kind(VLLM) == "vllm_bench"
    _same_dtypes(tr)
    t, s = tr.tasks, tr.sessions
    n = raw["num_prompts"]
    assert list(t.index) == list(range(n)) and (t["n_sessions"] == 1).all()
    assert (t["status"] == "accepted").sum() == raw["completed"] == 10
    assert (t["status"] == "failed").sum() == raw["failed"] == 6
    assert math.isnan(tr.wall_epoch)  # vllm records perf_counter times only
    assert set(t["source"]) == {str(VLLM)} and set(t["model_id"]) == {"tiny-llama"}

    st, q, lat = (np.asarray(raw[k]) for k in ("start_times", "queue_times", "latencies"))
    anchor = float((st - q).min())  # times are seconds since the earliest arrival
    for i in (0, 2, 8, n - 1):  # by hand: successes and failures, with and without a queue
        row, sess = t.loc[i], s.loc[(i, i)]
        ok = raw["errors"][i] == ""
        assert row["status"] == sess["status"] == ("accepted" if ok else "failed")
        assert row["submit_ts"] == pytest.approx(st[i] - q[i] - anchor, abs=1e-6)
        assert row["dispatch_ts"] == row["start_ts"] == pytest.approx(st[i] - anchor, abs=1e-6)
        assert row["queue_s"] == pytest.approx(q[i], abs=1e-6)
        if ok:
            assert row["end_ts"] == pytest.approx(st[i] + lat[i] - anchor, abs=1e-6)
            assert row["total_s"] == pytest.approx(q[i] + lat[i], abs=1e-6)
            assert row["generate_s"] == pytest.approx(lat[i], abs=1e-6)
            assert sess["ttft_s"] == raw["ttfts"][i]
            assert sess["itl_s"] == pytest.approx(statistics.fmean(raw["itls"][i]))
            assert sess["prompt_tokens"] == raw["input_lens"][i]
            assert sess["completion_tokens"] == raw["output_lens"][i] == 8
            assert sess["tpot_s"] == pytest.approx((lat[i] - raw["ttfts"][i]) / 7)
            assert sess["generated_text"] == raw["generated_texts"][i]
            assert pd.isna(row["error"])
        else:  # vllm writes 0 latency / TTFT / output for a failure: unknown, not zero
            assert row["error"] == raw["errors"][i] == "Internal Server Error"
            assert row["reason"] == "request_error"
            assert math.isnan(row["end_ts"]) and math.isnan(sess["ttft_s"])
            assert pd.isna(sess["completion_tokens"]) and pd.isna(sess["prompt_tokens"])
            assert not (tr.spans["task_id"] == i).any()
    # vllm's own aggregates, from the frames
    ok = t["status"] == "accepted"
    assert int(s["prompt_tokens"].sum()) == raw["total_input_tokens"]
    assert int(s["completion_tokens"].sum()) == raw["total_output_tokens"]
    assert s["ttft_s"].median() * 1e3 == pytest.approx(raw["median_ttft_ms"])
    assert s["tpot_s"].mean() * 1e3 == pytest.approx(raw["mean_tpot_ms"])
    assert len(tr.spans) == ok.sum() and set(tr.spans["phase"]) == {"generate"}
    assert tr.spans["duration"].to_numpy() == pytest.approx(lat[ok.to_numpy()], abs=1e-6)

    # load_traces knows it by its content, whatever its name
    for name in ("bench.json", "bench.jsonl", "result"):
        copy = shutil.copy(VLLM, tmp_path / name)
        pd.testing.assert_frame_equal(load_traces(copy).tasks.drop(columns="source"),
                                      t.drop(columns="source"))


def test_vllm_bench_several_results_and_pretty_printed(tmp_path: Path) -> None:
    raw = _vllm()
    two = tmp_path / "append.json"  # --append-result: one result a line
    two.write_text(json.dumps(raw) + "\n" + json.dumps({**raw, "model_id": "other"}))
    tr = load_traces(two)
    assert list(tr.tasks.index) == list(range(32))
    assert list(tr.tasks["run"]) == [0] * 16 + [1] * 16
    assert list(tr.tasks["model_id"].iloc[[0, 31]]) == ["tiny-llama", "other"]
    assert tr.sessions.index.is_unique
    pretty = _write_lines(tmp_path / "pretty.json", [json.dumps(raw, indent=2)])
    assert file_kind(pretty) == "vllm_bench"
    assert len(load_traces(pretty).tasks) == 16
    # two files of one kind: numbered on, on the clock they were written with
    both = read_vllm_bench([VLLM, pretty])
    assert len(both.tasks) == 32 and set(both.tasks["source"]) == {str(VLLM), str(pretty)}


# ---------------------------------------------------------------- aiperf
def test_aiperf_export_in_the_frames() -> None:
    rows = _lines(AIPERF)
    tr = read_aiperf(AIPERF)
    assert file_kind(AIPERF) == "aiperf"
    _same_dtypes(tr)
    t, s = tr.tasks, tr.sessions
    assert tr.wall_epoch == pytest.approx(T0_AIPERF)  # aiperf's epoch ns: a wall clock
    # one task per user session (session_num), one session per request (by record order)
    assert list(t.index) == [0, 1, 2, 3] and list(t["n_sessions"]) == [2, 1, 1, 1]
    assert list(s.index) == [(0, 0), (0, 3), (1, 1), (2, 2), (3, 4)]
    assert list(t["status"]) == ["accepted", "accepted", "failed", "cancelled"]
    assert list(t["worker"]) == ["worker_359d423a", "worker_6006099d", "worker_359d423a",
                                 "worker_359d423a"]
    first = rows[0]
    m, meta = first["metrics"], first["metadata"]
    s0 = s.loc[(0, 0)]
    assert s0["start_ts"] == 0.0 and s0["end_ts"] == pytest.approx(0.3)
    assert s0["ttft_s"] == pytest.approx(m["time_to_first_token"]["value"] * MS)
    assert s0["itl_s"] == pytest.approx(22.5 * MS)  # mean of inter_chunk_latency
    assert s0["tpot_s"] == pytest.approx(m["inter_token_latency"]["value"] * MS)
    assert s0["prompt_tokens"] == 550 and s0["completion_tokens"] == 9
    assert s0["time_to_second_token_s"] == pytest.approx(22.5 * MS)  # a time metric: seconds
    assert s0["output_token_throughput_per_user"] == pytest.approx(1000 / 22.5)
    assert s0["request_id"] == meta["x_request_id"] and s0["turn_index"] == 0
    assert s0["benchmark_phase"] == "profiling" and s0["conversation_id"] == "conv-0"
    # the conversation: first start to last end, its tokens summed, generate = the union
    t0 = t.loc[0]
    assert (t0["submit_ts"], t0["end_ts"]) == pytest.approx((0.0, 0.65))
    assert t0["prompt_tokens"] == 1150 and t0["completion_tokens"] == 15
    assert t0["generate_s"] == pytest.approx(0.55) and math.isnan(t0["queue_s"])
    failed, cancelled = t.loc[2], t.loc[3]
    assert failed["error"] == "ServerError: Internal Server Error"
    assert failed["reason"] == "request_error" and cancelled["reason"] == "cancelled"
    assert s.loc[(2, 2), "error_code"] == 500 and s.loc[(2, 2), "error_isl"] == 550
    assert pd.isna(s.loc[(2, 2), "prompt_tokens"]) and math.isnan(s.loc[(2, 2), "ttft_s"])
    assert (cancelled["start_ts"], cancelled["end_ts"]) == pytest.approx((0.5, 0.7))
    sp = tr.spans.set_index("session_id")
    assert list(sp["raised"].sort_index()) == [False, False, True, False, True]
    assert load_traces(AIPERF).tasks.equals(t)


def test_aiperf_credit_and_torn_last_line(tmp_path: Path) -> None:
    rows = _lines(AIPERF)
    for r in rows:  # a newer aiperf: when the credit was issued (the user's arrival)
        r["metadata"]["credit_issued_ns"] = r["metadata"]["request_start_ns"] - 10_000_000
    f = _write_lines(tmp_path / "profile_export.jsonl", rows, tail='{"metadata": {"sess')
    with pytest.warns(TornTraceWarning, match="torn last line"):
        tr = load_traces(f)
    t = tr.tasks
    assert tr.wall_epoch == pytest.approx(T0_AIPERF - 0.01)
    assert t["queue_s"].to_numpy() == pytest.approx([0.01] * 4)
    assert t.loc[1, "submit_ts"] == pytest.approx(0.1) and t.loc[1, "dispatch_ts"] == (
        pytest.approx(0.11))


# ---------------------------------------------------------------- AReaL
def test_areal_session_trace_in_the_frames() -> None:
    tr = read_areal_sessions_trace(AREAL)
    assert file_kind(AREAL[0]) == "areal_sessions"
    _same_dtypes(tr)
    t, s = tr.tasks, tr.sessions
    assert tr.wall_epoch == pytest.approx(T0_AREAL)  # AReaL's time.time()
    # one task per (rank, task_id): task 23 ran on both ranks
    assert list(t.index) == [23, 23, 24, 25, 26, 27]
    assert list(t["worker"]) == ["rank0", "rollout/rank1", "rank0", "rank0", "rollout/rank1",
                                 "rollout/rank1"]
    assert list(t["status"]) == ["accepted", "accepted", "rejected", "failed", "pending",
                                 "cancelled"]
    assert list(t["reason"].fillna("-")) == ["-", "-", "rejected", "workflow_exception", "-",
                                             "dropped"]
    assert list(t["rank"]) == [0, 1, 0, 0, 1, 1]
    rec = _lines(AREAL[0])[1]  # task 23, session 94: two generate spans around a tool call
    s94 = s.loc[(23, 94)]
    assert s94["start_ts"] == pytest.approx(rec["submit_ts"] - T0_AREAL)
    assert s94["total_s"] == pytest.approx(rec["total_s"])
    for phase in ("generate", "reward", "toolcall"):
        assert s94[f"{phase}_s"] == pytest.approx(rec[f"{phase}_s"]), phase
    assert s94["tool_calls"] == 1  # a counter
    t23 = t.iloc[0]
    assert t23["n_sessions"] == 2 and t23["total_s"] == pytest.approx(3.0)
    assert t23["generate_session_s"] == pytest.approx(2.64 + 2.28)  # summed over sessions
    assert math.isnan(t23["queue_s"])  # AReaL stamps a sample's start, not its enqueue
    # a span left open: closed at finalize in a failed session (AReaL's sum leaves it out)
    sp = tr.spans
    open_span = sp[(sp["task_id"] == 25)].iloc[0]
    assert open_span["closed_at_finalize"] and open_span["raised"]
    assert open_span["end"] == pytest.approx(1.6)
    assert not (sp["task_id"] == 26).any()  # open and never finalized: no end to draw
    assert math.isnan(t.iloc[4]["end_ts"])
    # load_traces: a directory of rank files, a glob
    pd.testing.assert_frame_equal(load_traces(AREAL[0].parent).tasks, t)
    pd.testing.assert_frame_equal(load_traces(str(AREAL[0].parent / "sessions-r*.jsonl")).spans,
                                  sp)


# ---------------------------------------------------------------- analysis and plots
async def test_compare_a_rollout_kit_run_with_the_vllm_bench_result(
        sim_vllm: SimCluster, rollout_controller: ControllerFactory) -> None:
    ctl: RolloutController = rollout_controller(vllm=sim_vllm.urls,
                                                engine_config=fast_engine_config(stream=True))
    reqs = synthetic(16, input_len=16, output_len=8, seed=3)  # the load of the recording
    await run_load_async(ctl, reqs, LoadSpec(arrivals=Arrivals(rate=30.0), max_concurrency=2))
    ours, vb = ctl.tracer.frames(), load_traces(VLLM)
    table = analysis.compare({"rollout_kit": ours.tasks, "vllm bench serve": vb.tasks},
                             sessions={"rollout_kit": ours.sessions,
                                       "vllm bench serve": vb.sessions})
    raw = _vllm()
    for metric in ("total_s p50", "ttft_s p50", "generate_s p50", "queue_s p99", "tasks_per_s",
                   "completion_tokens_per_s", "prompt_tokens_per_s"):
        assert np.isfinite(table.loc[metric].to_numpy(dtype=float)).all(), metric
    col = table["vllm bench serve"]
    assert col["ttft_s p50"] * 1e3 == pytest.approx(raw["median_ttft_ms"])
    assert (col["status accepted"], col["status failed"]) == (10, 6)
    assert table.loc["status accepted", "rollout_kit"] == 16
    assert table.loc["tasks_per_s", "rollout_kit"] > 0


@pytest.mark.parametrize("read", [lambda: load_traces(VLLM), lambda: load_traces(AIPERF),
                                  lambda: load_traces(AREAL)], ids=["vllm", "aiperf", "areal"])
def test_plots_of_imported_files(read: Any) -> None:
    tr: Traces = read()
    ax = plotting.plot_timeline(tr.spans, tasks=tr.tasks)
    gids = {c.get_gid() for c in ax.collections}
    rows = tr.tasks.index.nunique()  # a task id of two AReaL ranks is one row, as for SPMD
    assert "timeline:generate" in gids and f"({rows} tasks)" in ax.get_title()
    by_session = plotting.plot_timeline(tr.spans, tasks=tr.tasks, by="session")
    assert "timeline:generate" in {c.get_gid() for c in by_session.collections}
    fig = plotting.dashboard(tr.tasks, tr.spans, tr.sessions, pyplot=False)
    assert isinstance(fig, Figure)
    fig.savefig(io.BytesIO(), format="png")  # every panel draws
    assert isinstance(analysis.summary(tr.tasks, sessions=tr.sessions).to_markdown(), str)


def test_timeline_marks_failures_of_imported_files() -> None:
    ax = plotting.plot_timeline(load_traces(AIPERF).spans, tasks=load_traces(AIPERF).tasks)
    gids = {c.get_gid() for c in ax.collections}
    assert {"timeline:mark:failed", "timeline:mark:cancelled"} <= gids


# ---------------------------------------------------------------- bad input
def test_vllm_bench_bad_input(tmp_path: Path) -> None:
    raw = _vllm()
    f = tmp_path / "r.json"

    def fails(obj: Any, match: str) -> None:
        f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        with pytest.raises(TraceSchemaError, match=match):
            read_vllm_bench(f)

    summary_only = {k: v for k, v in raw.items() if k not in (
        "input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts",
        "errors")}
    fails(summary_only, r"r\.json: .*unknown version, or saved without --save-detailed: it "
                        r"lacks 'start_times', 'ttfts', 'itls', 'input_lens', 'output_lens', "
                        r"'errors'")
    f.write_text(json.dumps(summary_only))  # load_traces knows the kind, and says the same
    with pytest.raises(TraceSchemaError, match="lacks 'start_times'"):
        load_traces(f)
    older = {k: v for k, v in raw.items() if k != "start_times"}  # before vLLM had it
    fails(older, r"r\.json: .*lacks 'start_times' \(this reader needs")
    fails({**raw, "ttfts": raw["ttfts"][:-1]}, "arrays differ in length: .*ttfts 15")
    fails({**raw, "itls": 3}, "'itls' must be a list")
    fails({**raw, "start_times": ["soon", *raw["start_times"][1:]]},
          r"start_times\[0\] must be a number")
    fails({**raw, "input_lens": [1.5, *raw["input_lens"][1:]]}, r"input_lens\[0\] must be a")
    fails("[1, 2]", "not a vllm bench serve result")
    fails(json.dumps(raw) + "\n{not json\n", "r.json: line 2: not JSON")
    fails("", "empty file")
    with pytest.raises(ConfigError, match="does not exist"):
        read_vllm_bench(tmp_path / "missing.json")


def test_aiperf_and_areal_bad_input(tmp_path: Path) -> None:
    ok = _lines(AIPERF)[0]
    f = tmp_path / "profile_export.jsonl"
    for rows, match in (
            ([ok, "{not json", ok], "profile_export.jsonl: line 2 is not JSON"),
            ([ok, {"metrics": {}}], r"line 2: no 'metadata' object: not an aiperf"),
            ([ok, {**ok, "metadata": {**ok["metadata"], "request_start_ns": None}}],
             r"line 2: 'metadata.request_start_ns' is missing"),
            ([{**ok, "metrics": {**ok["metrics"],
                                 "time_to_first_token": {"value": 1, "unit": "fortnight"}}}],
             r"line 1: metric 'time_to_first_token' has unit 'fortnight'"),
            ([{**ok, "metrics": {"request_latency": 3}}],
             r"line 1: metric 'request_latency' is not a \{value, unit\} object"),
            ([{**ok, "metrics": {**ok["metrics"],
                                 "input_sequence_length": {"value": "many", "unit": "tokens"}}}],
             "line 1: metric 'input_sequence_length' must be a whole number"),
            ([], "empty file")):
        _write_lines(f, rows)
        with pytest.raises(TraceSchemaError, match=match):
            read_aiperf(f)

    good = _lines(AREAL[0])[0]
    g = tmp_path / "sessions-r0.jsonl"
    for rows, match in (
            ([good, good, {k: v for k, v in good.items() if k != "submit_ts"}],
             r"sessions-r0\.jsonl: line 3: missing 'submit_ts': not an AReaL SessionRecord"),
            ([{**good, "status": "done"}], "line 1: 'status' must be one of pending, accepted"),
            ([{**good, "task_id": -1}], "line 1: 'task_id' must be an int >= 0"),
            ([{**good, "submit_ts": "soon"}], "line 1: 'submit_ts' must be a number"),
            ([{**good, "phases": {"generate": [{"end_ts": 1.0}]}}],
             r"line 1: phases\['generate'\]\[0\] needs a numeric 'start_ts'"),
            ([{**good, "phases": {"no spaces": []}}], "line 1: phase no spaces"),
            ([good, [1, 2]], "line 2 is not a JSON object")):
        _write_lines(g, rows)
        with pytest.raises(TraceSchemaError, match=match):
            read_areal_sessions_trace(g)
    _write_lines(g, [good], tail='{"task_id": 3, "sess')  # the writer died mid-line
    with pytest.warns(TornTraceWarning):
        assert len(load_traces(g).sessions) == 1


def test_mixed_kinds_are_refused(tmp_path: Path) -> None:
    trace = tmp_path / "traces.jsonl"
    tr = Tracer(path=trace)
    tr.register_task(0)
    tr.finalize(0, "accepted")
    tr.close()
    assert file_kind(trace) == "rollout_kit" and len(load_traces(trace).tasks) == 1
    with pytest.raises(TraceSchemaError,
                       match=r"one kind at a time, got a rollout_kit trace: .*traces\.jsonl; "
                             r"a vllm bench serve result: .*vllm-bench-sim\.json\. Load each"):
        load_traces([trace, VLLM])
    with pytest.raises(TraceSchemaError, match=r"an aiperf per-request export: .*; an AReaL"):
        load_traces([AIPERF, *AREAL])
    junk = _write_lines(tmp_path / "notes.jsonl", [{"hello": 1}])
    assert file_kind(junk) is None
    with pytest.raises(TraceSchemaError, match=r"a file of no known kind: .*notes\.jsonl"):
        load_traces([VLLM, junk])
    with pytest.raises(TraceSchemaError, match="is not a rollout_kit trace"):
        load_traces(junk)  # alone: this project's reader says what it expected
    (tmp_path / "blob.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 64)
    assert file_kind(tmp_path / "blob.parquet") is None
