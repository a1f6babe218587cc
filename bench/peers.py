"""The other load tools of ``bench_load.py``: aiperf and guidellm, each in a
virtual environment of its own, their command lines and what their result files say.

Where things are (nothing here names a path of one machine): ``$ROLLOUT_KIT_PEERS_CACHE``,
default ``~/.cache/rollout-kit/peers``; each tool in ``<cache>/<tool>/venv``, made by
:func:`setup` with pip from the configured package index (extra pip arguments in
``$ROLLOUT_KIT_PEERS_PIP_ARGS``), its pip output in ``<cache>/<tool>/install.log``. The load
bench calls :func:`ensure` before its peer rows at ``--quick`` and ``--full`` size (it installs
a missing tool; ``ROLLOUT_KIT_PEERS_INSTALL=0`` turns that off), never at ``--smoke`` size;
``python bench/peers.py --setup`` installs both at once.

:func:`unavailable` says why a tool cannot run (``None``: it can); the bench then prints its
rows as skipped with that reason and goes on.

Each run of a tool is a process of its own; its CPU (user + system, its own processes and
every child it waited for) is the change of this process's ``RUSAGE_CHILDREN`` over the run.
Its per-request records are read with rollout_kit's own readers
(:func:`rollout_kit.tracing.read_aiperf`, :func:`~rollout_kit.tracing.read_guidellm`), so the
medians "from the per-request timestamps" are computed the same way for every tool, beside
the ones the tool itself reports.

Checked command lines (``shared/reference/load-tools-and-simulator.md`` §F): aiperf 0.13
``aiperf profile … --arrival-pattern poisson --request-count N --ui-type none
--no-server-metrics --no-gpu-telemetry`` (the hub-offline variables unset: with them aiperf
refuses a local tokenizer folder); guidellm 0.8.1 ``guidellm run --profile kind=poisson,rate=R
--constraint kind=max_requests,count=N … --output kind=json,path=F`` (0.8.1 has no
``benchmark`` command).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shlex
import subprocess
import sys
import time
import venv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rollout_kit import RolloutKitError
from rollout_kit.testing._venv import file_lock, tail

__all__ = ["PEERS", "SCHEDULE_FLOOR", "Peer", "PeerRun", "cache_dir", "ensure", "executable",
           "main", "measured", "run_peer", "setup", "unavailable", "venv_dir"]


@dataclass(frozen=True)
class Peer:
    """One other load tool: its name, the pip requirement and its console script."""

    name: str
    requirement: str
    script: str
    note: str  # what a reader of its rows must know
    #: whether its runs are judged against its own schedule's rate (see PeerRun.offered)
    own_schedule: bool = False
    #: installed with it: guidellm needs torch; pinned as the vLLM CPU venv pins it (the
    #: CPU build where the package index has one), not the CUDA wheels pip picks by default
    also: tuple[str, ...] = ()


PEERS: dict[str, Peer] = {
    "aiperf": Peer("aiperf", "aiperf==0.13.0", "aiperf",
                   "aiperf 0.13 (multi-process, ZMQ); it sees a zero-latency stream as one "
                   "chunk (TTFT = E2E), and re-tokenizes the output text itself",
                   own_schedule=True),
    "guidellm": Peer("guidellm", "guidellm==0.8.1", "guidellm",
                     "guidellm 0.8.1 (`guidellm run`: 0.8.1 has no `benchmark` command); its "
                     "Poisson waits repeat once per worker process (each seeds the same "
                     "generator), so it sends below the asked rate: left as it is, not tuned "
                     "around; its TPOT is E2E ÷ output tokens (first token included), its ITL "
                     "is vLLM's TPOT", also=("torch==2.13.0",)),
}
_MARKER = "rollout-kit-peer-ready.json"
#: the least fraction of the asked rate a run is judged against (PeerRun.offered)
SCHEDULE_FLOOR = 0.9
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


# -- where things are ---------------------------------------------------------------------
def cache_dir() -> Path:
    """``$ROLLOUT_KIT_PEERS_CACHE`` or ``~/.cache/rollout-kit/peers``."""
    env = os.environ.get("ROLLOUT_KIT_PEERS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rollout-kit" / "peers"


def venv_dir(name: str) -> Path:
    """The virtual environment of the tool ``name``."""
    return cache_dir() / name / "venv"


def executable(name: str) -> Path:
    """The tool's console script in its virtual environment."""
    return venv_dir(name) / "bin" / PEERS[name].script


def unavailable(name: str) -> str | None:
    """Why the tool ``name`` cannot run here, or ``None`` when it can."""
    peer = PEERS[name]
    marker = venv_dir(name) / _MARKER
    try:
        ready = json.loads(marker.read_text()).get("requirement") == peer.requirement
    except (OSError, ValueError, AttributeError):
        ready = False
    if not ready or not executable(name).is_file():
        return (f"{peer.requirement} is not installed (no finished install at "
                f"{venv_dir(name)}; `python bench/peers.py --setup {name}` or a --quick run "
                "of bench_load installs it)")
    return None


def _tail(path: Path, chars: int = 600) -> str:
    return tail(path, chars).strip().replace("\n", " / ")


def setup(name: str) -> str | None:
    """Create the tool's virtual environment and install it with pip (once: a finished
    install is kept); ``None`` on success, else why not (the tail of pip's output)."""
    peer = PEERS[name]
    if unavailable(name) is None:
        return None
    target = venv_dir(name)
    log = target.parent / "install.log"
    try:
        with file_lock(target.parent / "install.lock"):
            if unavailable(name) is None:  # another process finished it meanwhile
                return None
            (target / _MARKER).unlink(missing_ok=True)
            if not (target / "bin" / "python").is_file():
                venv.EnvBuilder(with_pip=True, clear=True).create(target)
            extra = shlex.split(os.environ.get("ROLLOUT_KIT_PEERS_PIP_ARGS", ""))
            env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            env.pop("PYTHONPATH", None)
            with log.open("w") as fh:
                for cmd in ([str(target / "bin" / "python"), "-m", "pip", "install", *extra,
                             peer.requirement, *peer.also],
                            [str(executable(name)), "--help"]):
                    fh.write(f"\n$ {shlex.join(cmd)}\n")
                    fh.flush()
                    proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                          stdin=subprocess.DEVNULL, timeout=1800, check=False)
                    if proc.returncode != 0:
                        return (f"installing {peer.requirement} failed (exit "
                                f"{proc.returncode}; log {log}): {_tail(log)}")
            (target / _MARKER).write_text(json.dumps(
                {"requirement": peer.requirement, "created": time.time()}) + "\n")
    except (OSError, RolloutKitError, subprocess.SubprocessError) as exc:
        return f"cannot install {peer.requirement} at {target}: {type(exc).__name__}: {exc}"
    return None


def ensure(name: str, install: bool) -> str | None:
    """``None`` when the tool can run (installing it first when ``install`` and allowed by
    ``$ROLLOUT_KIT_PEERS_INSTALL``), else why not."""
    reason = unavailable(name)
    if reason is None or not install:
        return reason
    if os.environ.get("ROLLOUT_KIT_PEERS_INSTALL", "1") == "0":
        return reason + " (ROLLOUT_KIT_PEERS_INSTALL=0: not installed by the bench)"
    return setup(name)


# -- running a tool --------------------------------------------------------------------------
def measured(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None
             ) -> tuple[subprocess.CompletedProcess[str] | None, float, float]:
    """Run ``cmd``; returns (the finished process or None when it timed out, CPU seconds
    of it and its waited-for children, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc: subprocess.CompletedProcess[str] | None = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, env=env,
            stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        proc = None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, cpu, wall


@dataclass
class PeerRun:
    """One run of a load tool at one rate.

    Attributes:
        tool: its name; rate and n: offered rate and requests asked for.
        cpu_s / wall_s: the process tree's CPU and the run's wall time.
        completed / failed: requests that finished, requests that did not (or were never
            sent: asked − listed).
        achieved: completed ÷ (last end − first start), from the per-request timestamps.
        scheduled: the rate of the tool's own schedule, (n − 1) ÷ the span of the times it
            meant to send at (aiperf's ``credit_issued_ns``, guidellm's ``targeted_start``).
        own: what the tool's own summary says (``throughput``, ``ttft_ms``, ``tpot_ms``,
            ``e2el_ms``; absent: not reported).
        stamps: the same medians from its per-request records (rollout_kit's frames:
            ``ttft_s``, ``tpot_s`` = (E2E − TTFT) / (out − 1), the task's ``run_s``).
        error: why the run gave no result (then the rest is empty).
    """

    tool: str
    rate: float
    n: int
    cpu_s: float = math.nan
    wall_s: float = math.nan
    completed: int = 0
    failed: int = 0
    achieved: float = math.nan
    scheduled: float = math.nan
    own: dict[str, float] = field(default_factory=dict)
    stamps: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def frac(self) -> float:
        """achieved ÷ offered (0 when nothing finished)."""
        return self.achieved / self.rate if math.isfinite(self.achieved) else 0.0

    @property
    def offered(self) -> float:
        """What the run is judged against: the asked rate; for aiperf, whose pacer issues
        credits on its seeded Poisson schedule (``credit_issued_ns``), that schedule's rate
        where it is lower (a sample of a few hundred gaps is a few % off, the same at every
        rate for a given n), never below :data:`SCHEDULE_FLOOR` × asked. guidellm is judged
        against the asked rate: its schedule itself under-sends (its waits repeat once per
        worker process), and that is counted, not forgiven."""
        if not PEERS[self.tool].own_schedule or not math.isfinite(self.scheduled):
            return self.rate
        return self.rate * min(1.0, max(SCHEDULE_FLOOR, self.scheduled / self.rate))

    def sustained(self, fraction: float) -> bool:
        """Nothing failed and achieved ≥ ``fraction`` × :attr:`offered`."""
        return (not self.error and not self.failed and math.isfinite(self.achieved)
                and self.achieved >= fraction * self.offered)


def schedule_of(traces: Any) -> float:
    """The rate of the schedule a tool's records say it meant to keep: (n − 1) ÷ the span of
    their ``submit_ts`` where the reader has one apart from the send (``dispatch_ts`` set),
    else NaN."""
    tasks = traces.tasks
    due = tasks["submit_ts"].to_numpy(dtype=float)
    if len(tasks) < 2 or tasks["dispatch_ts"].isna().all() or not np.isfinite(due).all():
        return math.nan
    span = float(due.max() - due.min())
    return (len(due) - 1) / span if span > 0 else math.nan


def stamps_of(traces: Any) -> tuple[int, int, float, dict[str, float]]:
    """(completed, failed, achieved req/s, medians) from a tool's frames."""
    tasks = traces.tasks
    ok = tasks[tasks["status"] == "accepted"]
    sess = traces.sessions
    sess_ok = sess[sess["status"] == "accepted"]
    starts = ok["start_ts"].to_numpy(dtype=float)
    ends = ok["end_ts"].to_numpy(dtype=float)
    span = float(np.nanmax(ends) - np.nanmin(starts)) if len(ok) > 1 else 0.0
    achieved = len(ok) / span if span > 0 else math.nan

    def med(values: Any) -> float:
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if len(v) else math.nan

    meds = {"ttft_ms": med(sess_ok["ttft_s"]) * 1e3,
            "tpot_ms": med(sess_ok["tpot_s"]) * 1e3 if "tpot_s" in sess_ok else math.nan,
            "e2el_ms": med(ok["run_s"]) * 1e3}
    return len(ok), int((tasks["status"] != "accepted").sum()), achieved, meds


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _OFFLINE}
    env.pop("PYTHONPATH", None)
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def _timeout(rate: float, n: int) -> float:
    return 150.0 + 4.0 * n / max(rate, 1.0)


def _aiperf(url: str, model: str, tok: Path, rate: float, n: int, folder: Path,
            in_len: int, out_len: int) -> PeerRun:
    from rollout_kit.tracing import read_aiperf

    run = PeerRun("aiperf", rate, n)
    art = folder / f"aiperf-{rate:g}-{n}-{time.monotonic_ns()}"
    cmd = [str(executable("aiperf")), "profile", "--model", model, "--url", url,
           "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tok),
           "--isl", str(in_len), "--isl-stddev", "0", "--osl", str(out_len), "--osl-stddev",
           "0", "--extra-inputs", "ignore_eos:true", "--request-rate", f"{rate:g}",
           "--arrival-pattern", "poisson", "--request-count", str(n), "--random-seed", "0",
           "--artifact-dir", str(art), "--ui-type", "none", "--no-server-metrics",
           "--no-gpu-telemetry"]
    proc, run.cpu_s, run.wall_s = measured(cmd, _timeout(rate, n), _env())
    export, summary = art / "profile_export.jsonl", art / "profile_export_aiperf.json"
    if proc is None or not export.is_file():
        run.error = _why(proc, "aiperf wrote no profile_export.jsonl")
        return run
    traces = read_aiperf(export)
    run.completed, run.failed, run.achieved, run.stamps = stamps_of(traces)
    run.scheduled = schedule_of(traces)
    run.failed += max(0, n - run.completed - run.failed)  # asked for, never recorded
    try:
        agg = json.loads(summary.read_text())
    except (OSError, ValueError):
        agg = {}

    def metric(name: str, stat: str) -> float:
        m = agg.get(name)
        v = m.get(stat) if isinstance(m, dict) else None
        return float(v) if isinstance(v, int | float) else math.nan

    run.own = {"throughput": metric("request_throughput", "avg"),
               "ttft_ms": metric("time_to_first_token", "p50"),
               "tpot_ms": metric("inter_token_latency", "p50"),
               "e2el_ms": metric("request_latency", "p50")}
    return run


def _guidellm(url: str, model: str, tok: Path, rate: float, n: int, folder: Path,
              in_len: int, out_len: int) -> PeerRun:
    from rollout_kit.tracing import read_guidellm

    run = PeerRun("guidellm", rate, n)
    out = folder / f"guidellm-{rate:g}-{n}-{time.monotonic_ns()}.json"
    cmd = [str(executable("guidellm")), "run",
           "--backend", f"kind=openai_http,target={url},model={model},"
                        "request_format=/v1/completions",
           "--profile", f"kind=poisson,rate={rate:g}",
           "--constraint", f"kind=max_requests,count={n}",
           "--data", f"kind=synthetic_text,prompt_tokens={in_len},output_tokens={out_len}",
           "--tokenizer", f"kind=huggingface_auto,model={tok}",
           "--seed", "kind=static,value=0", "--output", f"kind=json,path={out}",
           "--disable-console-interactive"]
    proc, run.cpu_s, run.wall_s = measured(cmd, _timeout(rate, n), _env())
    if proc is None or not out.is_file():
        run.error = _why(proc, "guidellm wrote no result file")
        return run
    traces = read_guidellm(out)
    run.completed, run.failed, run.achieved, run.stamps = stamps_of(traces)
    run.scheduled = schedule_of(traces)
    run.failed += max(0, n - run.completed - run.failed)
    try:
        bench = json.loads(out.read_text())["benchmarks"][0]["metrics"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        bench = {}

    def metric(name: str, stat: str = "median", scale: float = 1.0) -> float:
        m = bench.get(name)
        s = m.get("successful") if isinstance(m, dict) else None
        v = s.get(stat) if isinstance(s, dict) else None
        return float(v) * scale if isinstance(v, int | float) else math.nan

    run.own = {"throughput": metric("requests_per_second", "mean"),
               "ttft_ms": metric("time_to_first_token_ms"),
               "tpot_ms": metric("inter_token_latency_ms"),  # guidellm's ITL = vLLM's TPOT
               "e2el_ms": metric("request_latency", scale=1e3)}
    run.extra = {"guidellm_tpot_ms": metric("time_per_output_token_ms")}
    return run


def _why(proc: subprocess.CompletedProcess[str] | None, what: str) -> str:
    if proc is None:
        return f"{what}: timed out"
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
    return f"{what} (exit {proc.returncode}): {' / '.join(tail)}"[:400]


def run_peer(name: str, url: str, model: str, tok: Path, rate: float, n: int, folder: Path,
             in_len: int, out_len: int) -> PeerRun:
    """One run of the tool ``name`` against ``url``: Poisson ``rate``, ``n`` requests of
    ``in_len`` / ``out_len`` tokens (``ignore_eos``), streamed ``/v1/completions``."""
    fn = _aiperf if name == "aiperf" else _guidellm
    try:
        return fn(url, model, tok, rate, n, folder, in_len, out_len)
    except Exception as exc:  # a result file the reader refuses: the row says why
        return PeerRun(name, rate, n, error=f"{type(exc).__name__}: {exc}"[:400])


def main(argv: Sequence[str] | None = None) -> int:
    """``python bench/peers.py --setup [TOOL ...]``: install the tools; without ``--setup``
    say which can run."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--setup", action="store_true", help="install the tools (pip, once)")
    ap.add_argument("tools", nargs="*", help=f"some of {list(PEERS)} (default: all)")
    args = ap.parse_args(argv)
    unknown = [t for t in args.tools if t not in PEERS]
    if unknown:
        ap.error(f"unknown tool(s) {unknown}; choose from {list(PEERS)}")
    bad = 0
    for name in args.tools or list(PEERS):
        reason = setup(name) if args.setup else unavailable(name)
        print(f"{name}: {reason or f'ready ({executable(name)})'}")
        bad += reason is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
