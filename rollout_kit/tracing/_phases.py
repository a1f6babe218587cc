"""Phase registry: the names of the spans a tracer records, each with a plot colour.

A phase is just a name. ``generate``, ``reward`` and ``toolcall`` are built in; any other name
is registered with :func:`register_phase` or, implicitly, the first time a tracer opens a
phase of that name. Every registered phase gets a ``<name>_s`` (wall time) column in the
tasks and sessions DataFrames, and a ``<name>_session_s`` (summed session-seconds) column in
the tasks frame, without any source edit (AReaL needs four edits per phase).

Phases are numbered in registration order; the tracer stores that small integer code per
span, and the registry is process-wide so codes are shared by every tracer. Lookups
(:func:`phase_code` of a known name, :func:`phase_name`) are plain dict/list reads without
the lock: registration appends the name and colour before it publishes the code.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from .._errors import ConfigError
from .schema import BUILTIN_PHASES

# tab10 without the colours of the built-ins, then tab20's light tones: distinct and readable
_BUILTIN_COLORS = {"generate": "#2563eb", "reward": "#dc2626", "toolcall": "#f59e0b"}
PALETTE = (
    "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
    "#dbdb8d", "#9edae5",
)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")

_lock = threading.Lock()
_names: list[str] = []
_codes: dict[str, int] = {}
#: the registered codes by name, read only (a live view: ``CODES.get(name)`` in hot paths,
#: :func:`phase_code` to register a new name)
CODES: Mapping[str, int] = MappingProxyType(_codes)
_colors: dict[str, str] = {}


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"phase name must be an identifier-like str of at most 64 chars, got {name!r}"
        )
    return name


def register_phase(name: str, color: str | None = None) -> None:
    """Register a phase (idempotent); give it ``color`` or the next palette colour.

    Registering an existing phase with a colour changes its colour; without one it is a
    no-op.

    Raises:
        ConfigError: ``name`` is not an identifier-like string, or ``color`` is not a str.
    """
    _check_name(name)
    if color is not None and not isinstance(color, str):
        raise ConfigError(f"phase color must be a str such as '#1f77b4', got {color!r}")
    with _lock:
        if name not in _codes:
            code = len(_names)
            _names.append(name)
            _colors[name] = color or PALETTE[(code - len(BUILTIN_PHASES)) % len(PALETTE)]
            _codes[name] = code  # last: a reader that finds the code finds name and colour
        elif color is not None:
            _colors[name] = color


def phase_code(name: str) -> int:
    """The registry code of ``name``, registering the phase on first use.

    A known name costs one dict lookup (no lock).
    """
    try:
        return _codes[name]
    except KeyError:
        register_phase(name)
        return _codes[name]


def phase_name(code: int) -> str:
    """The phase name for a registry code."""
    return _names[code]


def phase_names() -> Sequence[str]:
    """Phase names indexed by code: a read-only live view (no copy), for hot loops."""
    return _names


def is_phase(name: str) -> bool:
    """Whether ``name`` is a registered phase."""
    return name in _codes


def phase_color(name: str) -> str:
    """The colour of a registered phase.

    Raises:
        ConfigError: the phase is not registered.
    """
    try:
        return _colors[name]
    except KeyError:
        raise ConfigError(
            f"phase {name!r} is not registered; registered: {registered_phases()}"
        ) from None


def registered_phases() -> list[str]:
    """All registered phase names, built-ins first, then in registration order."""
    return list(_names)


for _name in BUILTIN_PHASES:
    register_phase(_name, _BUILTIN_COLORS[_name])
