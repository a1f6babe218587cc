"""AReaL's own ``RLVRWorkflow`` through ``engine.agenerate`` vs rollout_kit's
``SingleTurnWorkflow``: tasks/s on the same zero-latency simulator (its own process), same
prompt ids (AReaL's chat template, tokenized once), same sampling (greedy, 16 new tokens),
interleaved rounds, one ``RolloutController``. Target: ≥ 0.9×.

AReaL's workflow does more per episode than the request: its reward runs in a process pool
(``AsyncRewardWrapper``), it decodes prompt and completion and builds six torch tensors. The
row's note gives AReaL's own episodes/s with an engine that answers at once (no HTTP, no
rollout_kit), so a shortfall can be told apart from rollout_kit's cost; a second row times
the boundary alone (AReaL's request through ``agenerate`` vs rollout_kit's through
``generate_async``, one call per episode).

Runs in the AReaL venv (``rollout_kit.testing._areal_env``, made by the test command or
``python -c "from rollout_kit.testing._areal_env import ensure_areal_env; ensure_areal_env()"``);
without it the row is skipped with the reason.

    .venv/bin/python bench/bench_areal_workflows.py [--smoke|--quick|--full]
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from _common import Row, Size, check, print_rows, sim_process, size_from_args, spread

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "areal_workflows_child.py"
SIZES = {"smoke": (64, 1), "quick": (512, 3), "full": (2048, 5)}
METRIC = "AReaL's RLVRWorkflow via agenerate, tasks/s (zero-latency sim)"


def rows(size: Size) -> list[Row]:
    from rollout_kit.testing._areal_env import areal_env_ready, default_areal_cache_dir

    cache = default_areal_cache_dir()
    model = cache / "tiny-llama"
    if not areal_env_ready(cache / "venv") or not (model / "tokenizer.json").is_file():
        return [Row("areal", METRIC, None, note="skipped: no AReaL venv (the test command "
                                                "makes it: tests/areal_own)")]
    n, rounds = SIZES[size]
    with sim_process("--api", "sglang", "--zero-latency", "--tokenizer", str(model)) as (url, _):
        out = subprocess.run(
            [str(cache / "venv" / "bin" / "python"), str(CHILD), url, str(model), str(n),
             str(rounds)], capture_output=True, text=True, check=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    res = json.loads(out.stdout.strip().splitlines()[-1])
    med = res["median"]
    ratio = med["areal"] / med["ours"]
    boundary = med["agenerate"] / med["generate_async"]
    return [Row("areal", METRIC, med["areal"], med["ours"], "SingleTurnWorkflow, same run",
                ratio, "ratio ≥ 0.9", check(ratio, ">=", 0.9), spread(res["areal"]),
                note=f"{n} prompts × {rounds} rounds; AReaL's workflow alone (instant "
                     f"engine, no HTTP): {med['areal_alone']:.0f} episodes/s"),
            Row("areal", "AReaL's request via agenerate, tasks/s (zero-latency sim)",
                med["agenerate"], med["generate_async"], "generate_async, same run",
                boundary, "", None, spread(res["agenerate"]),
                note="one call per episode, nothing else: the boundary's own cost")]


if __name__ == "__main__":
    print_rows(rows(size_from_args(None, __doc__ or "")[0]))
