"""The ``rollout-kit`` command line: a thin argparse front over the subcommand modules.

The package holds the command line and nothing the library needs: ``demo`` (``rollout-kit
demo``), ``report`` (``report`` and ``export``), ``serve`` (``serve vllm-cpu|sglang-cpu``, over
:mod:`rollout_kit.testing`), ``load`` (open-loop load over :mod:`rollout_kit.load`),
``replay`` (exact replay of a trajectory dump, over :mod:`rollout_kit.replay`), ``convert``
(JSONL traces to Parquet, over :mod:`rollout_kit.tracing`);
``rollout-kit sim`` lives with the simulator (:mod:`rollout_kit.sim._cli`).

:data:`SUBCOMMANDS` names, for each subcommand, the function that adds its arguments and
the function that runs it. Both import their module only when called, so
``rollout-kit --help`` stays fast.

:func:`main` is the one place that turns errors into exit codes: a
:class:`~rollout_kit.RolloutKitError` (bad options, bad addresses, no server, …) or an
``OSError`` becomes one line ``rollout-kit: error: ...`` on stderr, exit 2 for bad input
(:class:`~rollout_kit.ConfigError`) and 1 otherwise; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._errors import ConfigError, RolloutKitError, TraceSchemaError
from .._version import __version__

__all__ = ["SUBCOMMANDS", "Subcommand", "error_line", "main"]


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One ``rollout-kit`` subcommand: its help line and two functions."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# Each function imports its module when called: only the chosen subcommand pays for it.

def _sim_arguments(parser: argparse.ArgumentParser) -> None:
    from ..sim import _cli as cli

    cli.add_arguments(parser)


def _sim_run(args: argparse.Namespace) -> int:
    from ..sim import _cli as cli

    return cli.run(args)


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    from . import demo

    demo.add_arguments(parser)


def _demo_run(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args)


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    from . import report

    report.add_report_arguments(parser)


def _report_run(args: argparse.Namespace) -> int:
    from . import report

    return report.run_report(args)


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    from . import report

    report.add_export_arguments(parser)


def _export_run(args: argparse.Namespace) -> int:
    from . import report

    return report.run_export(args)


def _load_arguments(parser: argparse.ArgumentParser) -> None:
    from . import _load_options

    _load_options.add_arguments(parser)


def _load_run(args: argparse.Namespace) -> int:
    from . import load

    return load.run(args)


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    from . import replay

    replay.add_arguments(parser)


def _replay_run(args: argparse.Namespace) -> int:
    from . import replay

    return replay.run(args)


def _convert_arguments(parser: argparse.ArgumentParser) -> None:
    from . import convert

    convert.add_arguments(parser)


def _convert_run(args: argparse.Namespace) -> int:
    from . import convert

    return convert.run(args)


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from . import serve

    serve.add_arguments(parser)


def _serve_run(args: argparse.Namespace) -> int:
    from . import serve

    return serve.run(args)


SUBCOMMANDS: dict[str, Subcommand] = {
    "sim": Subcommand("serve simulated SGLang / vLLM servers on 127.0.0.1",
                      _sim_arguments, _sim_run),
    "demo": Subcommand("run RLVR-style rollouts end to end and write traces + plots",
                       _demo_arguments, _demo_run),
    "report": Subcommand("summary tables, plots and a Chrome trace from traces",
                         _report_arguments, _report_run),
    "export": Subcommand("export traces (chrome) for Perfetto / chrome://tracing",
                         _export_arguments, _export_run),
    "serve": Subcommand("start a real inference server (vllm-cpu, sglang-cpu) for tests",
                        _serve_arguments, _serve_run),
    "load": Subcommand("open-loop load (rates, bursts, sweeps, goodput) like vllm bench serve",
                       _load_arguments, _load_run),
    "replay": Subcommand("re-issue a trajectory dump's calls with their seeds and compare",
                         _replay_arguments, _replay_run),
    "convert": Subcommand("compact JSONL traces to Parquet (what Tracer.close() does)",
                          _convert_arguments, _convert_run),
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
