"""``rollout-kit report`` / ``export`` end to end on JSONL written by the real Tracer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from rollout_kit import ConfigError, plotting
from rollout_kit._cli import main
from rollout_kit.report import CHROME_FILE, PLOT_FILES, export_frames, write_report
from rollout_kit.tracing import load_traces
from rollout_kit.tracing import schema as S
from tests._trace_factories import record_with_tracer

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def trace_files(tmp_path: Path) -> list[Path]:
    a, b = tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"
    record_with_tracer(6, path=a, worker="w0")
    record_with_tracer(3, path=b, worker="w1", first_id=6)  # controller: ids global
    return [a, b]


def test_report_end_to_end(tmp_path: Path, trace_files: list[Path],
                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    rc = main(["report", *map(str, trace_files), "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    for name in PLOT_FILES:
        assert (out / name).read_bytes()[:8] == PNG, name
    md = (out / "summary.md").read_text()
    assert "| total_s |" in md and "### Status" in md
    summary = pd.read_csv(out / "summary.csv", index_col="metric")["value"]
    assert summary["status failed"] == 2 + 1 and summary["status accepted"] == 4 + 2
    tasks = pd.read_csv(out / "tasks.csv")
    assert len(tasks) == 9
    trace = json.loads((out / CHROME_FILE).read_text())
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert procs == {"worker w0", "worker w1", "server 127.0.0.1:8000", "server 127.0.0.1:8001"}
    assert {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X"} == {
        "queue", "phase", "session", "lifecycle"}  # the sessions frame went in too
    assert any("bind_id" in e for e in trace["traceEvents"])
    assert "wrote" in capsys.readouterr().out


def test_report_refuses_non_empty_out_unless_forced(tmp_path: Path, trace_files: list[Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc = main(["report", str(trace_files[0]), "--out", str(out), "--no-progress"])
    assert rc == 2
    assert "--force" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    rc = main(["report", str(trace_files[0]), "--out", str(out), "--force", "--no-progress"])
    assert rc == 0
    assert (out / "timeline.png").exists() and (out / "keep.txt").read_text() == "mine"


def test_report_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"hello": 1}\n')
    assert main(["report", str(junk), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "not a rollout_kit trace" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "r2"),
                 "--no-progress"]) == 2
    assert "error" in capsys.readouterr().err


def test_export_chrome(tmp_path: Path, trace_files: list[Path],
                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "folder" / "trace.json"  # its folder is made
    assert main(["export", "chrome", *map(str, trace_files), str(out), "--no-progress"]) == 0
    trace = json.loads(out.read_text())
    tasks = {e["args"]["task_id"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert tasks == set(range(9))  # ids 0..5 (w0) and 6..8 (w1)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["export", "chrome", str(out), "--no-progress"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "{chrome} TRACES [TRACES ...] OUT\n" in err  # one output, not TRACES... OUT [...]
    assert "required: OUT" in err
    assert main(["export", "chrome", str(trace_files[0]), str(tmp_path / "x.jsonl"),
                 "--no-progress"]) == 2


def test_write_report_api_and_export_frames(tmp_path: Path, trace_files: list[Path]) -> None:
    traces = load_traces([str(p) for p in trace_files])
    files = write_report(traces, tmp_path / "r", progress=False)
    names = {p.name for p in files}
    assert {"summary.md", "summary.csv", "tasks.csv", "spans.csv", CHROME_FILE} <= names
    assert set(PLOT_FILES) <= names
    with pytest.raises(ConfigError, match="not empty"):
        write_report(traces, tmp_path / "r", progress=False)
    frames = export_frames(traces, tmp_path, parquet=False)
    assert [p.name for p in frames] == ["tasks.csv", "sessions.csv", "spans.csv"]
    assert len(pd.read_csv(tmp_path / "spans.csv")) == len(traces.spans)


def test_summary_leaves_out_what_was_not_measured(tmp_path: Path,
                                                 trace_files: list[Path]) -> None:
    traces = load_traces([str(p) for p in trace_files])
    no_ttft = dataclasses.replace(traces, sessions=traces.sessions.assign(ttft_s=np.nan),
                                  tasks=traces.tasks.drop(columns=[S.COMPLETION_TOKENS]))
    write_report(no_ttft, tmp_path / "r", progress=False)
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "ttft_s" not in md and "| nan |" not in md and "completion_tokens" not in md
    assert "| total_s |" in md and "| tasks_per_s |" in md
    summary = pd.read_csv(tmp_path / "r" / "summary.csv", index_col="metric")["value"]
    assert not summary.isna().any()
    assert not any(k.startswith("ttft_s") for k in summary.index)
    write_report(traces, tmp_path / "r2", progress=False)  # measured: kept
    assert "| ttft_s |" in (tmp_path / "r2" / "summary.md").read_text()


def test_report_throughput_window_from_run_length(tmp_path: Path, trace_files: list[Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    real = plotting.save_plot

    def spy(fn: Any, path: Any, *args: Any, **kw: Any) -> None:
        if "window" in kw:
            seen[Path(path).name] = kw["window"]
        real(fn, path, *args, **kw)

    monkeypatch.setattr(plotting, "save_plot", spy)
    traces = load_traces([str(p) for p in trace_files])  # a run of a few milliseconds
    write_report(traces, tmp_path / "r", progress=False)
    expected = plotting.throughput_window(traces.tasks)
    assert seen == {"throughput.png": expected, "dashboard.png": expected}
    assert expected < 1.0
    write_report(traces, tmp_path / "r2", window=0.5, progress=False)  # the user's choice
    assert seen["throughput.png"] == 0.5


def test_parquet_roundtrip(tmp_path: Path, trace_files: list[Path]) -> None:
    traces = load_traces(str(trace_files[0]))
    export_frames(traces, tmp_path, parquet=True)
    assert len(pd.read_parquet(tmp_path / "tasks.parquet")) == len(traces.tasks)
