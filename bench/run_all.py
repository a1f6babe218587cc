"""Run every rollout_kit benchmark and print ONE Markdown table (issue 9).

Each row is rollout_kit next to a baseline measured side by side in the same run
(interleaved rounds, medians, min–max spread); ``ratio`` is always "higher is better for
rollout_kit". A header gives the machine and the load average before and after.

    .venv/bin/python bench/run_all.py                 # default sizes (a few minutes, 2 cores)
    .venv/bin/python bench/run_all.py --full          # large sizes
    .venv/bin/python bench/run_all.py --smoke         # tiny sizes, seconds (tests use it)
    .venv/bin/python bench/run_all.py --only tracer,sim --json out.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, Size, machine, render_table

__all__ = ["BENCHES", "main", "run"]

# name -> module; in table order (issue 9's rows 1..9 are spread over these).
BENCHES: dict[str, str] = {
    "controller": "bench_controller",  # rows 1 and 9
    "engines": "bench_engines",        # row 2
    "tracer": "bench_tracer",          # rows 3, 4, 5
    "plots": "bench_plots",            # row 6
    "sim": "bench_sim",                # row 7
    "ray": "bench_ray",                # row 8
    "load": "bench_load",              # issue 16: side by side with vllm bench serve, pacing
    "task_cost": "bench_task_cost",    # issue 20: a task's own cost without a network
}


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


def header(result: dict[str, Any], command: str) -> str:
    """The Markdown lines above the table: command, machine, load."""
    m = result["machine"]
    la, lb = m["loadavg"], result["loadavg_after"]
    return (f"`{command}` — {m['time']}\n\n"
            f"Machine: {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, Python "
            f"{m['python']}, {m['platform']}. Load average (1/5/15 min) before "
            f"{la[0]}/{la[1]}/{la[2]}, after {lb[0]}/{lb[1]}/{lb[2]}. "
            f"Ratio: higher is better for rollout_kit (baseline cost ÷ ours, or our rate ÷ "
            f"baseline rate). Wall time per benchmark (s): {result['seconds']}.")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="default sizes (a few minutes)")
    g.add_argument("--full", action="store_true", help="large sizes")
    g.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {list(BENCHES)}")
    args = ap.parse_args(argv)
    size: Size = "smoke" if args.smoke else "full" if args.full else "quick"
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    result = run(size, only)
    command = "bench/run_all.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result["command"] = command.strip()
    result["header"] = header(result, result["command"])
    rows = [Row(**r) for r in result["rows"]]
    result["table"] = render_table(rows)
    print(result["header"])
    print()
    print(result["table"])
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
