"""The ``rollout-kit`` command line: a thin argparse front over the subcommand modules.

The package holds the command line and nothing the library needs: ``demo`` (``rollout-kit
demo``), ``report`` (``report`` and ``export``), ``serve`` (``serve vllm-cpu|sglang-cpu``, over
:mod:`rollout_kit.testing`), ``load`` (open-loop load over :mod:`rollout_kit.load`),
``replay`` (exact replay of a trajectory dump, over :mod:`rollout_kit.replay`), ``convert``
(JSONL traces to Parquet, over :mod:`rollout_kit.tracing`);
``rollout-kit sim`` lives with the simulator (:mod:`rollout_kit.sim._cli`).

:data:`SUBCOMMANDS` names, for each subcommand, the function that adds its arguments and
the function that runs it, as ``"module:function"`` references: a module is imported only
when its subcommand is chosen, so ``rollout-kit --help`` stays fast.

:func:`main` is the one place that turns errors into exit codes: a
:class:`~rollout_kit.RolloutKitError` (bad options, bad addresses, no server, …) or an
``OSError`` becomes one line ``rollout-kit: error: ...`` on stderr, exit 2 for bad input
(:class:`~rollout_kit.ConfigError`) and 1 otherwise; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError, RolloutKitError, TraceSchemaError
from .._version import __version__

__all__ = ["SUBCOMMANDS", "Subcommand", "error_line", "main", "resolve"]


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One ``rollout-kit`` subcommand: its help line and where its two functions live, as
    ``"module:function"`` (the module relative to this package). Each is imported when
    called: only the chosen subcommand pays for its module."""

    help: str
    arguments: str
    runner: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the subcommand's arguments to its parser."""
        resolve(self.arguments)(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Run the subcommand; returns the exit status."""
        return int(resolve(self.runner)(args))


def resolve(ref: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` reference names (importing its module)."""
    module, _, name = ref.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module, __name__), name)
    return fn


SUBCOMMANDS: dict[str, Subcommand] = {
    "sim": Subcommand("serve simulated SGLang / vLLM servers on 127.0.0.1",
                      "..sim._cli:add_arguments", "..sim._cli:run"),
    "demo": Subcommand("run RLVR-style rollouts end to end and write traces + plots",
                       ".demo:add_arguments", ".demo:run"),
    "report": Subcommand("summary tables, plots and a Chrome trace from traces",
                         ".report:add_report_arguments", ".report:run_report"),
    "export": Subcommand("export traces (chrome) for Perfetto / chrome://tracing",
                         ".report:add_export_arguments", ".report:run_export"),
    "serve": Subcommand("start a real inference server (vllm-cpu, sglang-cpu) for tests",
                        ".serve:add_arguments", ".serve:run"),
    "load": Subcommand("open-loop load (rates, bursts, sweeps, goodput) like vllm bench serve",
                       ".load_options:add_arguments", ".load:run"),
    "replay": Subcommand("re-issue a trajectory dump's calls with their seeds and compare",
                         ".replay:add_arguments", ".replay:run"),
    "convert": Subcommand("compact JSONL traces to Parquet (what Tracer.close() does)",
                          ".convert:add_arguments", ".convert:run"),
}

# bad input: exit 2 like an argparse usage error; anything else that went wrong: exit 1
_BAD_INPUT: tuple[type[BaseException], ...] = (ConfigError, TraceSchemaError)


def error_line(exc: BaseException) -> str:
    """``rollout-kit: error: <message>`` on one line (newlines in the message are joined)."""
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return f"rollout-kit: error: {text or type(exc).__name__}"


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="rollout-kit",
        description="rollout_kit: drive LLM rollouts against SGLang / vLLM servers (or the "
                    "built-in simulator), with task-id-indexed traces and latency plots.")
    parser.add_argument("--version", action="version", version=f"rollout-kit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers = {name: sub.add_parser(name, help=cmd.help, description=cmd.help)
                  for name, cmd in SUBCOMMANDS.items()}
    return parser, subparsers


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rollout-kit`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, subparsers = _build_parser()
    name = next((a for a in argv if not a.startswith("-")), None)
    if name is not None and name in SUBCOMMANDS:
        SUBCOMMANDS[name].add_arguments(subparsers[name])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(SUBCOMMANDS[args.command].run(args))
    except KeyboardInterrupt:
        return 130
    except (RolloutKitError, OSError) as exc:
        sys.stdout.flush()
        sys.stderr.write(error_line(exc) + "\n")
        sys.stderr.flush()
        return 2 if isinstance(exc, _BAD_INPUT) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
