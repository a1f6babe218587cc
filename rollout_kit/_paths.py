"""File-system and address helpers shared by the command-line tools."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ._errors import ConfigError

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_FORMS = "expected host:port or http(s)://host:port"


def prepare_output_dir(out: Path, force: bool) -> Path | None:
    """Create ``out``; refuse to write into an existing non-empty folder unless ``force``.

    Returns:
        The top-most folder this call created (``out`` or one of its parents), for
        :func:`remove_output_dir` when the command fails; ``None`` when ``out`` existed.

    Raises:
        ConfigError: ``out`` is a file, or a non-empty folder and ``force`` is false.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"--out {out} exists and is not empty; pass --force to overwrite")
    created: Path | None = None
    folder = out.absolute()
    while not folder.exists():
        created, folder = folder, folder.parent
    out.mkdir(parents=True, exist_ok=True)
    return created


def remove_output_dir(created: Path | None) -> None:
    """Remove a folder :func:`prepare_output_dir` created, with what is in it (``None``: no-op)."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)


def parse_address(text: str, option: str) -> str:
    """Check a server address given to ``option``; return it as ``host:port`` (or with https).

    Accepted: ``host:port``, ``http://host:port``, ``https://host:port`` (a trailing ``/`` is
    dropped), IPv6 hosts in brackets (``[::1]:8000``); the port is 1..65535.

    Raises:
        ConfigError: with a message naming ``option`` and what is wrong.
    """
    raw = text.strip()
    where = f"{option} {text!r}"
    rest = raw
    scheme = ""
    m = _SCHEME_RE.match(rest)
    if m is not None:
        scheme = m.group(1).lower()
        if scheme not in ("http", "https"):
            raise ConfigError(f"{where}: the scheme must be http:// or https://, "
                              f"not {m.group(1)}://")
        rest = rest[m.end():]
    rest = rest.rstrip("/")
    if any(c.isspace() for c in rest):
        raise ConfigError(f"{where} is not a server address ({_FORMS})")
    if any(c in rest for c in "/?#@"):
        raise ConfigError(f"{where}: give only the server's address ({_FORMS}), "
                          "without a path, query or user")
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{where} is not a server address ({_FORMS})")
    bracketed = host.startswith("[") and host.endswith("]") and len(host) > 2
    if not bracketed and (":" in host or "[" in host or "]" in host):
        raise ConfigError(f"{where}: write an IPv6 host in brackets, e.g. [::1]:8000")
    if not port.isascii() or not port.isdigit():
        raise ConfigError(f"{where}: the port {port!r} is not a number ({_FORMS})")
    number = int(port)
    if not 1 <= number <= 65535:
        raise ConfigError(f"{where}: the port {number} is out of range (1-65535)")
    address = f"{host}:{number}"
    return f"https://{address}" if scheme == "https" else address
