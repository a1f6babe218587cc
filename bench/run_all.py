"""Run every rollout_kit benchmark and print ONE Markdown table.

Each row is rollout_kit next to a baseline measured side by side in the same run
(interleaved rounds, medians, min–max spread); ``ratio`` is always "higher is better for
rollout_kit". A header gives the machine; the time and the load average before and after
are printed below it.

    .venv/bin/python bench/run_all.py                 # default sizes (a few minutes, 2 cores)
    .venv/bin/python bench/run_all.py --full          # large sizes
    .venv/bin/python bench/run_all.py --smoke         # tiny sizes, seconds (tests use it)
    .venv/bin/python bench/run_all.py --only tracer,sim --json out.json
    .venv/bin/python bench/run_all.py --write-readme  # and put this run's tables in the docs
    .venv/bin/python bench/run_all.py --setup-areal   # make AReaL's bench environment, once

``--markdown`` also prints the README's short table (the rows of :data:`README_ROWS`);
``--write-readme`` writes it into README.md's Performance section and the full table into
docs/performance.md, both between their ``<!-- bench:… -->`` markers, with the command that
reproduces the run (its size and ``--only``; no output paths) and the machine (cores, CPU,
RAM, Python, OS): every number and every baseline in them comes from that one run. The time
and the load average are printed and kept in the ``--json`` file, not in the documents.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import areal_env
from _common import Row, Size, machine, render_summary, render_table

__all__ = ["BENCHES", "README_ROWS", "main", "run", "write_block"]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PERFORMANCE_DOC = ROOT / "docs" / "performance.md"
SUMMARY_MARKERS = ("<!-- bench:summary:begin -->", "<!-- bench:summary:end -->")
TABLE_MARKERS = ("<!-- bench:table:begin -->", "<!-- bench:table:end -->")

# name -> module; in table order
BENCHES: dict[str, str] = {
    "controller": "bench_controller",  # rows 1 and 9
    "engines": "bench_engines",        # row 2
    "tracer": "bench_tracer",          # rows 3, 4, 5
    "plots": "bench_plots",            # row 6
    "sim": "bench_sim",                # row 7
    "ray": "bench_ray",                # row 8
    "load": "bench_load",              # side by side with vllm bench serve; pacing
    "task_cost": "bench_task_cost",    # a task's own cost without a network
    "agents": "bench_agents",          # agents: chat calls, a tool-using agent, the endpoint
    "conversations": "bench_conversations",  # multi-turn load paced as offered
    "server_state": "bench_server_state",    # scraping cost, metric rows' size
    "areal": "bench_areal_workflows",  # AReaL's own workflows through agenerate
    "rl": "bench_rl",                  # the RL loop's cost, async vs sync speedup
}


#: the README's rows: (bench, text in the metric, only rows that have a target)
README_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("tracer", "vs AReaL", False),
    ("tracer", "with a trace file (Tracer(path", False),
    ("tracer", "bytes per finished session", False),
    ("tracer", "DataFrames from the in-memory tracer", False),
    ("tracer", "frames from Parquet", False),
    ("plots", "plot_timeline", True),
    ("engines", "client-added latency median", True),
    ("sim", "(vllm, zero-latency) req/s", False),
    ("controller", "tasks/s", True),
    ("controller", "max event-loop lag", True),
    ("task cost", "µs per task", True),
    ("task cost", "flatness", True),
    ("ray", "tasks/s", False),
    ("load", "highest Poisson rate", False),
    ("load", "client CPU µs per request at Poisson", True),
    ("load", "pacing: send lag p99", True),
)


def readme_rows(rows: Sequence[Row]) -> list[Row]:
    """The rows of :data:`README_ROWS`, in its order."""
    out: list[Row] = []
    for bench, text, targeted in README_ROWS:
        out += [r for r in rows if r.bench == bench and text in r.metric
                and (r.target or not targeted) and r not in out]
    return out


def write_block(path: Path, markers: tuple[str, str], text: str) -> None:
    """Replace what lies between the two marker lines of ``path`` with ``text``.

    Raises:
        SystemExit: ``path`` does not hold both markers, in order.
    """
    doc = path.read_text()
    begin, end = markers
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{path}: add the lines {begin} and {end} where the table goes")
    path.write_text(doc[:i + len(begin)] + "\n" + text.rstrip("\n") + "\n" + doc[j:])


def run(size: Size, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the selected benchmarks; returns ``{"machine", "command", "rows", ...}``."""
    names = list(only) if only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}")
    before = machine()
    rows: list[Row] = []
    timings: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        print(f"[run_all] {name} …", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(BENCHES[name])
            rows += module.rows(size)
        except Exception as exc:  # one failing benchmark must not hide the others
            traceback.print_exc()
            rows.append(Row(name, "benchmark failed", None, note=f"{type(exc).__name__}: {exc}"))
        timings[name] = round(time.perf_counter() - t0, 1)
        print(f"[run_all] {name} done in {timings[name]} s, load {os.getloadavg()[0]:.2f}",
              file=sys.stderr, flush=True)
    return {"size": size, "machine": before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "seconds": timings, "rows": [r.as_dict() for r in rows]}


def machine_line(result: dict[str, Any]) -> str:
    """The machine, as the documents give it: cores, CPU, RAM, Python, OS."""
    m = result["machine"]
    return (f"Machine: {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, Python "
            f"{m['python']}, {m.get('os') or m['platform']}.")


def load_line(result: dict[str, Any]) -> str:
    """The time and the load average before and after the run (printed, not documented)."""
    la, lb = result["machine"]["loadavg"], result["loadavg_after"]
    return (f"{result['machine']['time']}; load average (1/5/15 min) before "
            f"{la[0]}/{la[1]}/{la[2]}, after {lb[0]}/{lb[1]}/{lb[2]}.")


def doc_command(size: str, only: Sequence[str]) -> str:
    """The command that reproduces a run: its size and selection, no output flags or paths."""
    return " ".join(["bench/run_all.py", f"--{size}", *([f"--only {','.join(only)}"]
                                                       if only else [])])


def header(result: dict[str, Any], command: str) -> str:
    """The Markdown lines above the full table: command, machine, wall time per benchmark."""
    walls = ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items())
    return (f"`{command}`\n\n{machine_line(result)} Ratio: higher is better for rollout_kit "
            f"(baseline cost ÷ ours, or our rate ÷ baseline rate). Wall time per benchmark: "
            f"{walls}.")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="default sizes (a few minutes)")
    g.add_argument("--full", action="store_true", help="large sizes")
    g.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {list(BENCHES)}")
    ap.add_argument("--markdown", action="store_true",
                    help="also print the README's short table of this run")
    ap.add_argument("--write-readme", action="store_true",
                    help="write this run's short table into README.md and its full table "
                         "into docs/performance.md (between their bench markers)")
    ap.add_argument("--setup-areal", action="store_true",
                    help="make the bench environment for AReaL's SessionTracer, then exit")
    args = ap.parse_args(argv)
    if args.setup_areal:
        reason = areal_env.setup()
        print(reason or f"AReaL bench environment ready: {areal_env.python()}",
              file=sys.stderr if reason else sys.stdout)
        return 1 if reason else 0
    size: Size = "smoke" if args.smoke else "full" if args.full else "quick"
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    result = run(size, only)
    result["machine"]["os"] = f"{platform.system()} {platform.machine()}"
    result["command"] = doc_command(size, only)
    result["header"] = header(result, result["command"])
    rows = [Row(**r) for r in result["rows"]]
    result["table"] = render_table(rows)
    summary = render_summary(readme_rows(rows))
    result["summary"] = summary
    print(result["header"])
    print(load_line(result))
    print()
    print(result["table"])
    if args.markdown or args.write_readme:
        print()
        print(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    if args.write_readme:
        write_block(README, SUMMARY_MARKERS,
                    f"`{result['command']}`. {machine_line(result)}\n\n{summary}")
        write_block(PERFORMANCE_DOC, TABLE_MARKERS, f"{result['header']}\n\n{result['table']}")
        print(f"[run_all] wrote {README.name} and {PERFORMANCE_DOC.relative_to(ROOT)}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
