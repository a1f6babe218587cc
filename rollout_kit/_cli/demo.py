"""``rollout-kit demo``: RLVR-style rollouts end to end, with traces, a summary and a plot.

Starts simulated SGLang and vLLM servers on 127.0.0.1 (or uses ``--sglang``/``--vllm``
addresses of real ones), runs arithmetic prompts ("What is 17+25?") through a
:class:`~rollout_kit.RolloutController` with a :class:`SingleTurnWorkflow` and an
exact-match reward, shows a progress bar, prints a summary and writes ``traces.jsonl`` (and
``traces.parquet``), ``tasks.csv`` and ``timeline.png`` into the output folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import EngineConfig, ExecutorConfig, GenerationConfig, Timeouts
from .._controller import RolloutController
from .._errors import ConfigError, EngineConnectionError, NoHealthyServerError, truncate
from .._io import RolloutResult
from .._loop import run_sync
from .._paths import parse_address, prepare_output_dir, remove_output_dir
from .._workflows import SingleTurnWorkflow
from ..examples import exact_match_reward, make_problems
from .output import note as _note
from .output import out as _out

if TYPE_CHECKING:
    import aiohttp
    import pandas as pd

_REFUSED_GRACE_S = 2.0  # a server that refuses connections this long is not there
_PROBE_TIMEOUT_S = 5.0  # one TCP connect / one GET /health
_WAIT_NOTE_S = 15.0  # how often to say "still waiting"
_TOP_REASONS = 3


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
    parser.add_argument("--setup-timeout", type=float, default=60.0, metavar="S",
                        help="seconds to wait for --sglang/--vllm servers that are up but not "
                             "healthy yet (60); a refused connection fails at once")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


# -- checking --sglang / --vllm servers before the run ----------------------------------

async def _tcp_connect(host: str, port: int) -> tuple[str, str]:
    """``("ok", "")``, ``("refused", why)`` or ``("unreachable", why)`` for one TCP connect."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:  # socket.gaierror: the name does not resolve
        return "unreachable", f"cannot resolve {host!r}: {exc.strerror or exc}"
    errors: list[BaseException] = []
    for *_, sockaddr in infos:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(str(sockaddr[0]), port), _PROBE_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            errors.append(exc)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return "ok", ""
    if errors and all(isinstance(e, ConnectionRefusedError) for e in errors):
        return "refused", "connection refused"
    first = next((e for e in errors if not isinstance(e, ConnectionRefusedError)), None)
    if first is None or isinstance(first, TimeoutError):
        return "unreachable", f"no TCP connection within {_PROBE_TIMEOUT_S:g} s"
    return "unreachable", str(first.strerror if isinstance(first, OSError) and first.strerror
                              else first)


async def _probe(session: aiohttp.ClientSession, address: str) -> tuple[str, str]:
    """``ready``, ``refused``, ``unreachable`` or ``waiting`` (up, not healthy), and why."""
    import aiohttp

    scheme = "https" if address.startswith("https://") else "http"
    host_port = address.removeprefix("https://")
    host, _, port = host_port.rpartition(":")
    kind, why = await _tcp_connect(host.strip("[]"), int(port))
    if kind != "ok":
        return kind, why
    try:
        async with session.get(f"{scheme}://{host_port}/health") as resp:
            if resp.status == 200:
                return "ready", ""
            return "waiting", f"GET /health answered HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return "waiting", f"GET /health failed: {truncate(str(exc) or type(exc).__name__, 200)}"


async def _wait_ready(address: str, option: str, timeout: float) -> None:
    """Return once ``address`` answers ``GET /health`` with 200.

    Raises:
        EngineConnectionError: nothing listens there (refused for a few seconds), or the host
            does not resolve / answer.
        NoHealthyServerError: it is up but not healthy after ``timeout`` seconds.
    """
    import aiohttp

    start = time.monotonic()
    refused_since: float | None = None
    noted_at: float | None = None
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=_PROBE_TIMEOUT_S)) as session:
        while True:
            kind, why = await _probe(session, address)
            now = time.monotonic()
            if kind == "ready":
                if noted_at is not None:
                    _note(f"{address} ({option}) is healthy after {now - start:.0f} s")
                return
            if kind == "unreachable":
                raise EngineConnectionError(f"cannot connect to {address} ({option}): {why}",
                                            server=address)
            if kind == "refused":
                refused_since = now if refused_since is None else refused_since
                if now - refused_since >= _REFUSED_GRACE_S:
                    raise EngineConnectionError(
                        f"cannot connect to {address} ({option}): connection refused; is a "
                        "server listening there?", server=address)
            else:
                refused_since = None
                if noted_at is None:
                    _note(f"waiting up to {timeout:g} s (--setup-timeout) for {address} "
                          f"({option}) to become healthy: {why}")
                    noted_at = now
                elif now - noted_at >= _WAIT_NOTE_S:
                    _note(f"still waiting for {address} ({option}), {now - start:.0f} s: {why}")
                    noted_at = now
            if now - start >= timeout:
                raise NoHealthyServerError(
                    f"{address} ({option}) did not become healthy within {timeout:g} s "
                    f"(--setup-timeout): {why}", server=address, endpoint="/health")
            await asyncio.sleep(0.2 if kind == "refused" else 0.5)


async def _check_servers(sglang: list[str], vllm: list[str], timeout: float) -> None:
    """Every ``--sglang``/``--vllm`` server answers, or fail naming the first that does not."""
    waits = [asyncio.ensure_future(_wait_ready(address, option, timeout))
             for option, addresses in (("--sglang", sglang), ("--vllm", vllm))
             for address in addresses]
    try:
        await asyncio.gather(*waits)  # raises the first failure
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)




@contextlib.asynccontextmanager
async def _servers(args: argparse.Namespace) -> AsyncIterator[tuple[list[str], list[str]]]:
    if args.sglang or args.vllm:
        yield list(args.sglang), list(args.vllm)
        return
    from ..sim import serve

    # the simulator's own answer model: what `rollout-kit sim --accuracy P` also serves
    sim = {"time_scale": args.time_scale, "accuracy": args.p_correct, "seed": args.seed}
    async with serve("sglang", n=1, **sim) as sg, serve("vllm", n=1, **sim) as vl:
        yield list(sg.addresses), list(vl.addresses)


@dataclass
class _Progress:
    submitted: bool = False  # once tasks ran, a failure keeps the output folder


async def _main(args: argparse.Namespace, out: Path, progress: _Progress) -> dict[str, Any]:
    from tqdm.auto import tqdm

    problems = make_problems(args.tasks, args.seed)
    workflow = SingleTurnWorkflow(
        exact_match_reward, GenerationConfig(n_samples=args.n_samples, max_new_tokens=32))
    async with _servers(args) as (sg, vl):
        ctl = RolloutController(sglang=sg, vllm=vl, trace_path=out / "traces.jsonl",
                                engine_config=EngineConfig(
                                    timeouts=Timeouts(setup=args.setup_timeout)),
                                executor_config=ExecutorConfig(
                                    max_concurrent_rollouts=args.concurrency))
        try:  # not `async with ctl`: a failed initialize must close the HTTP sessions too
            await ctl.initialize_async()
            t0 = time.perf_counter()
            progress.submitted = True
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
        finally:
            await ctl.close_async()
    rewards = [x for r in results if r.ok for x in r.trajectory["rewards"]]
    return {"results": results, "wall": wall, "tasks": tasks, "sessions": sessions,
            "spans": spans, "rewards": rewards}


def _check_args(args: argparse.Namespace) -> None:
    for name in ("tasks", "n_samples", "concurrency"):
        value = getattr(args, name)
        if value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not args.setup_timeout > 0:
        raise ConfigError(f"--setup-timeout must be > 0, got {args.setup_timeout}")
    args.sglang = [parse_address(a, "--sglang") for a in args.sglang]
    args.vllm = [parse_address(a, "--vllm") for a in args.vllm]


def _reason_lines(tasks: pd.DataFrame) -> list[str]:
    """The most common (status, reason, first line of error) of the tasks not accepted."""
    bad = tasks[tasks["status"] != "accepted"]
    if bad.empty:
        return []

    def column(name: str) -> list[str]:
        if name not in bad.columns:
            return [""] * len(bad)
        return [str(v).strip().splitlines()[0] if isinstance(v, str) and v.strip() else ""
                for v in bad[name]]

    counts: dict[tuple[str, str, str], int] = {}
    for key in zip(bad["status"].astype(str), column("reason"), column("error"), strict=True):
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    lines = []
    for (status, reason, error), n in ranked[:_TOP_REASONS]:
        detail = f": {truncate(error, 240)}" if error else ""
        lines.append(f"{n} {status} ({reason or 'no reason given'}){detail}")
    if len(ranked) > _TOP_REASONS:
        rest = sum(n for _, n in ranked[_TOP_REASONS:])
        lines.append(f"{rest} more with {len(ranked) - _TOP_REASONS} other reasons: "
                     "see the reason and error columns of tasks.csv")
    return lines


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the process exit code (1 when no task was accepted).

    Bad options and unreachable servers raise :class:`~rollout_kit.RolloutKitError`
    (``rollout_kit._cli.main`` prints them as one line); a run that fails before any task
    ran removes the output folder it created.
    """
    _check_args(args)
    out = Path(args.out)
    if args.sglang or args.vllm:  # before creating --out: a wrong address leaves nothing
        run_sync(_check_servers(args.sglang, args.vllm, args.setup_timeout),
                 what="rollout-kit demo")
    created = prepare_output_dir(out, args.force)
    progress = _Progress()
    try:
        r = run_sync(_main(args, out, progress), what="rollout-kit demo")
    except BaseException:
        if not progress.submitted:
            remove_output_dir(created)
        raise
    tasks = r["tasks"]
    counts = tasks["status"].value_counts().to_dict()
    total_s = tasks["total_s"].dropna()
    _out(f"\n{len(tasks)} tasks in {r['wall']:.2f} s -> {len(tasks) / r['wall']:.1f} tasks/s")
    _out("status:   " + ", ".join(f"{k}={counts.get(k, 0)}"
                                  for k in ("accepted", "rejected", "failed", "cancelled")))
    for i, line in enumerate(_reason_lines(tasks)):
        _out(("reasons:  " if i == 0 else " " * 10) + line)
    if len(total_s):
        q = total_s.quantile([0.5, 0.9, 0.99])
        _out(f"latency:  p50={q[0.5] * 1e3:.1f} ms  p90={q[0.9] * 1e3:.1f} ms  "
             f"p99={q[0.99] * 1e3:.1f} ms")
    if r["rewards"]:
        _out(f"reward:   mean={sum(r['rewards']) / len(r['rewards']):.3f} over "
             f"{len(r['rewards'])} samples")
    if "worker" in tasks.columns:
        per_worker = tasks["worker"].value_counts()
        _out("workers:  tasks per worker: "
             + ", ".join(f"{k}={v}" for k, v in per_worker.items()))
    sessions = r["sessions"]
    if "server" in sessions.columns:
        per = sessions["server"].value_counts()
        _out("servers:  samples per server: " + ", ".join(f"{k}={v}" for k, v in per.items()))
    tasks.to_csv(out / "tasks.csv")
    written = ["traces.jsonl", "traces.parquet", "tasks.csv"]  # Parquet: at the tracer's close
    written = [w for w in written if (out / w).is_file()]
    from ..plotting import plot_timeline, save_plot

    save_plot(plot_timeline, out / "timeline.png", r["spans"], tasks=tasks, figsize=(10, 6),
              dpi=110)
    written.append("timeline.png")
    _out(f"wrote:    {', '.join(str(out / w) for w in written)}")
    accepted = counts.get("accepted", 0)
    if accepted == 0 and len(tasks):
        sys.stdout.flush()
        sys.stderr.write(f"rollout-kit: error: none of the {len(tasks)} tasks was accepted; "
                         f"the reasons are above and in {out / 'tasks.csv'}\n")
        return 1
    return 0
