"""Shared pieces of the benchmark scripts: result rows, statistics, servers in subprocesses.

Every benchmark module exposes ``rows(size) -> list[Row]`` (``size`` is ``"smoke"``,
``"quick"`` or ``"full"``) and stays runnable on its own. ``Row.ratio`` always reads
"higher is better for rollout_kit": baseline cost / rollout_kit cost for times and bytes,
rollout_kit rate / baseline rate for throughputs.
"""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "SIZES",
    "Row",
    "Size",
    "check",
    "cpu_seconds",
    "free_port",
    "machine",
    "median_ratio",
    "pct",
    "print_rows",
    "ratio",
    "render_summary",
    "render_table",
    "pinned",
    "sim_process",
    "size_from_args",
    "split_cpus",
    "spread",
    "wait_health",
]

Size = Literal["smoke", "quick", "full"]
SIZES: tuple[Size, ...] = ("smoke", "quick", "full")


@dataclass
class Row:
    """One line of the results table.

    Attributes:
        bench: which benchmark produced it (``tracer``, ``controller``, ...).
        metric: what is measured, including the unit of ``ours`` / ``baseline``.
        ours: rollout_kit's median.
        baseline: the baseline's median, measured in the same run (``None``: no baseline).
        baseline_name: what the baseline is.
        ratio: higher is better for rollout_kit (see the module docstring).
        target: the target as text, e.g. ``"ratio ≥ 0.85"`` or ``"≤ 10 µs"``.
        met: whether the target is met (``None``: no target or not measured).
        spread: min–max over repetitions.
        note: anything a reader needs (sizes, skips, extrapolations).
    """

    bench: str
    metric: str
    ours: float | None
    baseline: float | None = None
    baseline_name: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    spread: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The row as a JSON-serialisable dict."""
        return asdict(self)


def check(value: float | None, op: Literal["<=", ">="], limit: float) -> bool | None:
    """``value op limit``, or ``None`` when nothing was measured."""
    if value is None or value != value:  # None or NaN
        return None
    return value <= limit if op == "<=" else value >= limit


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``xs``; NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def spread(xs: Sequence[float], fmt: str = "{:.3g}") -> str:
    """``min–max`` of ``xs`` as text."""
    if not xs:
        return ""
    return f"{fmt.format(min(xs))}–{fmt.format(max(xs))}"


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or ``None`` when either is missing or ``den`` is zero."""
    if num is None or den is None or not den or num != num or den != den:
        return None
    return num / den


def median_ratio(num: Sequence[float], den: Sequence[float]) -> tuple[float, list[float]]:
    """Median of the paired per-round ratios ``num[i] / den[i]`` and the ratios themselves."""
    rs = [a / b for a, b in zip(num, den, strict=True) if b]
    return (statistics.median(rs) if rs else float("nan")), rs


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one by default; Linux ``/proc``)."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_health(url: str, path: str = "/health", tries: int = 400) -> None:
    """Poll ``url + path`` until it answers 200."""
    import aiohttp

    async with aiohttp.ClientSession() as s:
        for _ in range(tries):
            try:
                async with s.get(url + path) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"server at {url} did not come up")


_PIN = "import os, sys; os.sched_setaffinity(0, {cpus}); os.execv(sys.argv[1], sys.argv[1:])"


def split_cpus() -> tuple[set[int], set[int]] | None:
    """Two disjoint halves of the CPUs this process may use: ``(client, server)``; ``None``
    with fewer than two CPUs or no ``sched_setaffinity`` (not Linux)."""
    if sys.platform != "linux":
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


def pinned(cmd: Sequence[str], cpus: set[int] | None) -> list[str]:
    """``cmd`` (its first item an absolute path) run on ``cpus`` only: the affinity is set
    before ``exec``, so every thread of the program inherits it; ``None``: ``cmd`` as is."""
    if cpus is None:
        return list(cmd)
    return [sys.executable, "-c", _PIN.format(cpus=sorted(cpus)), *cmd]


@contextmanager
def sim_process(*args: str, cmd: list[str] | None = None,
                cpus: set[int] | None = None) -> Iterator[tuple[str, int]]:
    """A server in its own process (on ``cpus`` only, when given); yields ``(url, pid)``.

    Default: ``rollout-kit sim ARGS`` (prints its URL first). ``cmd`` replaces the whole
    command line; it must print ``http://host:port`` as its first stdout line.
    """
    full = pinned(cmd or [sys.executable, "-m", "rollout_kit", "sim", *args], cpus)
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"server did not start: {full}")
        asyncio.run(wait_health(url))
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def machine() -> dict[str, Any]:
    """Cores, RAM, Python, platform and the load average right now."""
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f
                        if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "ram_gib": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _fmt(x: float | None) -> str:
    if x is None or x != x:
        return "—"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def render_table(rows: Sequence[Row]) -> str:
    """The rows as one Markdown table."""
    head = ["bench", "metric", "rollout_kit", "baseline", "ratio", "target", "met?", "spread",
            "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        met = "—" if r.met is None else ("yes" if r.met else "**no**")
        base = _fmt(r.baseline)
        if r.baseline_name and r.baseline is not None:
            base = f"{base} ({r.baseline_name})"
        ratio = "—" if r.ratio is None or r.ratio != r.ratio else f"{r.ratio:.2f}×"
        cells = [r.bench, r.metric, _fmt(r.ours), base, ratio, r.target or "—", met,
                 r.spread or "—", r.note]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def render_summary(rows: Sequence[Row]) -> str:
    """The short table of the README: metric, ours, baseline, ratio, target, met."""
    head = ["metric", "rollout_kit", "baseline, same run", "ratio", "target", "met?"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        met = "—" if r.met is None else ("yes" if r.met else "**no**")
        if r.baseline is not None:
            base = f"{r.baseline_name} {_fmt(r.baseline)}" if r.baseline_name else \
                _fmt(r.baseline)
        elif r.extra.get("baseline_skipped"):
            base = f"not measured: {r.extra['baseline_skipped']}"
        else:
            base = "—" if r.ours is not None or not r.note else r.note
        ratio = "—" if r.ratio is None or r.ratio != r.ratio else f"{r.ratio:.2f}×"
        ours = _fmt(r.ours) if r.ours is not None else "skipped"
        cells = [f"{r.bench}: {r.metric}", ours, base, ratio, r.target or "—", met]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def print_rows(rows: Sequence[Row]) -> None:
    """Print rows as a Markdown table (the standalone scripts' output)."""
    print(render_table(rows))


def run_alone(rows: Callable[[Size], list[Row]], doc: str,
              argv: Sequence[str] | None = None) -> int:
    """``main()`` of a benchmark run alone: parse the size, print its rows as a table."""
    size, _ = size_from_args(argv, doc)
    print_rows(rows(size))
    return 0


def size_from_args(argv: Sequence[str] | None, doc: str,
                   add: Callable[[Any], None] | None = None) -> tuple[Size, Any]:
    """Parse ``--smoke`` / ``--quick`` / ``--full`` (default: quick for scripts run alone)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    g.add_argument("--quick", action="store_true", help="default sizes")
    g.add_argument("--full", action="store_true", help="large sizes")
    if add is not None:
        add(ap)
    args = ap.parse_args(argv)
    size: Size = "smoke" if args.smoke else "full" if args.full else "quick"
    return size, args
