"""Mutation testing of the core modules with mutmut 3 (not in CI: it is long).

    scripts/mutation                      every module below (tracing whole, not per file)
    scripts/mutation ids analysis         some of them
    scripts/mutation --list               the modules, the files they mutate, their tests
    scripts/mutation --src DIR ids        DIR's sources and tests (e.g. ``git archive`` of an
                                          older commit), to measure a "before"
    scripts/mutation --jobs 2 ...         mutmut workers (default 2)
    scripts/mutation --budget 600 ...     stop a module after that many seconds (partial)
    scripts/mutation --work DIR ...       work directories under DIR (default .mutation)
    scripts/mutation --survivors ...      print the diff of each surviving mutant
    scripts/mutation --again ...          keep the work directory: re-test the survivors and
                                          the mutants a partial run did not reach
    scripts/mutation --test-timeout 30    a test of the work copy fails after that many
                                          seconds (a mutant that hangs; 0: the tests' own)

Each module runs in its own work directory ``.mutation/<module>/`` (gitignored, made afresh
each run): a copy of ``rollout_kit/``, ``tests/`` and ``pyproject.toml`` with a
``[tool.mutmut]`` section that names the files to mutate and the fast unit tests that cover
them. mutmut writes its ``mutants/`` copy there, never in the working tree. mutmut 3 runs
the selection once to learn which tests call which function, then runs each mutant against
only the tests that reach its function. Everything runs under ``nice -n 10``.

The report: a table on stdout and ``.mutation/<module>/report.json`` (counts, score, the
surviving mutants). The score is killed / all mutants, where a timeout counts as killed and a
mutant no test reaches ("no tests") as surviving.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"


@dataclass(frozen=True)
class Module:
    """What one mutation run mutates and which tests it runs."""

    files: tuple[str, ...]
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()  # pytest -k expressions of slow tests left out


_TRACING = ("tracer", "live", "store", "frames", "scopes")
# parts of tracing that are packages: every module of the package
_TRACING_PACKAGES = {"store", "frames"}


def _tracing_files(m: str) -> str:
    # the implementation modules are private: tracing/_tracer.py, tracing/_store/*.py (a
    # pattern as mutmut reads it, fnmatch's: ``*`` matches into sub-packages too)
    return (f"rollout_kit/tracing/_{m}/*.py" if m in _TRACING_PACKAGES
            else f"rollout_kit/tracing/_{m}.py")


# the whole folder (all fast) but the plots of imported files and the import-cycle check: a
# new test file there joins the selection without changing it (mutmut resets every result
# when the selection changes, so that --again keeps what earlier runs found)
_TRACING_TESTS = ("tests/tracing",)
_TRACING_SLOW = ("plots_of_imported_files", "import_cycle")
_REMOTE_TESTS = ("tests/engines/test_remote.py", "tests/engines/test_remote_edges.py")
# the trajectory dump and the traceparent header of generate_async are tested there
_REMOTE_REPLAY_TESTS = ("tests/test_replay.py", "tests/test_otel.py")

MODULES: dict[str, Module] = {
    "ids": Module(("rollout_kit/_ids.py",), ("tests/test_ids.py",)),
    "analysis": Module(("rollout_kit/analysis/*.py",),
                       ("tests/test_analysis.py", "tests/test_analysis_edges.py")),
    "engines.routing": Module(("rollout_kit/engines/_routing.py",),
                              ("tests/engines/test_http_units.py",
                               "tests/engines/test_routing.py")),
    "engines.http": Module(("rollout_kit/engines/_http.py",),
                           ("tests/engines/test_http_units.py", "tests/engines/test_http_edges.py",
                            *_REMOTE_TESTS),
                           ("thousand_concurrent",)),
    "engines.remote": Module(("rollout_kit/engines/_remote.py",),
                             (*_REMOTE_TESTS, *_REMOTE_REPLAY_TESTS),
                             ("thousand_concurrent", "ray_workers", "timeline_draws")),
    "executor": Module(("rollout_kit/_executor/*.py",),
                       ("tests/test_executor.py", "tests/test_executor_edges.py")),
    "tracing": Module(tuple(_tracing_files(m) for m in _TRACING), _TRACING_TESTS,
                      _TRACING_SLOW),
    "load": Module(("rollout_kit/load/_metrics.py", "rollout_kit/load/_arrivals.py"),
                   ("tests/load", "tests/test_load_otel_replay_edges.py")),
    "otel": Module(("rollout_kit/otel/_join.py", "rollout_kit/otel/_spans.py"),
                   ("tests/test_otel.py", "tests/test_load_otel_replay_edges.py")),
    "replay": Module(("rollout_kit/replay/_compare.py", "rollout_kit/replay/_calls.py"),
                     ("tests/test_replay.py", "tests/test_replay_edges.py",
                      "tests/test_load_otel_replay_edges.py")),
    # one module of it at a time (the whole is ~3,000 mutants)
    **{f"tracing.{m}": Module((_tracing_files(m),), _TRACING_TESTS, _TRACING_SLOW)
       for m in _TRACING},
}

# mutmut exit codes -> status (mutmut.stats.status_by_exit_code, kept here so that a
# report can be read without importing mutmut)
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
           34: "skipped", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout",
           255: "timeout", 37: "caught by type check", -11: "segfault", -9: "segfault",
           2: "interrupted", None: "not checked"}
_KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


# appended to the work copy's tests/conftest.py: a mutant that makes a test hang costs
# this many seconds, not the test's own (generous) timeout
_TIMEOUT_CAP = """

# -- added by scripts/mutation (work copy only) --
def pytest_collection_modifyitems(items):  # noqa: D103
    for item in items:
        item.add_marker(pytest.mark.timeout({seconds}), append=False)
"""


def prepare(name: str, module: Module, src: Path, root: Path, *,
            again: bool = False, test_timeout: float | None = None) -> tuple[Path, list[str]]:
    """Make ``<root>/<name>/`` afresh from ``src`` (with ``again``: update it in place, so
    mutmut keeps its mutants and results); return it and the tests it runs. With
    ``test_timeout``, every test of the copy times out after that many seconds."""
    work = root / name
    if work.exists() and not again:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for sub in ("rollout_kit", "tests"):  # copy2 keeps mtimes: unchanged files stay so
        shutil.copytree(src / sub, work / sub, ignore=ignore, dirs_exist_ok=True)
    conftest = work / "tests" / "conftest.py"
    if test_timeout is not None and conftest.is_file():
        conftest.write_text(conftest.read_text() + _TIMEOUT_CAP.format(seconds=test_timeout))
    tests = [t for t in module.tests if (src / t).exists()]  # files or folders
    if not tests:
        raise SystemExit(f"{name}: none of its tests exist under {src}")
    select = list(tests)
    if module.deselect:
        select += ["-k", " and ".join(f"not {k}" for k in module.deselect)]
    pyproject = (src / "pyproject.toml").read_text()
    if "[tool.mutmut]" in pyproject:
        raise SystemExit(f"{src}/pyproject.toml has a [tool.mutmut] section: this script "
                         "writes its own")
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["rollout_kit"]\n'
        f"only_mutate = {_toml_list(list(module.files))}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(select)}\n"
        "use_git_change_detection = false\n"
    )
    (work / "pyproject.toml").write_text(pyproject)
    return work, tests


def run(name: str, work: Path, jobs: int, budget: float | None,
        only: list[str] | None = None) -> tuple[float, bool, int]:
    """``mutmut run`` in ``work`` under nice (only the mutants ``only`` when given);
    (wall seconds, stopped by the budget, rc)."""
    mutmut = Path(sys.executable).with_name("mutmut")
    cmd = ["nice", "-n", "10", str(mutmut), "run", "--max-children", str(jobs), *(only or [])]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.monotonic()
    log = (work / "mutmut.log").open("w")
    proc = subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    stopped = False
    try:
        proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        stopped = True
        os.killpg(proc.pid, signal.SIGINT)  # mutmut stops its workers and keeps the results
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        log.close()
    print(f"  {name}: mutmut exited {proc.returncode} after {time.monotonic() - t0:.0f} s "
          f"(log: {work / 'mutmut.log'})", flush=True)
    return time.monotonic() - t0, stopped, proc.returncode


def collect(work: Path, module: Module) -> dict[str, object]:
    """Counts per status and the surviving mutants, from mutmut's ``.meta`` files."""
    counts: dict[str, int] = {}
    survivors: list[str] = []
    unchecked: list[str] = []
    per_file: dict[str, dict[str, int]] = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        rel = meta.relative_to(work / "mutants").as_posix().removesuffix(".meta")
        if not any(fnmatch.fnmatch(rel, p) for p in module.files):  # as mutmut matches
            continue
        data = json.loads(meta.read_text())
        fc = per_file.setdefault(rel, {"killed": 0, "total": 0})
        for key, code in sorted(data["exit_code_by_key"].items()):
            status = _STATUS.get(code, "suspicious")
            counts[status] = counts.get(status, 0) + 1
            fc["total"] += 1
            if status in _KILLED:
                fc["killed"] += 1
            elif status in ("survived", "no tests", "suspicious"):
                survivors.append(f"{key}: {status}")
            elif status in ("not checked", "interrupted"):
                unchecked.append(key)
    total = sum(counts.values())
    killed = sum(v for k, v in counts.items() if k in _KILLED)
    checked = total - counts.get("not checked", 0) - counts.get("interrupted", 0)
    return {"counts": counts, "total": total, "killed": killed, "checked": checked,
            "score": killed / checked if checked else None, "per_file": per_file,
            "survivors": survivors, "unchecked": unchecked}


def show_survivors(work: Path, survivors: list[str]) -> None:
    mutmut = Path(sys.executable).with_name("mutmut")
    for line in survivors:
        name = line.partition(": ")[0]
        out = subprocess.run([str(mutmut), "show", name], cwd=work, capture_output=True,
                             text=True, check=False)
        print(out.stdout.rstrip())
        print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE", help=", ".join(MODULES))
    ap.add_argument("--src", type=Path, default=ROOT,
                    help="tree holding rollout_kit/, tests/, pyproject.toml (default: this one)")
    ap.add_argument("--work", type=Path, default=WORK,
                    help="where the work directories go (default: .mutation)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per module before it is stopped (results so far are kept)")
    ap.add_argument("--survivors", action="store_true", help="print each survivor's diff")
    ap.add_argument("--again", action="store_true",
                    help="keep the work directory and re-test only the mutants that survived "
                         "the last run (after adding tests) and those it did not reach "
                         "(a partial run goes on)")
    ap.add_argument("--test-timeout", type=float, default=30.0,
                    help="seconds after which a test of the work copy fails (a mutant that "
                         "hangs; default 30); 0: the tests' own timeouts")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    names = args.modules or [n for n in MODULES if not n.startswith("tracing.")]
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    if args.list:
        for n in names:
            m = MODULES[n]
            print(f"{n}: mutates {', '.join(m.files)}\n    tests {' '.join(m.tests)}"
                  + (f" (without {', '.join(m.deselect)})" if m.deselect else ""))
        return 0
    src = args.src.resolve()
    rows = []
    for n in names:
        module = MODULES[n]
        previous = args.work.resolve() / n / "report.json"
        only = None
        if args.again:
            if not previous.is_file():
                raise SystemExit(f"{n}: --again needs an earlier run in {previous.parent}")
            last = json.loads(previous.read_text())
            only = [s.partition(": ")[0] for s in last["survivors"]]
            only += last.get("unchecked", [])
        work, tests = prepare(n, module, src, args.work.resolve(), again=args.again,
                              test_timeout=args.test_timeout or None)
        print(f"== {n}: {' '.join(module.files)} with {' '.join(tests)}"
              + (f" ({len(only)} survivors and unchecked again)" if only is not None else ""),
              flush=True)
        if only == []:
            continue
        wall, stopped, rc = run(n, work, args.jobs, args.budget, only)
        if args.again:  # the time of the whole module: the first run and this one
            wall += float(json.loads(previous.read_text())["wall_s"])
        report = collect(work, module)
        report.update(module=n, src=str(src), tests=tests, wall_s=round(wall, 1),
                      partial=stopped or report["checked"] != report["total"], rc=rc)
        (work / "report.json").write_text(json.dumps(report, indent=2))
        rows.append(report)
        for s in report["survivors"]:  # type: ignore[attr-defined]
            print(f"    {s}")
        if args.survivors:
            show_survivors(work, report["survivors"])  # type: ignore[arg-type]
    print("\n| module | mutants | checked | killed | score | wall |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        score = "n/a" if r["score"] is None else f"{100 * r['score']:.1f} %"  # type: ignore[operator]
        part = " (partial)" if r["partial"] else ""
        print(f"| {r['module']} | {r['total']} | {r['checked']} | {r['killed']} | {score}{part} "
              f"| {r['wall_s']:.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
