"""Every fenced block of README.md and docs/ runs here as a user would paste it, or says why not.

A page's Python blocks run in order in one namespace (a notebook of the page), against
simulated servers on 127.0.0.1 in a fresh folder; top-level ``await`` / ``async with`` run on
one event loop per page, plain blocks outside any loop (a script). What a page says is given
(``data``, ``workflow``, a trace file) is made by the block's ``before`` code; the only edits
are ``replace`` pairs: this run's server addresses for the page's, and smaller sizes where a
page's numbers take minutes. ``after`` checks what the block claims. A block with no entry in
:data:`PLAN` fails the test: a new snippet is run here, or its entry says why it is not.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "tracing" / "data"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Run:
    """Run the block: ``before`` first, then the block with ``replace`` applied, then ``after``."""

    before: str = ""
    replace: tuple[tuple[str, str], ...] = ()
    after: str = ""
    pytest: bool = False  # a test file: run by pytest in a subprocess


@dataclass(frozen=True)
class NotRun:
    """Why the block is not executed here (a command that is the suite itself, a diagram)."""

    why: str


VLLM = ('"127.0.0.1:8000"', "_vllm.addresses[0]")
VLLM_URL = ("http://127.0.0.1:8000", "{_vllm.urls[0]}")
SGLANG = ('"127.0.0.1:30000"', "_sglang.addresses[0]")
SINGLE_TURN = """
import rollout_kit as rk
from rollout_kit import RolloutController
from rollout_kit.examples import exact_match_reward, make_problems
data = make_problems(20, seed=0)
workflow = rk.SingleTurnWorkflow(exact_match_reward, rk.GenerationConfig(max_new_tokens=16))
"""
RECORDED = SINGLE_TURN + """
await _record_run("{}")
ctl = RolloutController(vllm=_vllm.addresses)
"""
NOTEBOOK = "import contextlib\nstack = contextlib.AsyncExitStack()"
REWARD_CHECKS = """
assert reward_fn("What is 1+1?", "The answer is 12.", [], [], answer="2") == 0.0
assert reward_fn("What is 1+1?", "The answer is 2.", [], [], answer="2") == 1.0
assert reward_fn("Tell me a story", "Once upon a time.", [], []) == 0.0
"""
SERVER_VIEW = SINGLE_TURN + """
ctl = RolloutController(vllm=_vllm.addresses)
n_requests = len(data)
from rollout_kit.plotting import plot_timeline
"""
SERVER_VIEW_EDITS = (("OtlpReceiver().start()", "_rx"),  # the one the simulator exports to
                     ('"http://127.0.0.1:4318/v1/traces"', "_rx2.endpoint"))
COMPARE = """
import shutil
from rollout_kit import RolloutController, Tracer
await _record_run("run/traces.jsonl")
shutil.copy(_DATA / "vllm-bench-sim.json", "bench.json")
"""
SHARED_CONVERSATIONS = """
import json
turns = [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello"},
         {"from": "human", "value": "what is 2+2?"}, {"from": "gpt", "value": "4"}]
json.dump([{"id": str(i), "conversations": turns} for i in range(3)], open("sharegpt.json", "w"))
json.dump([{"id": "a", "messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "hello"},
                                    {"role": "user", "content": "bye"}]}],
          open("sharegpt_conv_128.json", "w"))
with open("agent.jsonl", "w") as fh:
    for t, n in ((0, 900), (1500, 1400)):
        fh.write(json.dumps({"session_id": "s1", "timestamp": t, "input_length": n,
                             "output_length": 40, "hash_ids": [7, 8]}) + "\\n")
"""
PYTEST_FILE = """
import pytest
import rollout_kit as rk
from rollout_kit.examples import exact_match_reward

def MyWorkflow():
    return rk.SingleTurnWorkflow(exact_match_reward)
"""

RL_LOOP = SINGLE_TURN + """
ctl = RolloutController(sglang=_sglang.addresses)
prompts = data
reward_fn = exact_match_reward

async def my_train_step(batch, step):
    pass

train_step = my_train_step

async def update_weights(controller, version):
    pass
"""
RL_SIZES = (("steps=40, batch_size=32", "steps=3, batch_size=4"),)

AREAL = ("needs AReaL 1.0.4 and torch, in a venv of their own: tests/areal/inside/"
         "test_areal_on_sim.py runs these calls there")

#: (page, fenced-block index) -> what to do with it
PLAN: dict[tuple[str, int], Run | NotRun] = {
    ("README.md", 0): NotRun("scripts/demo is tests/test_demo.py's; scripts/test is this suite"),
    ("README.md", 1): Run(before=NOTEBOOK,
                          after=REWARD_CHECKS + "assert all(r.ok for r in results + batch)"),
    ("README.md", 2): Run(replace=(VLLM,), after="assert len(ctl.sessions()) >= 4"),
    ("README.md", 3): Run(before=SINGLE_TURN, replace=(VLLM,), after=(
        "assert len(calls) == 20 and df['identical'].all() and len(df) == 2")),
    ("README.md", 4): Run(before=RL_LOOP, replace=RL_SIZES, after=(
        "assert list(run.steps['status']) == ['ok'] * 3 and len(per_step) == 3")),
    ("README.md", 5): Run(before=SERVER_VIEW, replace=SERVER_VIEW_EDITS),
    ("README.md", 6): NotRun("a diagram"),
    ("README.md", 7): NotRun("the benchmarks: tests/test_bench_smoke.py runs run_all.py --smoke"),
    ("README.md", 8): NotRun("a synopsis of the commands; tests/test_cli*.py run each of them"),
    ("README.md", 9): Run(before=COMPARE),
    ("README.md", 10): Run(before=RECORDED.format("yesterday/traces.jsonl"),
                          after="assert len(run.frame) == len(reqs) == 20"),
    ("README.md", 11): Run(pytest=True, before=PYTEST_FILE),
    ("docs/guides/agents.md", 0): Run(before="import rollout_kit as rk", replace=(VLLM,)),
    ("docs/guides/agents.md", 1): Run(after=(
        "assert [r.ok for r in results] == [True, True]\n"
        "assert [r.trajectory['rewards'] for r in results] == [[1.0] * 4] * 2")),
    ("docs/guides/agents.md", 2): Run(),
    ("docs/architecture.md", 0): NotRun("a diagram"),
    ("docs/architecture.md", 1): NotRun("a diagram"),
    ("docs/guides/areal.md", 0): NotRun("installs AReaL: tests/areal/conftest.py builds that venv"),
    ("docs/guides/areal.md", 1): NotRun(AREAL),
    ("docs/guides/areal.md", 2): NotRun(AREAL),
    ("docs/guides/areal.md", 3): NotRun(AREAL),
    ("docs/guides/async_rl.md", 0): Run(before=RL_LOOP + "addresses = _sglang.addresses",
                                        replace=RL_SIZES,
                                        after="assert list(run.steps.index) == [0, 1, 2]"),
    ("docs/guides/async_rl.md", 1): NotRun("a formula"),
    ("docs/guides/cli.md", 0): NotRun("a synopsis of the commands; tests/test_cli*.py run them"),
    ("docs/guides/cli.md", 1): Run(before=COMPARE),
    ("docs/guides/conversation_load.md", 0): NotRun(
        "minutes at these sizes; tests/test_cli_load_conversations.py runs it with its defaults"),
    ("docs/guides/conversation_load.md", 1): NotRun("the output of the command above"),
    ("docs/guides/conversation_load.md", 2): Run(replace=(
        VLLM, ("synthetic_conversations(200,", "synthetic_conversations(6,"),
        ('think_time="exponential:2"', 'think_time="exponential:0.05"'),
        ("Arrivals(rate=2.0)", "Arrivals(rate=50.0)")),
        after="assert run.metrics()['completed_conversations'] == 6"),
    ("docs/guides/conversation_load.md", 3): Run(),
    ("docs/guides/conversation_load.md", 4): Run(before=SHARED_CONVERSATIONS),
    ("docs/guides/load.md", 0): NotRun("tests/test_cli_load.py runs load with these flags"),
    ("docs/guides/load.md", 1): Run(before=RECORDED.format("unused/traces.jsonl"), replace=(
        ("num=200", "num=20"),)),
    ("docs/guides/load.md", 2): Run(before=RECORDED.format("yesterday/traces.jsonl")),
    ("docs/guides/notebook.md", 0): Run(before=NOTEBOOK, after=REWARD_CHECKS),
    ("docs/guides/quickstart.md", 0): NotRun("scripts/demo is tests/test_demo.py's; scripts/test "
                                             "is this suite"),
    ("docs/guides/quickstart.md", 1): NotRun("installs the package: scripts/setup does it"),
    ("docs/guides/quickstart.md", 2): Run(after=REWARD_CHECKS),
    ("docs/guides/replay.md", 0): Run(before=SINGLE_TURN, replace=(VLLM,), after=(
        "assert len(calls) == 20 and df['identical'].all() and len(df) == 2")),
    ("docs/guides/server-view.md", 0): Run(before=SERVER_VIEW, replace=SERVER_VIEW_EDITS),
    ("docs/guides/server-view.md", 1): Run(  # SGLang's meta_info: no OTLP needed
        before=SINGLE_TURN + """
from rollout_kit import analysis
from rollout_kit.analysis import why_slow
from rollout_kit.plotting import plot_timeline
ctl = RolloutController(sglang=_sglang.addresses)
await ctl.rollout_batch_async(data, workflow)
""", after="assert (ctl.sessions()['server_e2e_s'] > 0).all()"),
    ("docs/guides/testing-workflows.md", 0): Run(pytest=True, before=PYTEST_FILE),
    ("docs/index.md", 0): Run(replace=(SGLANG,), after="assert results[0].ok"),
    ("docs/performance.md", 0): NotRun("the benchmarks: tests/test_bench_smoke.py runs --smoke"),
    ("docs/performance.md", 1): NotRun("needs the peers' venvs and the vLLM CPU server"),
    ("docs/guides/server-state.md", 0): Run(before=SINGLE_TURN + "data = make_problems(50, seed=0)",
                                     replace=(VLLM,),
                                     after="assert len(frame) and len(wide)"),
    ("docs/guides/server-state.md", 1): Run(),
    ("docs/guides/server-state.md", 2): Run(
        before="rx = _rx\nawait rx.wait_for_async(50, trace_prefix=ctl.tracer.trace_prefix)",
        after="assert view.sessions['server_queue_s'].notna().all() and len(table)"),
    ("docs/testing.md", 0): NotRun("scripts/mutation runs for minutes (not in CI)"),
}


def _pages() -> list[Path]:
    pages = [ROOT / "README.md"]
    for folder, dirs, files in os.walk(ROOT / "docs"):
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
        pages += [Path(folder) / f for f in files if f.endswith(".md")]
    return sorted(pages)


def _blocks(page: Path) -> list[tuple[int, str, str, int]]:
    """(index, language, code, line) of each fenced block but the benchmark tables."""
    text = page.read_text(encoding="utf-8")
    return [(i, m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2)
            for i, m in enumerate(FENCE.finditer(text)) if "bench:" not in m.group(2)]


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


PAGES = [p for p in _pages() if any(
    isinstance(PLAN.get((_rel(p), i)), Run) for i, *_ in _blocks(p))]


def test_every_block_has_a_plan_and_every_plan_a_block() -> None:
    blocks = {(_rel(p), i) for p in _pages() for i, *_ in _blocks(p)}
    assert not blocks - PLAN.keys(), "run these blocks here, or say why not (PLAN)"
    assert not PLAN.keys() - blocks, "these blocks are gone (PLAN)"
    for key, plan in PLAN.items():
        for old, _new in plan.replace if isinstance(plan, Run) else ():
            code = next(c for p in _pages() if _rel(p) == key[0]
                        for i, _, c, _ in _blocks(p) if i == key[1])
            assert old in code, f"{key}: {old!r} is not in the block"


def _compile(code: str, where: str) -> Any:
    return compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _exec(runner: asyncio.Runner, code: str, where: str, ns: dict[str, Any]) -> None:
    result = eval(_compile(code, where), ns)  # the page's own code
    if inspect.iscoroutine(result):
        runner.run(result)


@pytest.fixture
def page_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             sim_servers: Any) -> Iterator[dict[str, Any]]:
    from rollout_kit.otel import OtlpReceiver

    monkeypatch.chdir(tmp_path)
    with OtlpReceiver() as rx, OtlpReceiver() as rx2:
        vllm = sim_servers("vllm", n=1, otlp_traces_endpoint=rx.endpoint,
                           prompt_tokens_details=True)
        sglang = sim_servers("sglang", n=2)

        async def record_run(path: str) -> None:
            import rollout_kit as rk
            from rollout_kit.examples import exact_match_reward, make_problems

            Path(path).parent.mkdir(parents=True, exist_ok=True)
            async with rk.RolloutController(vllm=vllm.addresses,
                                            tracer=rk.Tracer(path=path)) as ctl:
                await ctl.rollout_batch_async(make_problems(20, seed=1), rk.SingleTurnWorkflow(
                    exact_match_reward, rk.GenerationConfig(max_new_tokens=16)))

        yield {"_vllm": vllm, "_sglang": sglang, "_rx": rx, "_rx2": rx2, "_DATA": DATA,
               "_record_run": record_run, "__name__": "__doc_snippet__"}


def _close(runner: asyncio.Runner, ns: dict[str, Any]) -> None:
    """Close what the page left open, each on the loop it is bound to."""
    from rollout_kit import RolloutController

    for value in list(ns.values()):
        if isinstance(value, RolloutController) and not value.closed:
            if value.binding.loop is runner.get_loop():
                runner.run(value.close_async())
            else:
                value.close()  # used from sync code: bound to this thread's private loop
        elif isinstance(value, AsyncExitStack):
            runner.run(value.aclose())


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_the_pages_python_blocks_run(page: Path, page_env: dict[str, Any],
                                     tmp_path: Path) -> None:
    ns = dict(page_env)
    with asyncio.Runner() as runner:
        try:
            for i, lang, code, line in _blocks(page):
                plan = PLAN[(_rel(page), i)]
                if not isinstance(plan, Run):
                    continue
                assert lang == "python", f"{_rel(page)}:{line} is a {lang!r} block"
                for old, new in plan.replace:
                    code = code.replace(old, new)
                where = f"{_rel(page)}:{line}"
                if plan.pytest:
                    _run_pytest(plan.before + "\n" + code, tmp_path, where)
                    continue
                if plan.before:
                    _exec(runner, textwrap.dedent(plan.before), f"{where} (before)", ns)
                _exec(runner, code, where, ns)
                if plan.after:
                    _exec(runner, textwrap.dedent(plan.after), f"{where} (after)", ns)
                plt.close("all")
        finally:
            _close(runner, ns)


def _run_pytest(code: str, folder: Path, where: str) -> None:
    test = folder / "test_snippet.py"
    test.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", str(test)], cwd=folder, capture_output=True,
                          text=True, timeout=240, check=False)
    passed = re.search(r"(\d+) passed", proc.stdout)
    ran = sum(line.startswith(("def test_", "async def test_")) for line in code.splitlines())
    assert proc.returncode == 0 and passed and int(passed.group(1)) == ran, \
        f"{where}:\n{proc.stdout}"  # every test of the block ran and passed
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
