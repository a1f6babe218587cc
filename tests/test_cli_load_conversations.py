"""``rollout-kit load`` with conversations: vllm bench serve's chat backend and endpoint names,
the multi-turn options, the conversation summary and result keys, bad options as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout_kit._cli import main

pytestmark = pytest.mark.timeout(120)

FAST = ["--sim", "--sim-time-scale", "0.02", "--disable-tqdm", "--random-input-len", "64",
        "--random-output-len", "4"]


def test_chat_backend_runs_conversations_and_saves_their_keys(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
               "--multi-turn", "--num-turns", "3", "--think-time", "uniform:0.005,0.01",
               "--system-prompt-len", "32", "--num-prompts", "10", "--request-rate", "50",
               "--goodput", "ttft:10000", "--save-result", "--result-dir", str(tmp_path),
               "--result-filename", "c.json", *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Successful requests:                     30" in out  # every turn a request
    assert "Successful conversations:                10" in out
    assert "Cache hit ratio, later turns:" in out
    res = json.loads((tmp_path / "c.json").read_text())
    assert res["backend"] == "openai-chat" and res["completed"] == 30
    assert res["completed_conversations"] == 10 and res["turns_per_conversation"] == 3
    assert res["conversation_goodput"] > 0 and res["cache_hit_ratio"] > 0
    assert res["offered_rate"] == pytest.approx(50.0)
    assert len(res["latencies"]) == 30


def test_chat_backend_alone_sends_one_turn_conversations(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--backend", "vllm-chat", "--num-prompts", "5", *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Successful conversations:                5" in out
    assert "Turns per conversation:                  1.00" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--backend", "vllm", "--endpoint", "/v1/chat/completions"],
     "--backend vllm serves /v1/completions (the chat API: --backend openai-chat)"),
    (["--backend", "vllm", "--multi-turn"], "which --backend vllm does not speak"),
    (["--backend", "openai-chat", "--think-time", "uniform:-1,2"], "negative"),
    (["--backend", "openai-chat", "--num-turns", "0"], "--num-turns must be >= 1"),
    (["--backend", "vllm", "--think-time", "1"], "--think-time applies to conversations"),
    (["--backend", "openai-chat", "--sweep", "1,2"], "takes one --request-rate"),
    (["--backend", "openai-chat", "--dataset-name", "prefix_repetition"],
     "has no conversations"),
])
def test_bad_conversation_options_are_one_line(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", *argv, *FAST])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("rollout-kit: error: ") and err.count("\n") == 1, err
    assert message in err, err


def test_help_documents_the_conversation_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["load", "--help"])
    out = capsys.readouterr().out
    for opt in ("--endpoint", "--multi-turn", "--num-turns", "--think-time",
                "--system-prompt-len", "openai-chat"):
        assert opt in out


def test_the_guides_command_with_its_defaults_fits_the_simulator(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Default turn lengths: a 4-turn history stays inside the simulator's 4,096 tokens."""
    rc = main(["load", "--sim", "--backend", "openai-chat", "--endpoint",
               "/v1/chat/completions", "--multi-turn", "--num-prompts", "3",
               "--request-rate", "inf", "--sim-time-scale", "0.02", "--disable-tqdm"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Successful conversations:                3" in out
    assert "Turns per conversation:                  4.00" in out and "failed:" not in out


def test_no_whole_conversation_fails_the_run_with_the_servers_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every conversation outgrows the context at its 4th turn: its earlier turns completed,
    yet the run exits 1, and the summary and the result name the server's own message."""
    rc = main(["load", "--backend", "openai-chat", "--multi-turn", "--num-prompts", "3",
               "--request-rate", "inf", "--save-result", "--save-detailed",
               "--result-dir", str(tmp_path), "--result-filename", "c.json",
               "--sim", "--sim-time-scale", "0.02", "--disable-tqdm",
               "--random-input-len", "1200", "--random-output-len", "4"])
    captured = capsys.readouterr()
    assert rc == 1, captured.out
    assert "Successful requests:                     9" in captured.out
    assert "Successful conversations:                0" in captured.out
    line = next(x for x in captured.out.splitlines() if x.startswith("failed: "))
    assert line.startswith("failed: 3 × engine_error: ") and "HTTP 400" in line
    assert "maximum context length is 4096 tokens" in line
    assert captured.err == ("rollout-kit: error: none of the 3 conversations completed; the "
                            "reasons are above\n")
    res = json.loads((tmp_path / "c.json").read_text())
    [failure] = res["failures"]
    assert failure["reason"] == "engine_error" and failure["count"] == 3
    assert "maximum context length is 4096 tokens" in failure["error"]
    assert sum("maximum context length" in e for e in res["errors"]) == 3
    assert res["errors"].count("") == 9


def _trace(tmp_path: Path, sessions: int) -> Path:
    path = tmp_path / "agent.jsonl"
    path.write_text("".join(
        json.dumps({"session_id": f"s{s}", "timestamp": 40 * s + 30 * t,
                    "input_length": 60 + 50 * t, "output_length": 4}) + "\n"
        for s in range(sessions) for t in range(2)))
    return path


def test_a_trace_replays_its_own_sessions_unless_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = ["load", "--backend", "openai-chat", "--dataset-name", "agent_trace",
             "--dataset-path", str(_trace(tmp_path, 1)), "--sim", "--sim-time-scale", "0.02",
             "--disable-tqdm", "--save-result", "--result-dir", str(tmp_path)]
    rc = main([*trace, "--result-filename", "own.json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Successful conversations:                1" in out  # not the default 1,000
    assert "Successful requests:                     2" in out
    assert json.loads((tmp_path / "own.json").read_text())["num_prompts"] == 1
    rc = main([*trace, "--num-prompts", "3", "--result-filename", "three.json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Successful conversations:                3" in out  # asked: oversampled


def test_a_warmup_as_long_as_the_trace_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "--backend", "openai-chat", "--dataset-name", "agent_trace",
               "--dataset-path", str(_trace(tmp_path, 2)), "--warmup", "2", *FAST])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "holds 2 session(s); --warmup 2 leaves none to measure" in err
