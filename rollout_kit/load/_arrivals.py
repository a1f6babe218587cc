"""Arrival processes for open-loop load: when each request is due, in seconds from the start.

The meaning is ``vllm bench serve``'s (``vllm/benchmarks/serve.py::get_request``):

* inter-arrival gaps are ``Gamma(shape=burstiness, scale=1 / (rate * burstiness))``, so the
  mean gap is ``1 / rate`` whatever the burstiness; ``burstiness=1`` is a Poisson process,
  ``< 1`` burstier, ``> 1`` smoother, ``inf`` a constant gap of ``1 / rate``;
* ``rate=inf`` sends everything at ``t = 0``;
* the first request waits one gap (offsets are the cumulative sum of the gaps);
* with a bound in requests, a fixed rate and ``normalize=True`` (vllm's behaviour), the
  offsets are rescaled so the last one lands exactly at ``n / rate`` — this closes the 1-2 %
  gap a finite sample of gaps leaves, so the offered rate is the asked one for every seed;
* ``ramp_up=(start_rps, end_rps)``: the rate of request ``i`` is
  ``start + (end - start) * i / (n - 1)`` (vllm's linear ramp-up; no rescaling), or, with a
  bound in time, ``start + (end - start) * t / duration`` at the current time ``t``;
* :meth:`Arrivals.schedule`: a fixed list of timestamps (a trace), replayed as given.

Randomness comes from a ``numpy.random.RandomState(seed)`` of its own (nothing global is
touched): ``vllm bench serve --seed S`` seeds numpy's global legacy generator with ``S`` and
draws its gaps from it, one per request, so the same seed, rate and burstiness give **the
same due times** in both tools (checked against vllm's own ``get_request``). The legacy
generator's streams are also the ones numpy keeps fixed across its versions.

Usage::

    Arrivals(rate=20.0).offsets(100)                # Poisson, 100 requests in 5 s
    Arrivals(rate=20.0, burstiness=0.5).until(60.0)  # bursty, every arrival within 60 s
    Arrivals.schedule([0.0, 0.1, 0.4]).offsets(3)   # fixed timestamps
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .._errors import ConfigError

#: gaps drawn per step when generating arrivals up to a time bound
_CHUNK = 4096


def _positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number > 0, got {value!r}")
    v = float(value)
    if math.isnan(v) or v <= 0 or (math.isinf(v) and not allow_inf):
        want = "> 0" if allow_inf else "> 0 and finite"
        raise ConfigError(f"{name} must be {want}, got {value!r}")
    return v


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrivals:
    """When requests are due: a rate with a burstiness, a linear ramp, or fixed timestamps.

    Args:
        rate: requests per second (``inf``: all at ``t = 0``). Ignored with ``ramp_up``.
        burstiness: the gamma shape (``vllm bench serve --burstiness``): 1 Poisson, ``< 1``
            burstier, ``> 1`` smoother, ``inf`` constant gaps.
        ramp_up: ``(start_rps, end_rps)``, a linear ramp over the run (both finite, > 0).
        seed: seed of the ``numpy.random.RandomState`` drawing the gaps (vllm's
            ``--seed``).
        normalize: rescale offsets so the ``n``-th lands at ``n / rate`` (vllm does; only
            for :meth:`offsets` with a finite ``rate`` and no ramp).
        timestamps: a fixed schedule (see :meth:`schedule`); the other fields are unused.

    Raises:
        ConfigError: ``rate`` or ``burstiness`` ≤ 0 or NaN, a bad ramp or bad timestamps.
    """

    rate: float = math.inf
    burstiness: float = 1.0
    ramp_up: tuple[float, float] | None = None
    seed: int = 0
    normalize: bool = True
    timestamps: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        _positive("rate", self.rate, allow_inf=True)
        _positive("burstiness", self.burstiness, allow_inf=True)
        if self.ramp_up is not None:
            if len(self.ramp_up) != 2:
                raise ConfigError(f"ramp_up must be (start_rps, end_rps), got {self.ramp_up!r}")
            _positive("ramp_up start_rps", self.ramp_up[0])
            _positive("ramp_up end_rps", self.ramp_up[1])
        if (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
                or self.seed >= 2**32):  # RandomState's range
            raise ConfigError(f"seed must be an int in [0, 2**32), got {self.seed!r}")
        if self.timestamps is not None:
            ts = np.asarray(self.timestamps, dtype=float)
            if ts.ndim != 1 or not len(ts):
                raise ConfigError("a schedule needs at least one timestamp")
            if not np.all(np.isfinite(ts)) or ts.min() < 0:
                raise ConfigError("schedule timestamps must be finite and >= 0")
            if np.any(np.diff(ts) < 0):
                raise ConfigError("schedule timestamps must be non-decreasing (sort them)")

    @classmethod
    def schedule(cls, timestamps: Iterable[float]) -> Arrivals:
        """A fixed schedule: request ``i`` is due at ``timestamps[i]`` seconds (a trace).

        Raises:
            ConfigError: empty, negative, NaN/inf or decreasing timestamps.
        """
        try:
            ts = tuple(float(t) for t in timestamps)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"schedule timestamps must be numbers: {exc}") from None
        return cls(timestamps=ts)

    # -- what the process is -----------------------------------------------------------
    @property
    def kind(self) -> str:
        """``"schedule"``, ``"ramp"``, ``"burst"`` (all at 0), ``"constant"``,
        ``"poisson"`` or ``"gamma"``."""
        if self.timestamps is not None:
            return "schedule"
        if self.ramp_up is not None:
            return "ramp"
        if math.isinf(self.rate):
            return "burst"
        if math.isinf(self.burstiness):
            return "constant"
        return "poisson" if self.burstiness == 1.0 else "gamma"

    def _gaps(self, rng: np.random.RandomState, rates: np.ndarray | float,
              size: int) -> np.ndarray:
        if math.isinf(self.burstiness):
            return np.full(size, 1.0) / rates
        scale = 1.0 / (rates * self.burstiness)
        return rng.gamma(shape=self.burstiness, scale=scale, size=size)

    def offsets(self, n: int) -> np.ndarray:
        """The due times of ``n`` requests, seconds from the start (float64, non-decreasing).

        Raises:
            ConfigError: ``n`` < 0, or more requests than a fixed schedule holds.
        """
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise ConfigError(f"the number of requests must be an int >= 0, got {n!r}")
        n = int(n)
        if self.timestamps is not None:
            if n > len(self.timestamps):
                raise ConfigError(f"the schedule holds {len(self.timestamps)} timestamps; "
                                  f"{n} requests asked")
            return np.asarray(self.timestamps[:n], dtype=float)
        if n == 0:
            return np.zeros(0)
        rng = np.random.RandomState(self.seed)
        if self.ramp_up is not None:
            start, end = self.ramp_up
            progress = np.arange(n) / max(n - 1, 1)
            rates = start + (end - start) * progress
            return np.cumsum(self._gaps(rng, rates, n))
        if math.isinf(self.rate):
            return np.zeros(n)
        out = np.cumsum(self._gaps(rng, self.rate, n))
        if self.normalize and out[-1] > 0:
            out *= (n / self.rate) / out[-1]
        return out

    def until(self, duration: float, *, limit: int | None = None) -> np.ndarray:
        """The due times of every arrival before ``duration`` seconds (at most ``limit``).

        Not rescaled (a time bound has no fixed count). A ramp moves with time.

        Raises:
            ConfigError: ``duration`` not > 0 and finite, or ``rate=inf`` with no ``limit``.
        """
        d = _positive("duration", duration)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise ConfigError(f"limit must be an int >= 0, got {limit!r}")
        if self.timestamps is not None:
            ts = np.asarray(self.timestamps, dtype=float)
            ts = ts[ts < d]
            return ts[:limit]
        if self.ramp_up is None and math.isinf(self.rate):
            if limit is None:
                raise ConfigError("rate=inf (everything at t=0) needs a bound in requests "
                                  "(num_requests), not only a duration")
            return np.zeros(limit)
        rng = np.random.RandomState(self.seed)
        if self.ramp_up is not None:
            start, end = self.ramp_up
            times: list[float] = []
            t = 0.0
            while limit is None or len(times) < limit:
                rate = start + (end - start) * (t / d)  # t < d here
                t += float(self._gaps(rng, rate, 1)[0])
                if t >= d:
                    break
                times.append(t)
            return np.asarray(times)
        parts: list[np.ndarray] = []
        t0 = 0.0
        count = 0
        while True:
            chunk = t0 + np.cumsum(self._gaps(rng, self.rate, _CHUNK))
            keep = chunk[chunk < d]
            parts.append(keep)
            count += len(keep)
            if len(keep) < _CHUNK or (limit is not None and count >= limit):
                break
            t0 = float(chunk[-1])
        out = np.concatenate(parts)
        return out[:limit]

    def offered_rate(self, offsets: np.ndarray) -> float:
        """The rate these offsets offer: ``len / last`` (``inf`` when all are at 0)."""
        if not len(offsets):
            return math.nan
        last = float(offsets[-1])
        return math.inf if last <= 0 else len(offsets) / last
