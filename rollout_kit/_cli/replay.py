"""``rollout-kit replay DUMP``: re-issue recorded calls with their seeds and say what changed.

Prints one line of counts, then the calls that did not replay identically (at most
``--show``), and writes the whole comparison frame with ``--out`` (``.csv``, ``.jsonl`` or
``.parquet``). Exit status: 0 when every replayed call is token-identical, 1 when some
diverged, failed or could not be sent, 2 for bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from .._errors import ConfigError
from .output import note, out

_SHOWN = ["status", "first_divergence", "tokens_then", "tokens_now", "server_now", "reason"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rollout-kit replay``."""
    parser.add_argument("dump", help="trajectory dump folder, file or glob (or an AReaL "
                                     "dump root: rollout/{version}/{task_id}.jsonl)")
    parser.add_argument("--task-ids", default=None,
                        help="comma-separated recorded task ids (default: all)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--sglang", default=None, metavar="ADDRS",
                        help="send to these SGLang servers (comma-separated host:port)")
    target.add_argument("--vllm", default=None, metavar="ADDRS",
                        help="send to these vLLM servers (default: the recorded servers)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="recorded tasks replayed at once (default 16)")
    parser.add_argument("--no-determinism-check", action="store_true",
                        help="do not replay a diverged call a second time")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the comparison frame (.csv, .jsonl or .parquet)")
    parser.add_argument("--show", type=int, default=20,
                        help="at most this many non-identical calls printed (default 20)")


def _task_ids(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    try:
        ids = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--task-ids must be comma-separated ints, got {raw!r}") from None
    if not ids or min(ids) < 0:
        raise ConfigError(f"--task-ids must be comma-separated ints >= 0, got {raw!r}")
    return ids


def summary_line(frame: pd.DataFrame) -> str:
    """``N calls: a identical, b diverged, c failed, d not replayed``."""
    counts = frame["status"].value_counts()
    parts = [f"{int(counts.get(s, 0))} {s.replace('_', ' ')}"
             for s in ("identical", "diverged", "failed", "not_replayed")]
    return f"{len(frame)} calls: " + ", ".join(parts)


def _write(frame: pd.DataFrame, path: Path) -> None:
    flat = frame.reset_index()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        flat.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        flat.to_json(path, orient="records", lines=True)
    elif path.suffix == ".parquet":
        try:
            flat.to_parquet(path, index=False)
        except ImportError as exc:
            raise ConfigError(f"--out {str(path)!r} needs pyarrow: {exc}") from None
    else:
        raise ConfigError(f"--out must end in .csv, .jsonl or .parquet, got {str(path)!r}")


def run(args: argparse.Namespace) -> int:
    """Run ``rollout-kit replay``; errors propagate to ``rollout_kit._cli.main`` (one line)."""
    from ..replay import replay

    if args.concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.out is not None and args.out.suffix not in (".csv", ".jsonl", ".parquet"):
        raise ConfigError(f"--out must end in .csv, .jsonl or .parquet, got {str(args.out)!r}")
    flavour = "sglang" if args.sglang else "vllm" if args.vllm else None
    servers = args.sglang or args.vllm
    frame = replay(args.dump, task_ids=_task_ids(args.task_ids), servers=servers,
                   flavour=flavour, concurrency=args.concurrency,
                   check_determinism=not args.no_determinism_check)
    out(summary_line(frame))
    odd = frame[frame["status"] != "identical"]
    if len(odd):
        with pd.option_context("display.width", 200, "display.max_colwidth", 90):
            out(odd[_SHOWN].head(args.show).to_string())
        if len(odd) > args.show:
            note(f"{len(odd) - args.show} more non-identical calls (see --out)")
    if args.out is not None:
        _write(frame, args.out)
        note(f"wrote {args.out}")
    return 0 if odd.empty else 1
