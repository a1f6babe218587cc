"""``rollout-kit load``: vllm bench serve flags, summary and result keys, against the sim."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_kit._cli import main
from rollout_kit.sim import serve_in_thread

pytestmark = pytest.mark.timeout(120)

# `vllm bench serve --save-result` keys (vLLM 0.32, no --save-detailed), from
# ../shared/reference/load-tools-and-simulator.md §E
VLLM_KEYS = {
    "backend", "burstiness", "completed", "date", "duration", "endpoint_type", "failed",
    "label", "latencies", "max_concurrency", "max_concurrent_requests",
    "max_output_tokens_per_s", "mean_itl_ms", "mean_tpot_ms", "mean_ttft_ms", "median_itl_ms",
    "median_tpot_ms", "median_ttft_ms", "model_id", "num_prompts", "output_throughput",
    "p99_itl_ms", "p99_tpot_ms", "p99_ttft_ms", "queue_times", "request_goodput",
    "request_rate", "request_throughput", "rtfx", "std_itl_ms", "std_tpot_ms", "std_ttft_ms",
    "tokenizer_id", "total_input_tokens", "total_output_tokens", "total_token_throughput",
}
DETAILED = {"input_lens", "output_lens", "ttfts", "itls", "start_times", "errors"}
FAST = ["--random-input-len", "16", "--random-output-len", "4", "--disable-tqdm"]


@pytest.fixture(scope="module")
def vllm_sim() -> Iterator[str]:
    with serve_in_thread("vllm", time_scale=0.02, model_name="tiny") as cluster:
        yield str(cluster.addresses[0])


@pytest.fixture(scope="module")
def sglang_sim() -> Iterator[str]:
    with serve_in_thread("sglang", time_scale=0.02) as cluster:
        yield str(cluster.addresses[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_prints_vllm_summary_and_saves_vllm_keys(vllm_sim: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--base-url", f"http://{vllm_sim}", "--model", "tiny", "--num-prompts",
               "40", "--request-rate", "200", "--seed", "3", "--goodput", "ttft:1000",
               "tpot:1000", "--save-result", "--result-dir", str(tmp_path / "res"),
               "--result-filename", "r.json", *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    for line in ("=========== Serving Benchmark Result ===========", "Successful requests:",
                 "Failed requests:", "Request rate configured (RPS):", "Benchmark duration (s):",
                 "Request throughput (req/s):", "Request goodput (req/s):", "Median TTFT (ms):",
                 "P99 TPOT (ms):", "Mean ITL (ms):", "Median E2EL (ms):", "P99 send lag (ms):"):
        assert line in out, line
    assert out.index("Successful requests:") < out.index("Median TTFT (ms):")
    res = json.loads((tmp_path / "res" / "r.json").read_text())
    assert VLLM_KEYS <= set(res), VLLM_KEYS - set(res)
    assert not DETAILED & set(res)
    assert res["completed"] == 40 and res["failed"] == 0 and res["num_prompts"] == 40
    assert res["request_rate"] == 200.0 and res["burstiness"] == 1.0
    assert res["backend"] == res["endpoint_type"] == "vllm" and res["model_id"] == "tiny"
    assert res["max_concurrency"] is None
    assert res["total_input_tokens"] == 40 * 16 and res["total_output_tokens"] == 40 * 4
    assert len(res["latencies"]) == 40 and all(x > 0 for x in res["latencies"])
    assert math.isclose(res["request_throughput"], 40 / res["duration"])
    assert res["request_goodput"] == pytest.approx(res["request_throughput"])  # loose SLOs
    assert res["median_ttft_ms"] <= res["p99_ttft_ms"] and res["median_tpot_ms"] > 0
    assert res["achieved_rate"] > 0 and res["p99_send_lag_ms"] >= 0
    assert res["max_concurrent_requests"] >= 1 and res["max_output_tokens_per_s"] >= 1
    assert f"{res['median_ttft_ms']:<10.2f}" in out  # the table prints the saved numbers


def test_detailed_warmup_concurrency_and_default_file_name(
        vllm_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--backend", "vllm", "--host", vllm_sim.split(":")[0], "--port",
               vllm_sim.split(":")[1], "--model", "tiny", "--num-prompts", "20", "--warmup",
               "5", "--max-concurrency", "4", "--save-result", "--save-detailed",
               "--result-dir", str(tmp_path), "--label", "mine", "--metadata", "gpu=none",
               *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Maximum request concurrency:             4" in out
    assert "Request rate configured" not in out  # inf, as vllm prints it
    (path,) = tmp_path.glob("mine-infqps-concurrency4-tiny-*.json")
    res = json.loads(path.read_text())
    assert res["completed"] == 20  # the 5 warm-up requests are left out
    assert res["request_rate"] == "inf" and res["max_concurrency"] == 4
    assert res["label"] == "mine" and res["gpu"] == "none"
    assert DETAILED <= set(res)
    assert len(res["ttfts"]) == len(res["itls"]) == len(res["input_lens"]) == 20
    assert set(res["input_lens"]) == {16} and set(res["output_lens"]) == {4}
    assert all(len(gaps) == 3 for gaps in res["itls"])  # 4 tokens -> 3 gaps
    assert res["max_concurrent_requests"] <= 4
    assert max(res["queue_times"]) > 0  # waited for a slot


def test_the_servers_model_names_the_result_and_new_folders_are_made(
        vllm_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No --model: the model the server lists (its /v1/models) is the result's model_id and
    part of its file name; --trace-path and --result-dir may name folders not made yet."""
    rc = main(["load", "--base-url", vllm_sim, "--num-prompts", "5", "--save-result",
               "--result-dir", str(tmp_path / "res"), "--trace-path",
               str(tmp_path / "det" / "traces.jsonl"), *FAST])
    assert rc == 0, capsys.readouterr().out
    (path,) = (tmp_path / "res").glob("vllm-infqps-tiny-*.json")
    res = json.loads(path.read_text())
    assert res["model_id"] == "tiny" and res["tokenizer_id"] == "tiny"
    assert (tmp_path / "det" / "traces.jsonl").stat().st_size > 0


def test_sglang_backend_and_sim_option(sglang_sim: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--backend", "sglang", "--base-url", sglang_sim, "--num-prompts", "10",
               "--request-rate", "100", "--burstiness", "inf", *FAST])
    assert rc == 0
    assert "Successful requests:                     10" in capsys.readouterr().out
    rc = main(["load", "--backend", "sglang", "--base-url", sglang_sim, "--num-prompts", "10",
               "--request-rate", "100", "--transport", "aiohttp", *FAST])
    assert rc == 0
    assert "Successful requests:                     10" in capsys.readouterr().out
    rc = main(["load", "--sim", "--sim-time-scale", "0.02", "--backend", "sglang",
               "--num-prompts", "10", "--request-rate", "100", "--save-result",
               "--request-logprobs",  # the RL-style request (return_logprob) works too
               "--result-dir", str(tmp_path), "--result-filename", "s.json", *FAST])
    assert rc == 0
    assert json.loads((tmp_path / "s.json").read_text())["completed"] == 10


def test_sweep_rates_writes_one_line_per_level(vllm_sim: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--base-url", vllm_sim, "--model", "tiny", "--num-prompts", "20",
               "--sweep", "50,100", "--save-result", "--result-dir", str(tmp_path),
               "--result-filename", "sweep.json", *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    header = out.splitlines()[0].split()
    assert header[:3] == ["level", "offered/s", "achieved/s"] and "saturated" in header
    lines = (tmp_path / "sweep.json").read_text().splitlines()
    levels = [json.loads(line) for line in lines]
    assert [x["request_rate"] for x in levels] == [50.0, 100.0]
    for x in levels:
        assert VLLM_KEYS <= set(x)
        assert x["completed"] == 20 and x["saturated"] is False


def test_sweep_concurrency(vllm_sim: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--base-url", vllm_sim, "--model", "tiny", "--num-prompts", "12",
               "--sweep-concurrency", "1,4", *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert [r[0] for r in rows] == ["1", "4"]


def test_jsonl_dataset(vllm_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hello there", "output_tokens": 3}\n'
                    '{"prompt": "What is 2+2?", "output_tokens": 5}\n')
    rc = main(["load", "--base-url", vllm_sim, "--model", "tiny", "--dataset-name", "jsonl",
               "--dataset-path", str(data), "--num-prompts", "4", "--ignore-eos",
               "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir",
               str(tmp_path), "--result-filename", "j.json"])
    assert rc == 0, capsys.readouterr()
    res = json.loads((tmp_path / "j.json").read_text())
    assert res["completed"] == 4 and set(res["output_lens"]) <= {3, 5}  # 2 lines, oversampled
    assert res["total_output_tokens"] == sum(res["output_lens"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--request-rate", "0"], "--request-rate must be > 0"),
    (["--request-rate", "nan"], "--request-rate must be > 0"),
    (["--burstiness", "0"], "--burstiness must be > 0"),
    (["--burstiness", "-1"], "--burstiness must be > 0"),
    (["--num-prompts", "0"], "--num-prompts must be >= 1"),
    (["--max-concurrency", "0"], "--max-concurrency must be >= 1"),
    (["--sweep", ","], "--sweep needs at least one level"),
    (["--sweep", "5,x"], "--sweep: 'x' is not a number"),
    (["--sweep", "5,-1"], "every level must be > 0"),
    (["--sweep-concurrency", "1.5"], "--sweep-concurrency: '1.5' is not a number"),
    (["--goodput", "latency:5"], "unknown goodput SLO name 'latency'"),
    (["--goodput", "ttft"], "is not NAME:MILLISECONDS"),
    (["--percentile-metrics", "ttft,foo"], "unknown metric(s) ['foo']"),
    (["--metric-percentiles", "0"], "is not in (0, 100]"),
    (["--random-range-ratio", "1"], "--random-range-ratio must be in [0, 1)"),
    (["--dataset-name", "sharegpt"], "needs --dataset-path"),
    (["--ramp-up-strategy", "linear"], "needs --ramp-up-start-rps"),
    (["--base-url", "ftp://x:1"], "the scheme must be http:// or https://"),
    (["--metadata", "novalue"], "use KEY=VALUE"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rollout-kit: error: ") and message in err, err
    assert err.count("\n") == 1


def test_malformed_and_empty_dataset_name_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n')
    assert main(["load", "--sim", "--dataset-name", "jsonl", "--dataset-path", str(bad),
                 "--disable-tqdm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl:2" in err, err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["load", "--sim", "--dataset-name", "jsonl", "--dataset-path", str(empty),
                 "--disable-tqdm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty.jsonl" in err, err


def test_no_server_is_one_line_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    rc = main(["load", "--port", str(port), "--num-prompts", "3", *FAST])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("rollout-kit: error: ") and err.count("\n") == 1, err
    assert str(port) in err


def test_load_help_is_light(tmp_path: Path) -> None:
    code = ("import sys\nfrom rollout_kit._cli import main\n"
            "try:\n    main(['load', '--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = ('pandas', 'aiohttp', 'numpy', 'rollout_kit._controller', 'tqdm')\n"
            "print('HEAVY=' + ','.join(m for m in heavy if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=True)
    assert "--request-rate" in proc.stdout and "--sweep" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "HEAVY=", proc.stdout


def test_failure_lines_name_the_status_the_table_does_not_count() -> None:
    """After Ctrl-C the table says 'Failed requests: 0'; the cut requests are 'cancelled',
    not 'failed'; each line carries the most common message of its reason."""
    import pandas as pd

    from rollout_kit._cli.load_summary import failure_lines

    frame = pd.DataFrame({
        "status": ["accepted", "cancelled", "cancelled", "failed", "failed", "failed"],
        "reason": [None, "interrupted", "interrupted", "server_error", "server_error", None],
        "error": [None, None, None, "HTTP 500: boom", "HTTP 500: boom", None],
        "warmup": [False] * 6})
    assert failure_lines(frame) == ["cancelled: 2 × interrupted",
                                    "failed: 2 × server_error: HTTP 500: boom",
                                    "failed: 1 × no reason given"]
    assert failure_lines(frame.assign(warmup=True)) == []
