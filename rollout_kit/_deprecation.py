"""Deprecated names kept for one release: each warns once, then behaves like the new one."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["deprecated_alias", "warn_renamed"]

F = TypeVar("F", bound=Callable[..., Any])

_warned: set[str] = set()


def warn_renamed(old: str, new: str) -> None:
    """Warn once per process that ``old`` is now called ``new``."""
    if old in _warned:
        return
    _warned.add(old)
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=3)


def deprecated_alias(func: F, old: str, new: str) -> F:
    """``func`` under its old name: the first call warns that it is now ``new``."""

    @functools.wraps(func)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warn_renamed(old, new)
        return func(*args, **kwargs)

    alias.__name__ = old.rpartition(".")[2]
    alias.__doc__ = f"Deprecated alias of :meth:`{new}` (removed in the next release)."
    return alias  # type: ignore[return-value]
