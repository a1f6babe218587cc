"""``rollout-kit report`` and ``rollout-kit export``: summaries, plots and exports of traces.

Usage::

    rollout-kit report traces/*.jsonl --out report/        # summary.md/.csv, PNGs, chrome
    rollout-kit export chrome traces/*.jsonl trace.json    # open in ui.perfetto.dev

From Python, :func:`rollout_kit.report.write_report` does the same with a loaded
:class:`~rollout_kit.tracing.Traces`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm.auto import tqdm

from .._errors import ConfigError
from .._paths import prepare_output_dir, remove_output_dir
from ..report import write_chrome_trace, write_report
from ..tracing import Traces, load_traces


def _load(paths: list[str], progress: bool | None) -> Traces:
    with tqdm(total=1, desc=f"loading {len(paths)} trace file(s)", unit="load",
              disable=None if progress is None else not progress) as bar:
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
    parser.add_argument("traces", nargs="+", metavar="TRACES",
                        help="trace JSONL or Parquet files, folders or globs")
    parser.add_argument("out", metavar="OUT", type=Path,
                        help="the output file (.json; its folder is created)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_report(args: argparse.Namespace) -> int:
    """Run ``rollout-kit report``; errors propagate to ``rollout_kit._cli.main`` (one line)."""
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
    out: Path = args.out
    if out.suffix.lower() in (".jsonl", ".parquet") or out.is_dir():
        raise ConfigError(f"the last path ({out}) is the output file: a .json path")
    traces = _load(list(args.traces), progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    trace = write_chrome_trace(traces, out)
    sys.stdout.write(f"wrote {len(trace['traceEvents'])} events to {out}\n")
    return 0
