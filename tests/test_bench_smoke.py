"""Smoke test of the benchmark runner: ``bench/run_all.py --smoke`` runs and writes
well-formed JSON (tiny sizes; no timing assertions — timing targets live in bench/)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
ROW_KEYS = {"bench", "metric", "ours", "baseline", "baseline_name", "ratio", "target", "met",
            "spread", "note", "extra"}


def test_run_all_smoke_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # no aiperf / guidellm here: their rows say why, and the bench goes on
    env = {**os.environ, "ROLLOUT_KIT_PEERS_CACHE": str(tmp_path / "no-peers")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_all.py"), "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["size"] == "smoke"
    for peer, req in (("aiperf", "aiperf==0.13.0"), ("guidellm", "guidellm==0.8.1")):
        (row,) = [r for r in result["rows"] if r["metric"] == f"side by side with {peer}"]
        assert row["ours"] is None and row["note"].startswith(f"skipped: {req} is not "
                                                              "installed")
    assert result["machine"]["cores"] >= 1
    assert len(result["loadavg_after"]) == 3
    rows = result["rows"]
    benches = {r["bench"] for r in rows}
    assert benches == {"controller", "engines", "tracer", "plots", "sim", "ray", "load",
                       "task cost", "agents", "conversations", "server state", "areal",
                       "rl"}
    failed = [r for r in rows if r["metric"] == "benchmark failed"]
    assert not failed, failed
    for r in rows:
        assert set(r) == ROW_KEYS
        assert isinstance(r["metric"], str) and r["metric"]
        if r["bench"] == "ray" or (r["bench"] in ("load", "areal") and r["ours"] is None):
            # skipped at smoke size (ray; the load side by side with vllm bench serve), or
            # with no AReaL venv
            assert r["ours"] is None and "skipped" in r["note"]
            continue
        assert isinstance(r["ours"], float) and math.isfinite(r["ours"])
        difference = "added latency per call" in r["metric"]  # may dip below 0 in noise
        if not difference:
            assert r["ours"] > 0
        if r["baseline"] is not None:
            assert math.isfinite(r["baseline"])
            if difference:  # no ratio of a difference at or below 0
                assert r["ratio"] is None or (r["baseline"] > 0 and r["ratio"] > 0)
            else:
                assert r["baseline"] > 0 and r["ratio"] is not None and r["ratio"] > 0
        assert r["met"] in (True, False, None)
        if r["met"] is not None:
            assert r["target"]
    # The printed table is the same Markdown table as in the JSON, one line per row.
    table = result["table"].splitlines()
    assert table[0].startswith("| bench | metric | rollout_kit | baseline | ratio |")
    assert len(table) == 2 + len(rows)
    assert result["table"] in proc.stdout
    # Every row of issue 9 that can run at smoke size is present.
    metrics = " ".join(r["metric"] for r in rows)
    for needle in ("tasks/s, conc 64", "client-added latency median", "µs per session",
                   "bytes per finished session", "DataFrames from the in-memory tracer",
                   "from Parquet", "plot_timeline", "server CPU µs per request",
                   "max event-loop lag",
                   "pacing: achieved / offered", "chat calls in-process",
                   "tool-using agent", "local endpoint, added latency per call",
                   "RL loop: ms per step", "RL loop: async"):
        assert needle in metrics, needle


def test_only_selects_and_rejects_unknown(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    ok = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--smoke",
                         "--only", "tracer", "--json", str(out)],
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert {r["bench"] for r in json.loads(out.read_text())["rows"]} == {"tracer"}
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--smoke",
                          "--only", "nope"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "unknown benchmark" in bad.stderr


def test_the_docs_name_every_benchmark() -> None:
    """docs/performance.md's ``--only`` row and its sections name run_all's benchmarks, all."""
    run_all = load_script("bench/run_all.py")
    doc = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    [only] = [line for line in doc.splitlines() if line.startswith("| `--only A,B` |")]
    assert re.findall(r"`(\w+)`", only.split("a subset of", 1)[1]) == list(run_all.BENCHES)
    sections = re.findall(r"^### (.+)$", doc.split("## What each benchmark measures", 1)[1]
                          .split("\n## ", 1)[0], re.M)
    assert [s.replace(" ", "_") for s in sections] == list(run_all.BENCHES)


def test_markdown_summary_and_no_remembered_baseline(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--smoke",
                           "--only", "tracer", "--markdown", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    summary = result["summary"].splitlines()
    assert summary[0] == "| metric | rollout_kit | baseline, same run | ratio | target | met? |"
    assert result["summary"] in proc.stdout
    # AReaL's row: measured in this run or not at all (smoke size: not run), never a number
    # carried over from elsewhere
    areal = [r for r in result["rows"] if "vs AReaL" in r["metric"]]
    assert len(areal) == 1 and areal[0]["baseline"] is None and areal[0]["ratio"] is None
    assert "not run at smoke size" in areal[0]["note"]
    assert any("not measured: not run at smoke size" in line for line in summary)
    persist = [r for r in result["rows"] if "with a trace file (Tracer(path" in r["metric"]]
    assert len(persist) == 1 and persist[0]["target"] == "file ≤ 1.3× memory"


def test_write_block_replaces_between_markers(tmp_path: Path) -> None:
    run_all = load_script("bench/run_all.py")
    doc = tmp_path / "README.md"
    doc.write_text("# x\n\n<!-- bench:summary:begin -->\nold\n<!-- bench:summary:end -->\ntail\n")
    run_all.write_block(doc, run_all.SUMMARY_MARKERS, "| new |\n")
    assert doc.read_text() == ("# x\n\n<!-- bench:summary:begin -->\n| new |\n"
                               "<!-- bench:summary:end -->\ntail\n")
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match="bench:summary:begin"):
        run_all.write_block(bare, run_all.SUMMARY_MARKERS, "x")


def test_a_peer_that_is_not_installed_says_why(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    peers = load_script("bench/peers.py")
    monkeypatch.setenv("ROLLOUT_KIT_PEERS_CACHE", str(tmp_path))
    why = peers.ensure("guidellm", install=False)
    assert why is not None and why.startswith("guidellm==0.8.1 is not installed")
    assert str(tmp_path / "guidellm" / "venv") in why
    monkeypatch.setenv("ROLLOUT_KIT_PEERS_INSTALL", "0")
    why = peers.ensure("aiperf", install=True)
    assert why is not None and "ROLLOUT_KIT_PEERS_INSTALL=0" in why
    assert not (tmp_path / "aiperf").exists()  # nothing installed
    # a run that cannot start gives a result that says why instead of raising
    run = peers.run_peer("aiperf", "http://127.0.0.1:9", "m", tmp_path, 10.0, 5, tmp_path, 4, 2)
    assert run.error and not run.sustained(0.98) and run.frac == 0.0
