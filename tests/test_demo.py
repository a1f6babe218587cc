"""``rollout-kit demo`` end to end with small settings, plus controller ↔ simulator runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rollout_kit import GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit._cli import main
from rollout_kit.examples import exact_match_reward, make_answer_fn, make_problems
from rollout_kit.tracing import load_traces

pytestmark = pytest.mark.timeout(60)


def test_demo_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["demo", "--tasks", "24", "--n-samples", "2", "--concurrency", "8",
               "--time-scale", "0.002", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "24 tasks" in text and "accepted=24" in text and "p50=" in text
    assert "workers:  tasks per worker: " in text and "sglang=12" in text and "vllm=12" in text
    assert "servers:  samples per server: " in text and "reasons:" not in text
    tasks = pd.read_csv(out / "tasks.csv", index_col="task_id")
    assert sorted(tasks.index) == list(range(24))
    loaded = load_traces(out / "traces.jsonl")
    assert sorted(loaded.tasks.index) == list(range(24))
    assert (out / "timeline.png").stat().st_size > 1000
    [wrote] = [line for line in text.splitlines() if line.startswith("wrote:")]
    assert wrote.split(None, 1)[1].split(", ") == [  # every file it wrote
        str(out / f) for f in ("traces.jsonl", "traces.parquet", "tasks.csv", "timeline.png")]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["traces.jsonl", "traces.parquet", "tasks.csv", "timeline.png"])
    # refuses to overwrite without --force
    assert main(["demo", "--tasks", "2", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rollout-kit: error: ") and "--force" in err and err.count("\n") == 1


def test_demo_helpers() -> None:
    probs = make_problems(5, seed=1)
    assert probs == make_problems(5, seed=1)
    always = make_answer_fn(1.0, 0)
    never = make_answer_fn(0.0, 0)
    for p in probs:
        right = always(p["prompt"])
        assert exact_match_reward(p["prompt"], right, [], [], answer=p["answer"]) == 1.0
        wrong = never(p["prompt"])
        assert exact_match_reward(p["prompt"], wrong, [], [], answer=p["answer"]) == 0.0


async def test_controller_against_simulators_ids_everywhere(sim_servers) -> None:
    answer = make_answer_fn(1.0, 0)  # the plugin's simulated servers (zero latency)
    sg = sim_servers("sglang", n=2, answer_fn=answer)
    vl = sim_servers("vllm", n=1, answer_fn=answer)
    async with RolloutController(sglang=sg.addresses, vllm=vl.addresses) as ctl:
        wf = SingleTurnWorkflow(exact_match_reward, GenerationConfig(max_new_tokens=32))
        probs = make_problems(12, seed=3)
        explicit = ctl.submit(probs[0], wf, task_id=100)
        ids = [ctl.submit(p, wf) for p in probs[1:]]
        res = await ctl.wait_async()
        assert sorted(r.task_id for r in res) == sorted([explicit, *ids])
        assert all(r.ok and r.trajectory["rewards"] == [1.0] for r in res)
        tasks, sessions, spans = ctl.traces(), ctl.sessions(), ctl.spans()
        assert sorted(tasks.index) == sorted([explicit, *ids])
        assert set(sessions.index.get_level_values(0)) == set(tasks.index)
        assert set(spans["task_id"]) == set(tasks.index)
        assert set(tasks["worker"]) == {"sglang", "vllm"}
        servers = set(sessions["server"])
        assert servers <= set(sg.addresses) | set(vl.addresses) and len(servers) == 3
        batch = await ctl.rollout_batch_async(probs[:4], wf)
        assert [r.task_id for r in batch] == list(range(11, 15))
