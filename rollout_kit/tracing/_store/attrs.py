"""Trace attribute values: the scalar types an attribute may hold, and the checks that
``annotate`` / ``increment`` run (a value that survives JSON, a name no computed column
has)."""

from __future__ import annotations

from collections.abc import Mapping

from ..._errors import ConfigError
from .. import _phases as phases
from ..schema import PHASE_SESSION_SUFFIX

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
SCALARS = (str, int, float, bool, type(None))

AttrValue = str | int | float | bool | None


def check_attrs(attrs: Mapping[str, object], reserved: frozenset[str]) -> None:
    """Reject attributes that would not survive JSON or would shadow a computed column.

    Values must be ``None``, ``bool``, ``str``, ``float`` or an ``int`` that fits in 64 bits
    (orjson rejects wider ints; a ``uuid4().int`` is 128 bits).

    Raises:
        ConfigError: a value of another type, an int beyond 64 bits, or a reserved name.
    """
    for name, value in attrs.items():
        if type(value) not in SCALARS and not isinstance(value, SCALARS):
            raise ConfigError(
                f"trace attribute {name!r} must be None, bool, int, float or str, got "
                f"{type(value).__name__} (convert it, e.g. str(value), before annotating)"
            )
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            raise ConfigError(f"trace attribute {name!r}={value} does not fit in 64 bits")
        if name in reserved or (name.endswith("_s") and phases.is_phase(name[:-2])) or (
                name.endswith(PHASE_SESSION_SUFFIX)
                and phases.is_phase(name[: -len(PHASE_SESSION_SUFFIX)])):
            raise ConfigError(f"trace attribute name {name!r} is reserved for a computed column")


def check_counts(counts: Mapping[str, object], reserved: frozenset[str]) -> None:
    """Like :func:`check_attrs`, for ``increment``: values must be int or float (not bool)."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"increment({name}=...) needs an int or float, got {type(value).__name__}"
            )
    check_attrs(counts, reserved)
