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

from .._errors import ConfigError
from ..tracing._persist import compact_trace, expand_paths, is_parquet, parquet_path
from .output import out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rollout-kit convert``."""
    parser.add_argument("traces", nargs="+",
                        help="JSONL trace files, folders (their *.jsonl) or globs")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write the Parquet files into this folder (default: next to "
                             "each JSONL file)")


def _targets(files: list[Path], folder: Path | None) -> list[Path]:
    if folder is not None and folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {os.fspath(folder)!r} is not a folder")
    targets = [parquet_path(f) if folder is None else folder / parquet_path(f).name
               for f in files]
    seen: dict[Path, Path] = {}
    for f, t in zip(files, targets, strict=True):
        if t in seen:
            raise ConfigError(f"{os.fspath(seen[t])} and {os.fspath(f)} would both be written "
                              f"to {os.fspath(t)}")
        seen[t] = f
    return targets


def run(args: argparse.Namespace) -> int:
    """Compact each trace; returns 0 (errors raise: ``rollout_kit._cli.main`` prints them)."""
    files = expand_paths(args.traces, pattern="*.jsonl")
    for f in files:
        if is_parquet(f):
            raise ConfigError(f"{os.fspath(f)} is Parquet already; convert reads JSONL traces")
    targets = _targets(files, args.out)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    for f, t in zip(files, targets, strict=True):
        size = f.stat().st_size
        target, snap = compact_trace(f, t)
        out(f"{os.fspath(f)} -> {os.fspath(target)}: {len(snap.task_id):,} tasks, "
            f"{len(snap.session_id):,} sessions, {size / 1e6:.1f} MB -> "
            f"{target.stat().st_size / 1e6:.1f} MB")
    return 0
