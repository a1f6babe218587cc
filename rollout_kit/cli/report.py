"""``rollout-kit report`` and ``rollout-kit export``: summaries, plots and exports of traces.

Usage::

    rollout-kit report traces/*.jsonl --out report/        # summary.md/.csv, PNGs, chrome
    rollout-kit export chrome traces/*.jsonl trace.json    # open in ui.perfetto.dev

From Python, :func:`write_report` does the same with a loaded
:class:`~rollout_kit.tracing.Traces`, and :func:`export_frames` writes the three frames as
CSV and Parquet.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .. import analysis, plotting
from .._paths import prepare_output_dir, remove_output_dir
from ..errors import ConfigError
from ..tracing import Traces, load_traces
from ..tracing.chrome import to_chrome_trace

__all__ = [
    "CHROME_FILE",
    "PLOT_FILES",
    "add_export_arguments",
    "add_report_arguments",
    "export_frames",
    "run_export",
    "run_report",
    "write_report",
]

CHROME_FILE = "trace.chrome.json"
PLOT_FILES = ("timeline.png", "latency_hist.png", "latency_scatter.png", "throughput.png",
              "concurrency.png", "server_load.png", "dashboard.png")
_FRAMES = ("tasks", "sessions", "spans")


def export_frames(traces: Traces, out: str | Path, *, parquet: bool = True) -> list[Path]:
    """Write ``tasks``/``sessions``/``spans`` as CSV, and as Parquet unless ``parquet=False``.

    Args:
        traces: the loaded traces.
        out: an existing folder.
        parquet: also write each frame as ``<name>.parquet`` (pyarrow is a dependency).

    Returns:
        The files written.

    Raises:
        ConfigError: ``out`` is not a folder.
    """
    out = Path(out)
    if not out.is_dir():
        raise ConfigError(f"{out} is not a folder")
    written: list[Path] = []
    for name in _FRAMES:
        df = getattr(traces, name)
        written.append(out / f"{name}.csv")
        df.to_csv(written[-1])
        if parquet:
            written.append(out / f"{name}.parquet")
            df.to_parquet(written[-1])
    return written




def write_report(traces: Traces, out: str | Path, *, force: bool = False,
                 window: float | None = None, progress: bool | None = None) -> list[Path]:
    """Write summary tables, frames, PNG plots and a Chrome trace into ``out``.

    Args:
        traces: the loaded traces.
        out: the report folder (created; must be empty unless ``force``).
        force: write into a non-empty folder, overwriting files of the same names.
        window: throughput window in seconds; default: from the run's length
            (:func:`rollout_kit.plotting.throughput_window`: length / 50, at least 5 ms).
        progress: show a progress bar (default: when stderr is a terminal).

    Returns:
        The files written.

    Raises:
        ConfigError: ``out`` is not empty and ``force`` is false, or is a file.
    """
    out = Path(out)
    prepare_output_dir(out, force)
    t, sp, se = traces.tasks, traces.spans, traces.sessions
    summ = _measured(analysis.summary(t, sessions=se))
    if window is None:
        window = plotting.throughput_window(t)
    written: list[Path] = []

    def summary_files() -> None:
        md = out / "summary.md"
        md.write_text(f"# Rollout report\n\n{len(t)} tasks, {len(se)} sessions, "
                      f"{len(sp)} spans.\n\n{summ.to_markdown()}", encoding="utf-8")
        summ.as_series().rename("value").to_csv(out / "summary.csv", index_label="metric")
        written.extend([md, out / "summary.csv"])

    def plot(fn: Callable[..., Any], name: str, *args: Any, **kw: Any) -> Callable[[], None]:
        def step() -> None:
            plotting.save_plot(fn, out / name, *args, **kw)
            written.append(out / name)
        return step

    def chrome() -> None:
        _chrome(traces, out / CHROME_FILE)
        written.append(out / CHROME_FILE)

    steps: list[tuple[str, Callable[[], None]]] = [
        ("summary", summary_files),
        ("frames", lambda: written.extend(export_frames(traces, out))),
        ("timeline", plot(plotting.plot_timeline, "timeline.png", sp, tasks=t,
                          figsize=(12.0, 6.0))),
        ("latency_hist", plot(plotting.plot_latency_hist, "latency_hist.png", t)),
        ("latency_scatter", plot(plotting.plot_latency_scatter, "latency_scatter.png", t)),
        ("throughput", plot(plotting.plot_throughput, "throughput.png", t, window=window)),
        ("concurrency", plot(plotting.plot_concurrency, "concurrency.png", t)),
        ("server_load", plot(plotting.plot_server_load, "server_load.png", se)),
        ("dashboard", plot(plotting.dashboard, "dashboard.png", t, sp, se, window=window)),
        ("chrome", chrome),
    ]
    with tqdm(steps, desc="report", unit="step", disable=_no_bar(progress)) as bar:
        for name, step in bar:
            bar.set_postfix_str(name)
            step()
    return written


def _measured(summ: analysis.Summary) -> analysis.Summary:
    """``summ`` without what the run did not measure: latency metrics with no values
    (e.g. ``ttft_s`` when no server reported it) and throughput rows that are NaN."""
    lat = summ.latency[summ.latency["count"] > 0]
    return dataclasses.replace(summ, latency=lat, throughput=summ.throughput.dropna())


def _chrome(traces: Traces, path: Path) -> dict[str, Any]:
    """The Chrome / Perfetto trace of every frame: tracks, flows, counters, continuations."""
    return to_chrome_trace(traces.spans, path, tasks=traces.tasks, sessions=traces.sessions,
                           events=traces.events)


def _no_bar(progress: bool | None) -> bool | None:
    return None if progress is None else not progress  # None: tqdm decides (tty or not)


def _load(paths: list[str], progress: bool | None) -> Traces:
    with tqdm(total=1, desc=f"loading {len(paths)} trace file(s)", unit="load",
              disable=_no_bar(progress)) as bar:
        traces = load_traces(paths)
        bar.update(1)
        bar.set_postfix_str(f"{len(traces.tasks)} tasks")
    return traces


# -- CLI -------------------------------------------------------------------------------

def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rollout-kit report``."""
    parser.add_argument("traces", nargs="+", help="trace JSONL files, folders or globs")
    parser.add_argument("--out", required=True, type=Path, help="report folder to write")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty --out folder")
    parser.add_argument("--window", type=float, default=None,
                        help="throughput window in seconds (default: the run's length / 50, "
                             "at least 5 ms)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rollout-kit export FORMAT TRACES... OUT``."""
    parser.add_argument("format", choices=["chrome"], help="export format")
    parser.add_argument("paths", nargs="+", metavar="TRACES... OUT",
                        help="trace JSONL files, folders or globs, then the output file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_report(args: argparse.Namespace) -> int:
    """Run ``rollout-kit report``; errors propagate to ``rollout_kit.cli.main`` (one line)."""
    progress = False if args.no_progress else None
    if args.window is not None and not args.window > 0:
        raise ConfigError(f"--window must be > 0, got {args.window}")
    out = Path(args.out)
    created = prepare_output_dir(out, args.force)  # fail before a long load
    try:
        traces = _load(list(args.traces), progress)
        files = write_report(traces, out, force=True, window=args.window, progress=progress)
    except BaseException:
        remove_output_dir(created)  # a failed report leaves no folder behind
        raise
    sys.stdout.write(f"wrote {len(files)} files to {out}\n")
    return 0


def run_export(args: argparse.Namespace) -> int:
    """Run ``rollout-kit export chrome TRACES... OUT.json``; errors propagate to the CLI."""
    progress = False if args.no_progress else None
    if len(args.paths) < 2:
        raise ConfigError("export needs at least one trace file and an output file")
    *sources, target = args.paths
    out = Path(target)
    if out.suffix.lower() == ".jsonl" or out.is_dir():
        raise ConfigError(f"the last path ({out}) is the output file: a .json path")
    traces = _load(sources, progress)
    trace = _chrome(traces, out)
    sys.stdout.write(f"wrote {len(trace['traceEvents'])} events to {out}\n")
    return 0
