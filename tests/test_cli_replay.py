"""``rollout-kit replay``: counts, the non-identical calls, the frame file, one-line errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rollout_kit import GenerationConfig, RolloutController, SingleTurnWorkflow
from rollout_kit._cli import main
from rollout_kit.sim import SimCluster, serve_in_thread
from rollout_kit.testing import fast_engine_config

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    with serve_in_thread("vllm", zero_latency=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def dump(sim: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dump")
    wf = SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(n_samples=2, max_new_tokens=8))
    with RolloutController(vllm=sim.addresses, dump=path,
                           engine_config=fast_engine_config()) as ctl:
        assert all(r.ok for r in ctl.rollout_batch(["a story", "a poem"], wf))
    return path


def test_identical_replay_exits_0_and_writes_the_frame(dump: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    out = tmp_path / "new" / "frame.csv"  # its folder is made
    assert main(["replay", str(dump), "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout.splitlines() == [
        "4 calls: 4 identical, 0 diverged, 0 failed, 0 not replayed"]
    frame = pd.read_csv(out)
    assert len(frame) == 4 and frame["status"].eq("identical").all()
    assert f"wrote {out}" in stderr


def test_differences_exit_1_and_are_listed(dump: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with serve_in_thread("vllm", zero_latency=True, honor_seed=False) as deaf:
        code = main(["replay", str(dump), "--task-ids", "1,7", "--vllm",
                     deaf.addresses[0], "--show", "1"])
    stdout, stderr = capsys.readouterr()
    assert code == 1
    assert stdout.splitlines()[0] == "3 calls: 0 identical, 2 diverged, 0 failed, 1 not replayed"
    assert "does not honour seeds" in stdout or "not in the dump" in stdout
    assert "2 more non-identical calls" in stderr


@pytest.mark.parametrize("argv,message", [
    (["--task-ids", "x"], "--task-ids must be comma-separated ints"),
    (["--out", "frame.txt"], "--out must end in .csv, .jsonl or .parquet"),
    (["--concurrency", "0"], "--concurrency must be >= 1"),
])
def test_bad_options_are_one_line(dump: Path, argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(dump), *argv]) == 2
    stdout, stderr = capsys.readouterr()
    assert stderr.splitlines() == [stderr.strip()] and message in stderr
    assert "Traceback" not in stderr and stdout == ""


def test_a_missing_dump_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    _, stderr = capsys.readouterr()
    assert stderr.startswith("rollout-kit: error: dump file") and stderr.count("\n") == 1
