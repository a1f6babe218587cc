"""guidellm's result file (``benchmarks.json``) in this project's frames.

The files are built here by hand after the shape guidellm 0.8.1 writes (``guidellm run
--output kind=json``, recorded once against ``rollout-kit sim --api vllm``): ``metadata``
(``version`` 2, ``guidellm_version``), ``config``, ``benchmarks[]`` with the per-request
records of each status group (``info.timings`` in epoch seconds, token counts in
``input_metrics`` / ``output_metrics``) and guidellm's summary (``metrics``). The summary's
medians below are worked out by hand with guidellm's own rule: ITL and TPOT weighted by
tokens (``output − 1`` and ``output`` per request), the lower median (the first value whose
cumulative weight reaches ½); checked against guidellm 0.8.1's ``DistributionSummary``.
"""

from __future__ import annotations

import io
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure

from rollout_kit import TraceSchemaError, analysis, plotting
from rollout_kit.tracing import load_traces, read_guidellm
from rollout_kit.tracing._frames import readers as imports_mod
from rollout_kit.tracing._frames.readers import (
    GUIDELLM_TPOT_S,
    TPOT_S,
    GuidellmSampleWarning,
    file_kind,
)
from tests._trace_factories import reference_traces

T0 = 1796417350.0
MS = 1e-3
#: the successful requests: (TTFT ms, ITL ms, output tokens)
OK = [(30.0, 12.0, 32), (10.0, 11.0, 32), (50.0, 14.0, 8), (20.0, 13.0, 32), (40.0, 15.0, 2)]
END_AFTER_LAST_MS = 1.0  # request_end − last_token_iteration
#: guidellm's summary of the successful requests, worked out by hand (see the docstring):
#: TTFT 10 20 30 40 50 → 30; E2E (ttft + itl·(out−1) + 1) 403 352 149 424 56 → 352 ms;
#: ITL weighted 31 31 7 31 1 → 11 (31/101), 12 (62/101 ≥ ½) → 12; TPOT (last − start)/out
#: 12.5625 10.96875 18.5 13.21875 27.5 weighted 32 32 8 32 2 → 10.97 (32/106),
#: 12.5625 (64/106 ≥ ½) → 12.5625
MEDIANS_MS = {"time_to_first_token_ms": 30.0, "request_latency": 0.352,
              "inter_token_latency_ms": 12.0, "time_per_output_token_ms": 12.5625}
ERROR = ("HTTPStatusError(\"Server error '500 Internal Server Error' for url "
         "'http://127.0.0.1:1/v1/completions'\")")


def _timings(**given: float | None) -> dict[str, Any]:
    keys = ("targeted_start", "predecessor_completed", "queued", "dequeued", "scheduled_at",
            "resolve_start", "request_start", "first_request_iteration",
            "first_token_iteration", "first_output_token_iteration", "last_token_iteration",
            "last_request_iteration", "request_iterations", "token_iterations",
            "last_request_sent", "request_sent_sum", "request_sent_count",
            "token_received_sum", "token_received_count", "request_end", "resolve_end",
            "finalized")
    out: dict[str, Any] = dict.fromkeys(keys)
    out.update(request_iterations=0, token_iterations=0, request_sent_sum=0.0,
               request_sent_count=0, token_received_sum=0.0, token_received_count=0)
    out.update(given)
    return out


def _tokens(n: int | None) -> dict[str, Any]:
    return {"text_tokens": n, "cached_tokens": None, "total_tokens": n}


def _record(i: int, status: str, timings: dict[str, Any], out: int | None,
            error: str | None = None, conversation: str | None = None,
            turn: int = 0) -> dict[str, Any]:
    """One request record as guidellm 0.8.1 writes it (its computed fields included)."""
    t = timings
    start, end = t["request_start"], t["request_end"]
    first, last = t["first_token_iteration"], t["last_token_iteration"]
    return {
        "type_": "generative_request_stats", "request_id": f"req-{i}",
        "response_id": f"cmpl-{i}" if status == "completed" else None,
        "request_args": None, "output": "x" * (out or 0) if out else None,
        "info": {"request_id": f"req-{i}", "conversation_id": conversation or f"conv-{i}",
                 "history_len": 0, "turn_index": turn, "node_id": "main_0",
                 "status": status, "scheduler_node_id": 3, "scheduler_process_id": i % 2,
                 "scheduler_start_time": T0 - 0.05, "timings": t, "error": error,
                 "traceback": "Traceback ..." if error else None,
                 "started_at": start, "completed_at": end or t["resolve_end"]},
        "input_metrics": _tokens(64), "output_metrics": _tokens(out),
        "request_start_time": start, "request_end_time": end or t["resolve_end"],
        "request_latency": end - start if end is not None and start is not None else None,
        "prompt_tokens": 64, "output_tokens": out,
        "time_to_first_token_ms": 1e3 * (first - start) if first is not None else None,
        "inter_token_latency_ms": (1e3 * (last - first) / (out - 1)
                                   if first is not None and last is not None and out
                                   and out > 1 else None),
    }


def _ok(i: int, ttft_ms: float, itl_ms: float, out: int, due: float,
        conversation: str | None = None, turn: int = 0) -> dict[str, Any]:
    start = due + 0.002
    first = start + ttft_ms * MS
    last = first + itl_ms * MS * (out - 1)
    end = last + END_AFTER_LAST_MS * MS
    return _record(i, "completed", _timings(
        targeted_start=due, queued=T0 - 1.0, dequeued=due, scheduled_at=due,
        resolve_start=due + 0.001, request_start=start, first_request_iteration=first,
        first_token_iteration=first, first_output_token_iteration=first,
        last_token_iteration=last, last_request_iteration=last, request_iterations=out + 2,
        token_iterations=out, request_end=end, resolve_end=end + 0.0002,
        finalized=end + 0.001), out, conversation=conversation, turn=turn)


def _errored(i: int, due: float) -> dict[str, Any]:
    start = due + 0.003
    return _record(i, "errored", _timings(
        targeted_start=due, queued=T0 - 1.0, dequeued=due, scheduled_at=due,
        resolve_start=due + 0.001, request_start=start, resolve_end=start + 0.004,
        finalized=start + 0.005), None, error=ERROR)


def _incomplete(i: int, due: float) -> dict[str, Any]:
    start = due + 0.002
    return _record(i, "cancelled", _timings(
        targeted_start=due, queued=T0 - 1.0, dequeued=due, scheduled_at=due,
        resolve_start=due + 0.001, request_start=start, first_token_iteration=start + 0.02,
        token_iterations=3, resolve_end=start + 0.05, finalized=start + 0.051), None)


def _summary(median: float, count: int) -> dict[str, Any]:
    return {"mean": median, "median": median, "mode": median, "variance": 0.0,
            "std_dev": 0.0, "min": median, "max": median, "count": count,
            "total_sum": median * count, "percentiles": {"p50": median}}


def _benchmark(requests: dict[str, list[dict[str, Any]]], rate: float = 20.0,
               medians: dict[str, float] | None = None,
               totals: dict[str, int] | None = None) -> dict[str, Any]:
    counts = totals or {k: len(v) for k, v in requests.items()}
    counts = {**counts, "total": sum(counts.values())}
    metrics: dict[str, Any] = {"request_totals": counts}
    for name, med in (medians or {}).items():
        metrics[name] = {"successful": _summary(med, counts["successful"])}
    return {"type_": "generative_benchmark",
            "config": {"id_": "bench", "run_index": 0,
                       "strategy": {"type_": "poisson", "worker_count": 10,
                                    "max_concurrency": 10240, "rate": rate,
                                    "random_seed": 0}},
            "scheduler_state": {}, "scheduler_metrics": {}, "metrics": metrics,
            "requests": {**requests, "total": None}, "warnings": [],
            "start_time": T0, "end_time": T0 + 1.0, "duration": 1.0,
            "warmup_duration": 0.0, "cooldown_duration": 0.0}


def _file(path: Path, benchmarks: list[dict[str, Any]]) -> Path:
    doc = {"metadata": {"version": 2, "guidellm_version": "0.8.1",
                        "python_version": "3.11.7", "platform": "Linux"},
           "config": {"metadata": {"labels": {}},
                      "spec": {"backend": {"kind": "openai_http",
                                           "target": "http://127.0.0.1:1", "model": "tiny"}}},
           "benchmarks": benchmarks, "conclusions": []}
    path.write_text(json.dumps(doc))  # one line, as guidellm writes it
    return path


def _main_file(tmp_path: Path) -> Path:
    ok = [_ok(i, *spec, due=T0 + 0.1 * i) for i, spec in enumerate(OK)]
    return _file(tmp_path / "benchmarks.json", [_benchmark(
        {"successful": ok, "errored": [_errored(5, T0 + 0.55)],
         "incomplete": [_incomplete(6, T0 + 0.65)]}, medians=MEDIANS_MS)])


def _lower_median(values: Any, weights: Any = None) -> float:
    """guidellm's median: the first value (ascending) whose cumulative weight reaches ½."""
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    order = np.argsort(v, kind="stable")
    cdf = np.cumsum(w[order]) / w.sum()
    return float(v[order][np.searchsorted(cdf, 0.5, side="left")])


# ------------------------------------------------------------------------------- the tests
def test_load_traces_tells_guidellm_from_aiperf(tmp_path: Path) -> None:
    path = _main_file(tmp_path)
    assert file_kind(path) == "guidellm"
    aiperf = tmp_path / "profile_export.jsonl"
    aiperf.write_text(json.dumps({"metadata": {"request_start_ns": 1, "request_end_ns": 2},
                                  "metrics": {}, "error": None}) + "\n")
    assert file_kind(aiperf) == "aiperf"
    tr = load_traces(path)  # once: "'metadata.request_start_ns' is missing"
    assert len(tr.tasks) == 7 and len(tr.sessions) == 7
    with pytest.raises(TraceSchemaError, match=r"one kind at a time, got a guidellm result"):
        load_traces([path, aiperf])


def test_guidellm_requests_in_the_frames(tmp_path: Path) -> None:
    tr = read_guidellm(_main_file(tmp_path))
    ref = reference_traces()
    for frame, want in ((tr.tasks, ref.tasks), (tr.sessions, ref.sessions),
                        (tr.spans, ref.spans)):
        assert list(frame.columns[:len(want.columns)]) == list(want.columns)
        for col in want.columns:
            assert frame[col].dtype == want[col].dtype, col
    assert tr.wall_epoch == pytest.approx(T0, abs=1e-6)
    t, s = tr.tasks, tr.sessions
    assert list(t["status"]) == ["accepted"] * 5 + ["failed", "cancelled"]
    assert list(t["reason"].fillna("")) == [""] * 5 + ["request_error", "cancelled"]
    assert t.loc[5, "error"] == ERROR
    assert list(t["worker"]) == [f"process {i % 2}" for i in range(7)]
    assert (t["strategy"] == "poisson").all() and (t["strategy_rate"] == 20.0).all()
    # T submit = targeted_start, dispatch = start = request_start, end = request_end
    assert t["submit_ts"].to_numpy() == pytest.approx([0.1 * i for i in range(5)]
                                                      + [0.55, 0.65], abs=1e-6)
    assert t["queue_s"].to_numpy() == pytest.approx([0.002] * 5 + [0.003, 0.002], abs=1e-6)
    assert (t["dispatch_ts"] == t["start_ts"]).all()
    e2e = [ttft + itl * (out - 1) + END_AFTER_LAST_MS for ttft, itl, out in OK]
    assert t["run_s"].iloc[:5].to_numpy() / MS == pytest.approx(e2e, abs=1e-3)
    assert t.loc[5, "run_s"] == pytest.approx(0.004, abs=1e-6)  # errored: to resolve_end
    assert t.loc[6, "run_s"] == pytest.approx(0.05, abs=1e-6)
    # S tokens, TTFT, ITL, TPOT (vLLM's) and guidellm's own TPOT
    ok = s[s["status"] == "accepted"]
    assert list(ok["prompt_tokens"]) == [64] * 5
    assert list(ok["completion_tokens"]) == [out for _, _, out in OK]
    assert ok["ttft_s"].to_numpy() / MS == pytest.approx([x[0] for x in OK], abs=1e-3)
    assert ok["itl_s"].to_numpy() / MS == pytest.approx([x[1] for x in OK], abs=1e-3)
    tpot = [(itl * (out - 1) + END_AFTER_LAST_MS) / (out - 1) for _, itl, out in OK]
    assert ok[TPOT_S].to_numpy() / MS == pytest.approx(tpot, abs=1e-3)
    own = [(ttft + itl * (out - 1)) / out for ttft, itl, out in OK]
    assert ok[GUIDELLM_TPOT_S].to_numpy() / MS == pytest.approx(own, abs=1e-3)
    assert list(s["request_id"]) == [f"req-{i}" for i in range(7)]
    bad = s[s["status"] != "accepted"]
    assert bad["ttft_s"].isna().all() and bad["completion_tokens"].isna().all()
    # one generate span per request; the failed and the cancelled one flagged raised
    assert list(tr.spans["phase"]) == ["generate"] * 7
    assert list(tr.spans["raised"]) == [False] * 5 + [True, True]


def test_medians_of_the_frames_equal_guidellms_own(tmp_path: Path) -> None:
    path = _main_file(tmp_path)
    summary = json.loads(path.read_text())["benchmarks"][0]["metrics"]
    tr = load_traces(path)
    ok = tr.sessions[tr.sessions["status"] == "accepted"]
    tasks = tr.tasks[tr.tasks["status"] == "accepted"]
    out = ok["completion_tokens"].to_numpy(dtype=float)
    got = {"time_to_first_token_ms": _lower_median(ok["ttft_s"]) / MS,
           "request_latency": _lower_median(tasks["run_s"]),
           "inter_token_latency_ms": _lower_median(ok["itl_s"], out - 1) / MS,
           "time_per_output_token_ms": _lower_median(ok[GUIDELLM_TPOT_S], out) / MS}
    for name, value in got.items():
        own = summary[name]["successful"]["median"]
        assert value == pytest.approx(own, abs=1e-3 if name.endswith("_ms") else 1e-6), name
    # the weights matter: an unweighted median of the requests' ITLs reads 13 ms, not 12
    assert float(np.median(ok["itl_s"])) / MS == pytest.approx(13.0, abs=1e-3)
    # analysis.summary reads the same TTFT (an odd count: its median is the middle value)
    latency = analysis.summary(tr.tasks, sessions=tr.sessions).latency
    assert latency.loc[["ttft_s"], "p50"].to_numpy(dtype=float)[0] / MS == pytest.approx(
        summary["time_to_first_token_ms"]["successful"]["median"], abs=1e-3)


def test_conversations_several_benchmarks_and_files(tmp_path: Path) -> None:
    turns = [_ok(0, 10.0, 5.0, 4, due=T0, conversation="c0"),
             _ok(1, 10.0, 5.0, 4, due=T0 + 0.2, conversation="c0", turn=1),
             _ok(2, 10.0, 5.0, 4, due=T0 + 0.1, conversation="c1")]
    sweep = _file(tmp_path / "sweep.json", [
        _benchmark({"successful": turns, "errored": [], "incomplete": []}, rate=5.0),
        _benchmark({"successful": [_ok(3, 10.0, 5.0, 4, due=T0 + 2.0)], "errored": [],
                    "incomplete": []}, rate=10.0)])
    tr = read_guidellm(sweep)
    t = tr.tasks
    assert list(t["n_sessions"]) == [2, 1, 1]  # c0's two turns are one task
    assert list(t["run"]) == [0, 0, 1] and list(t["strategy_rate"]) == [5.0, 5.0, 10.0]
    assert list(tr.sessions["turn_index"]) == [0, 1, 0, 0]
    assert t.loc[0, "end_ts"] == pytest.approx(0.2 + 0.002 + 0.010 + 0.015 + 0.001, abs=1e-6)
    other = _file(tmp_path / "other.json", [_benchmark(
        {"successful": [_ok(0, 10.0, 5.0, 4, due=T0 + 5.0)], "errored": [],
         "incomplete": []})])
    both = load_traces([sweep, other])
    assert list(both.tasks.index) == [0, 1, 2, 3]
    assert list(both.sessions.index.get_level_values("session_id")) == [0, 1, 2, 3, 4]
    assert "run" in both.tasks.columns


def test_plots_and_summary_of_a_guidellm_file(tmp_path: Path) -> None:
    tr = load_traces(_main_file(tmp_path))
    ax = plotting.plot_timeline(tr.spans, tasks=tr.tasks)
    assert "timeline:generate" in {c.get_gid() for c in ax.collections}
    fig = plotting.dashboard(tr.tasks, tr.spans, tr.sessions, pyplot=False)
    assert isinstance(fig, Figure)
    fig.savefig(io.BytesIO(), format="png")
    table = analysis.summary(tr.tasks, sessions=tr.sessions)
    assert isinstance(table.to_markdown(), str)


def test_a_sampled_benchmark_warns(tmp_path: Path) -> None:
    path = _file(tmp_path / "sampled.json", [_benchmark(
        {"successful": [_ok(0, 10.0, 5.0, 4, due=T0)], "errored": [], "incomplete": []},
        totals={"successful": 40, "errored": 0, "incomplete": 0})])
    with pytest.warns(GuidellmSampleWarning, match=r"lists 1 of its 40 requests"):
        tr = read_guidellm(path)
    assert len(tr.tasks) == 1


def test_a_document_larger_than_the_sniff_is_known_by_its_head(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _main_file(tmp_path)
    monkeypatch.setattr(imports_mod, "_SNIFF_LIMIT", 256)
    assert file_kind(path) == "guidellm"
    aiperf = tmp_path / "big-aiperf.jsonl"
    aiperf.write_text(json.dumps({"metadata": {"request_start_ns": 1},
                                  "metrics": {"x": {"value": "y" * 600, "unit": ""}}}) + "\n")
    assert file_kind(aiperf) is None  # too long to read, and not guidellm's head


def test_guidellm_bad_input(tmp_path: Path) -> None:
    def bad(name: str, doc: Any) -> Path:
        p = tmp_path / name
        p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return p

    head = {"metadata": {"version": 2, "guidellm_version": "0.8.1"}, "config": {}}
    with pytest.raises(TraceSchemaError, match=r"not a guidellm result"):
        read_guidellm(bad("a.json", {"metadata": {}, "rows": []}))
    with pytest.raises(TraceSchemaError, match=r"not JSON \(guidellm's YAML"):
        read_guidellm(bad("b.yaml", "metadata:\n  version: 2\n"))
    with pytest.raises(TraceSchemaError, match=r"no benchmark in 'benchmarks'"):
        read_guidellm(bad("c.json", {**head, "benchmarks": []}))
    with pytest.raises(TraceSchemaError, match=r"c2\.json: benchmarks\[0\]: no 'requests'"):
        read_guidellm(bad("c2.json", {**head, "benchmarks": [{"type_":
                                                              "generative_benchmark"}]}))
    rec = _ok(0, 10.0, 5.0, 4, due=T0)
    del rec["info"]["timings"]
    with pytest.raises(TraceSchemaError,
                       match=r"d\.json: benchmarks\[0\]: requests\.successful\[0\]: no "
                             r"'info\.timings'"):
        read_guidellm(bad("d.json", {**head, "benchmarks": [_benchmark(
            {"successful": [rec], "errored": [], "incomplete": []})]}))
    rec = _ok(0, 10.0, 5.0, 4, due=T0)
    rec["info"]["timings"]["request_end"] = None
    with pytest.raises(TraceSchemaError, match=r"needs 'info\.timings\.request_start' and "
                                               r"'request_end'"):
        read_guidellm(bad("e.json", {**head, "benchmarks": [_benchmark(
            {"successful": [rec], "errored": [], "incomplete": []})]}))
    rec = _ok(0, 10.0, 5.0, 4, due=T0)
    rec["info"]["timings"]["request_start"] = "soon"
    with pytest.raises(TraceSchemaError, match=r"'request_start' must be a number or null"):
        read_guidellm(bad("f.json", {**head, "benchmarks": [_benchmark(
            {"successful": [rec], "errored": [], "incomplete": []})]}))
    rec = _ok(0, 10.0, 5.0, 4, due=T0)
    rec["output_metrics"]["total_tokens"] = 2.5
    with pytest.raises(TraceSchemaError, match=r"'output_metrics\.total_tokens' must be a "
                                               r"whole number"):
        read_guidellm(bad("g.json", {**head, "benchmarks": [_benchmark(
            {"successful": [rec], "errored": [], "incomplete": []})]}))
    with pytest.raises(TraceSchemaError, match=r"'requests\.errored' must be a list"):
        read_guidellm(bad("h.json", {**head, "benchmarks": [_benchmark(
            {"successful": [], "errored": {"x": 1}, "incomplete": []})]}))  # type: ignore[dict-item]


def test_without_usage_the_token_iterations_count(tmp_path: Path) -> None:
    rec = _ok(0, 10.0, 5.0, 4, due=T0)
    rec["output_metrics"] = _tokens(None)  # the server sent no usage: guidellm counts chunks
    tr = read_guidellm(_file(tmp_path / "x.json", [_benchmark(
        {"successful": [rec], "errored": [], "incomplete": []})]))
    assert tr.sessions["completion_tokens"].iloc[0] == 4
    assert math.isfinite(tr.sessions["itl_s"].iloc[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete file: no sample warning
        read_guidellm(_main_file(tmp_path))
