"""File-system helpers shared by the command-line tools."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError

__all__ = ["prepare_output_dir"]


def prepare_output_dir(out: Path, force: bool) -> None:
    """Create ``out``; refuse to write into an existing non-empty folder unless ``force``.

    Raises:
        ConfigError: ``out`` is a file, or a non-empty folder and ``force`` is false.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"--out {out} exists and is not empty; pass --force to overwrite")
    out.mkdir(parents=True, exist_ok=True)
