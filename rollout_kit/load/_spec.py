"""What load to offer: :class:`LoadSpec` (arrivals, a bound, a concurrency cap, warm-up).

A spec turns into the run's schedule with :meth:`LoadSpec.schedule`: the due times, in
seconds from the run's start, of every request the run sends (warm-up requests first). The
runner (:mod:`._runner`) sends on that schedule; ``max_concurrency`` makes a due request wait in
the client queue for a slot, as ``vllm bench serve --max-concurrency`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._errors import ConfigError
from ._arrivals import Arrivals


def _opt_int(name: str, value: object, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum} or None, got {value!r}")


def _opt_seconds(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 < float(value) < math.inf):
        raise ConfigError(f"{name} must be a number of seconds > 0 and finite, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """What load to offer: arrivals, a bound, a concurrency cap and warm-up.

    Args:
        arrivals: the arrival process (default: everything at ``t = 0``).
        num_requests: bound in requests (default, without ``duration``: one request per
            item of ``requests``, or per timestamp of a fixed schedule).
        duration: bound in seconds: requests due before it are sent (with
            ``num_requests`` too, whichever comes first).
        max_concurrency: at most this many requests in flight; a due request waits in the
            client queue for a slot (``queue_wait_s``), as ``vllm bench serve
            --max-concurrency`` does.
        warmup: the first ``warmup`` requests are sent on the schedule but left out of the
            statistics (``warmup`` column).
        drain_timeout: after the last send, wait at most this long for the requests in
            flight, then cancel them (they end ``cancelled``); default: wait for all.

    Raises:
        ConfigError: a bad field.
    """

    arrivals: Arrivals = field(default_factory=Arrivals)
    num_requests: int | None = None
    duration: float | None = None
    max_concurrency: int | None = None
    warmup: int = 0
    drain_timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.arrivals, Arrivals):
            raise ConfigError(f"arrivals must be an Arrivals, got {type(self.arrivals).__name__}")
        _opt_int("num_requests", self.num_requests, 1)
        _opt_seconds("duration", self.duration)
        _opt_int("max_concurrency", self.max_concurrency, 1)
        _opt_int("warmup", self.warmup, 0)
        _opt_seconds("drain_timeout", self.drain_timeout)

    def schedule(self, n_requests: int) -> np.ndarray:
        """The due times of this spec's requests (``n_requests``: the dataset's size).

        Raises:
            ConfigError: no bound is possible, or warm-up leaves nothing to measure.
        """
        arr = self.arrivals
        if self.num_requests is not None:
            offsets = arr.offsets(self.num_requests)
            if self.duration is not None:
                offsets = offsets[offsets < self.duration]
        elif self.duration is not None:
            offsets = arr.until(self.duration)
        else:
            n = len(arr.timestamps) if arr.timestamps is not None else n_requests
            offsets = arr.offsets(n)
        if self.warmup >= len(offsets):
            raise ConfigError(f"warmup={self.warmup} leaves none of the {len(offsets)} "
                              "scheduled requests to measure")
        return offsets
