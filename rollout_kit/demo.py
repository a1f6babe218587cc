"""``rollout-kit demo``: RLVR-style rollouts end to end, with traces, a summary and a plot.

Starts simulated SGLang and vLLM servers on 127.0.0.1 (or uses ``--sglang``/``--vllm``
addresses of real ones), runs arithmetic prompts ("What is 17+25?") through a
:class:`~rollout_kit.controller.RolloutController` with a :class:`SingleTurnWorkflow` and an
exact-match reward, shows a progress bar, prints a summary and writes ``traces.jsonl``,
``tasks.csv`` and ``timeline.png`` into the output folder.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ._loop import run_sync
from ._paths import prepare_output_dir
from .config import ExecutorConfig, GenerationConfig
from .controller import RolloutController
from .errors import ConfigError
from .io import RolloutResult
from .workflows import SingleTurnWorkflow

__all__ = ["add_arguments", "exact_match_reward", "make_answer_fn", "make_problems", "run"]

_PROMPT_RE = re.compile(r"What is (\d+)\s*([+\-*])\s*(\d+)\?")
_INT_RE = re.compile(r"-?\d+")


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to ``parser``."""
    parser.add_argument("--tasks", type=int, default=200, help="number of prompts (200)")
    parser.add_argument("--n-samples", type=int, default=2, help="samples per prompt (2)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="max concurrent rollouts per worker (32)")
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="simulator latency scale; 1.0 = realistic (0.25)")
    parser.add_argument("--p-correct", "--accuracy", dest="p_correct", type=float,
                        default=0.7,
                        help="probability the simulated model answers correctly, the "
                             "simulator's accuracy (0.7; the simulators started here only)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument("--out", default="rollout-kit-out",
                        help="output folder (rollout-kit-out)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty output folder")
    parser.add_argument("--sglang", nargs="+", default=[], metavar="URL",
                        help="real SGLang servers instead of the simulator")
    parser.add_argument("--vllm", nargs="+", default=[], metavar="URL",
                        help="real vLLM servers instead of the simulator")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def make_problems(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` arithmetic prompts with their answers (seeded)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        op = rng.choice("+-*")
        ans = a + b if op == "+" else a - b if op == "-" else a * b
        out.append({"prompt": f"What is {a}{op}{b}?", "answer": str(ans)})
    return out


def make_answer_fn(p_correct: float, seed: int) -> Callable[[str], str]:
    """An ``answer_fn``: right with probability ``p_correct``, else off by one.

    The simulator's built-in answer model does this by default (``serve(accuracy=...)``,
    ``rollout-kit sim --accuracy``), which is what the demo uses; this function is for
    ``answer_fn`` users (notebooks, ``LocalEngine``) who want the old per-prompt call counter.
    """
    calls: dict[str, int] = {}

    def answer(prompt: str) -> str:
        m = _PROMPT_RE.search(prompt)
        if m is None:
            return "I don't know."
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        k = calls.get(prompt, 0)
        calls[prompt] = k + 1
        if random.Random(f"{seed}:{prompt}:{k}").random() >= p_correct:
            value += 1
        return f"The answer is {value}."

    return answer


def exact_match_reward(prompt: str, completion: str, prompt_ids: list[int],
                       completion_ids: list[int], answer: str = "", **_: Any) -> float:
    """1.0 when the last integer in the completion equals ``answer``."""
    del prompt, prompt_ids, completion_ids
    nums = _INT_RE.findall(completion)
    return 1.0 if nums and nums[-1] == answer else 0.0




@contextlib.asynccontextmanager
async def _servers(args: argparse.Namespace) -> AsyncIterator[tuple[list[str], list[str]]]:
    if args.sglang or args.vllm:
        yield list(args.sglang), list(args.vllm)
        return
    from .sim import serve

    # the simulator's own answer model: what `rollout-kit sim --accuracy P` also serves
    sim = {"time_scale": args.time_scale, "accuracy": args.p_correct, "seed": args.seed}
    async with serve("sglang", n=1, **sim) as sg, serve("vllm", n=1, **sim) as vl:
        yield list(sg.addresses), list(vl.addresses)


async def _main(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from tqdm.auto import tqdm

    problems = make_problems(args.tasks, args.seed)
    workflow = SingleTurnWorkflow(
        exact_match_reward, GenerationConfig(n_samples=args.n_samples, max_new_tokens=32))
    async with _servers(args) as (sg, vl):
        ctl = RolloutController(sglang=sg, vllm=vl, trace_path=out / "traces.jsonl",
                                executor_config=ExecutorConfig(
                                    max_concurrent_rollouts=args.concurrency))
        async with ctl:
            t0 = time.perf_counter()
            for item in problems:
                ctl.submit(item, workflow)
            results: list[RolloutResult] = []
            with tqdm(total=len(problems), desc="rollouts", unit="task",
                      disable=args.no_progress) as bar:
                while len(results) < len(problems):
                    got = await ctl.wait_async(1)
                    results.extend(got)
                    bar.update(len(got))
            wall = time.perf_counter() - t0
            tasks = ctl.traces()
            sessions = ctl.sessions()
            spans = ctl.spans()
    rewards = [x for r in results if r.ok for x in r.trajectory["rewards"]]
    return {"results": results, "wall": wall, "tasks": tasks, "sessions": sessions,
            "spans": spans, "rewards": rewards}


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the process exit code."""
    out = Path(args.out)
    for name in ("tasks", "n_samples", "concurrency"):
        if getattr(args, name) < 1:
            _out(f"error: --{name.replace('_', '-')} must be >= 1")
            return 2
    try:
        prepare_output_dir(out, args.force)
    except ConfigError as exc:
        _out(f"error: {exc}")
        return 2
    r = run_sync(_main(args, out), what="rollout-kit demo")
    tasks = r["tasks"]
    counts = tasks["status"].value_counts().to_dict()
    total_s = tasks["total_s"].dropna()
    _out(f"\n{len(tasks)} tasks in {r['wall']:.2f} s -> {len(tasks) / r['wall']:.1f} tasks/s")
    _out("status:   " + ", ".join(f"{k}={counts.get(k, 0)}"
                                  for k in ("accepted", "rejected", "failed", "cancelled")))
    if len(total_s):
        q = total_s.quantile([0.5, 0.9, 0.99])
        _out(f"latency:  p50={q[0.5] * 1e3:.1f} ms  p90={q[0.9] * 1e3:.1f} ms  "
             f"p99={q[0.99] * 1e3:.1f} ms")
    if r["rewards"]:
        _out(f"reward:   mean={sum(r['rewards']) / len(r['rewards']):.3f} over "
             f"{len(r['rewards'])} samples")
    if "worker" in tasks.columns:
        per_worker = tasks["worker"].value_counts()
        _out("workers:  " + ", ".join(f"{k}={v}" for k, v in per_worker.items()))
    sessions = r["sessions"]
    if "server" in sessions.columns:
        per = sessions["server"].value_counts()
        _out("servers:  " + ", ".join(f"{k}={v}" for k, v in per.items()))
    tasks.to_csv(out / "tasks.csv")
    written = ["traces.jsonl", "tasks.csv"]
    from .plotting import plot_timeline, save_plot

    save_plot(plot_timeline, out / "timeline.png", r["spans"], tasks=tasks, figsize=(10, 6),
              dpi=110)
    written.append("timeline.png")
    _out(f"wrote:    {', '.join(str(out / w) for w in written)}")
    return 0
