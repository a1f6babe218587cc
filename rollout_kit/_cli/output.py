"""How the subcommands print: results on stdout, notes on stderr (prefixed ``rollout-kit:``)."""

from __future__ import annotations

import sys


def out(text: str = "") -> None:
    """One line of results on stdout."""
    sys.stdout.write(text + "\n")


def note(text: str) -> None:
    """One line for the user on stderr, after what stdout has so far."""
    sys.stdout.flush()
    sys.stderr.write(f"rollout-kit: {text}\n")
    sys.stderr.flush()
