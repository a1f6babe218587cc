"""``rollout-kit convert TRACES… [--out DIR]``: compact JSONL traces to Parquet.

What :meth:`~rollout_kit.tracing.Tracer.close` does for its own file, for existing ones:
``X.jsonl`` → ``X.parquet`` next to it (or in ``--out``); the JSONL stays. One line per file
on stdout (tasks, sessions, sizes); bad input (no such file, not a trace, a Parquet file
given) is one ``rollout-kit: error:`` line on stderr and exit 2, before anything is written.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..tracing import compact_traces
from .output import out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rollout-kit convert``."""
    parser.add_argument("traces", nargs="+",
                        help="JSONL trace files, folders (their *.jsonl) or globs")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write the Parquet files into this folder (default: next to "
                             "each JSONL file)")


def run(args: argparse.Namespace) -> int:
    """Compact each trace; returns 0 (errors raise: ``rollout_kit._cli.main`` prints them)."""
    for f, target, tasks, sessions in compact_traces(args.traces, args.out):
        out(f"{os.fspath(f)} -> {os.fspath(target)}: {tasks:,} tasks, {sessions:,} sessions, "
            f"{f.stat().st_size / 1e6:.1f} MB -> {target.stat().st_size / 1e6:.1f} MB")
    return 0
