"""Fault injection for a simulated server: which requests fail, and how.

A ``FaultPlan`` is mutable so tests can change it while the server runs (``SimServer.
set_faults``, or ``POST /sim/faults``). Each generation request draws at most one fault: first
from the forced queue (``force(kind, count)``), else from the seeded rates, tried in the order
of ``FAULT_KINDS`` against one uniform draw, so a given seed and request order always give the
same faults.

Kinds:

* ``error``: answer ``status`` (one of ``error_statuses``) in the flavour's error shape;
  429/503 carry ``Retry-After``.
* ``hang``: never answer; the handler waits until the client goes away or the server stops.
* ``slow_first_byte``: wait ``slow_first_byte_s`` real seconds before answering normally.
* ``reset``: close the connection abruptly (mid-stream when streaming, before any byte
  otherwise).
* ``malformed``: HTTP 200 whose body (or one SSE event) is not valid JSON.
* ``truncate``: a stream that stops half-way without ``data: [DONE]``; a non-stream body cut
  in half.
* ``abort``: the request ends early with ``finish_reason`` abort and partial output, as if
  ``/abort_request`` had hit it half-way.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .._errors import ConfigError

FaultKind = Literal["error", "hang", "slow_first_byte", "reset", "malformed", "truncate", "abort"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "error", "hang", "slow_first_byte", "reset", "malformed", "truncate", "abort",
)
_ALLOWED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Fault:
    """One drawn fault: its kind and, for ``error``, the HTTP status."""

    kind: FaultKind
    status: int = 500


@dataclass(kw_only=True)
class FaultPlan:
    """Seeded fault rates plus a queue of forced faults.

    Attributes:
        error_rate: probability of an ``error`` fault.
        error_statuses: statuses an ``error`` fault picks from (500, 502, 503, 429, 504, 408).
        retry_after_s: ``Retry-After`` seconds on 429/503 errors (``None`` = no header).
        hang_rate: probability of a ``hang``.
        slow_first_byte_rate: probability of a ``slow_first_byte`` delay.
        slow_first_byte_s: that delay in real seconds (not scaled by ``time_scale``).
        reset_rate: probability of a connection ``reset``.
        malformed_rate: probability of a ``malformed`` JSON body.
        truncate_rate: probability of a ``truncate``d stream/body.
        abort_rate: probability of an ``abort`` half-way.
        seed: seeds the draws.
    """

    error_rate: float = 0.0
    error_statuses: tuple[int, ...] = (500,)
    retry_after_s: float | None = 1.0
    hang_rate: float = 0.0
    slow_first_byte_rate: float = 0.0
    slow_first_byte_s: float = 1.0
    reset_rate: float = 0.0
    malformed_rate: float = 0.0
    truncate_rate: float = 0.0
    abort_rate: float = 0.0
    seed: int = 0
    _forced: deque[Fault] = field(default_factory=deque, init=False, repr=False,
                                  compare=False)
    _rng: random.Random = field(init=False, repr=False, compare=False)
    _active: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.error_statuses = tuple(self.error_statuses)
        self._validate()
        self._rng = random.Random(self.seed)
        self._refresh()

    def _rates(self) -> tuple[float, ...]:
        return (self.error_rate, self.hang_rate, self.slow_first_byte_rate, self.reset_rate,
                self.malformed_rate, self.truncate_rate, self.abort_rate)

    def _validate(self) -> None:
        for kind, rate in zip(FAULT_KINDS, self._rates(), strict=True):
            if not (isinstance(rate, int | float) and not isinstance(rate, bool)
                    and 0.0 <= rate <= 1.0):
                raise ConfigError(f"{kind}_rate must be a number in [0, 1], got {rate!r}")
        if sum(self._rates()) > 1.0 + 1e-9:
            raise ConfigError("the fault rates must add up to at most 1")
        if not self.error_statuses or any(
                s not in _ALLOWED_STATUSES for s in self.error_statuses):
            raise ConfigError(f"error_statuses must be a non-empty subset of "
                              f"{sorted(_ALLOWED_STATUSES)}, got {self.error_statuses!r}")
        if self.retry_after_s is not None and not (
                isinstance(self.retry_after_s, int | float) and self.retry_after_s >= 0):
            raise ConfigError("retry_after_s must be None or a number >= 0")
        if not (isinstance(self.slow_first_byte_s, int | float)
                and math.isfinite(self.slow_first_byte_s) and self.slow_first_byte_s >= 0):
            raise ConfigError("slow_first_byte_s must be a number >= 0")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError("seed must be an int")

    def _refresh(self) -> None:
        self._active = bool(self._forced) or any(r > 0 for r in self._rates())

    def copy(self) -> FaultPlan:
        """A fresh plan with the same settings (forced faults are not copied)."""
        return FaultPlan(**self.settings())

    def settings(self) -> dict[str, Any]:
        """The public settings as a dict (JSON-friendly)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        out["error_statuses"] = list(self.error_statuses)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Settings plus the forced faults still queued."""
        out = self.settings()
        out["forced"] = [{"kind": f.kind, "status": f.status} for f in self._forced]
        return out

    def update(self, **settings: Any) -> None:
        """Change settings in place (validated; a new ``seed`` restarts the draws).

        Raises:
            ConfigError: unknown setting or invalid value (the plan is left unchanged).
        """
        names = {f.name for f in fields(self) if not f.name.startswith("_")}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise ConfigError(f"unknown FaultPlan setting(s): {', '.join(unknown)}")
        old = self.settings()
        for k, v in settings.items():
            setattr(self, k, tuple(v) if k == "error_statuses" else v)
        try:
            self._validate()
        except ConfigError:
            for k, v in old.items():
                setattr(self, k, tuple(v) if k == "error_statuses" else v)
            raise
        if "seed" in settings:
            self._rng = random.Random(self.seed)
        self._refresh()

    def clear(self) -> None:
        """No faults any more: every rate 0 and the forced queue emptied."""
        self.update(error_rate=0.0, hang_rate=0.0, slow_first_byte_rate=0.0, reset_rate=0.0,
                    malformed_rate=0.0, truncate_rate=0.0, abort_rate=0.0)
        self._forced.clear()
        self._refresh()

    def force(self, kind: FaultKind, count: int = 1, *, status: int | None = None) -> None:
        """Make the next ``count`` generation requests fail with ``kind``.

        Args:
            kind: one of ``FAULT_KINDS``.
            count: how many requests.
            status: HTTP status for ``error`` (default: the first of ``error_statuses``).

        Raises:
            ConfigError: unknown kind, bad count or status.
        """
        if kind not in FAULT_KINDS:
            raise ConfigError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ConfigError(f"count must be an int >= 0, got {count!r}")
        st = self.error_statuses[0] if status is None else status
        if st not in _ALLOWED_STATUSES:
            raise ConfigError(f"status must be one of {sorted(_ALLOWED_STATUSES)}, got {st!r}")
        self._forced.extend(Fault(kind, st) for _ in range(count))
        self._refresh()

    @property
    def active(self) -> bool:
        """Whether any fault can be drawn (cheap check for the hot path)."""
        return self._active

    def draw(self) -> Fault | None:
        """The fault for the next generation request, or ``None``."""
        if not self._active:
            return None
        if self._forced:
            f = self._forced.popleft()
            self._refresh()
            return f
        u = self._rng.random()
        acc = 0.0
        for kind, rate in zip(FAULT_KINDS, self._rates(), strict=True):
            acc += rate
            if u < acc:
                status = 500
                if kind == "error":
                    status = self.error_statuses[self._rng.randrange(len(self.error_statuses))]
                return Fault(kind, status)
        return None
