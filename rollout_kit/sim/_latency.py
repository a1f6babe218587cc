"""Tier-1 latency model: prefill time, load-dependent inter-token latency, lognormal jitter.

* ``ttft = (prefill_overhead + uncached_prompt_tokens × prefill_per_token) × J``
* ``itl = itl_s × LF(running) × J`` with
  ``LF = 1 + (load_factor − 1)(running − 1)/(max_num_seqs − 1)`` (1 when ``max_num_seqs == 1``)
* ``J`` is a mean-preserving lognormal factor: ``σ = sqrt(ln(1 + cv²))``,
  ``J = exp(σZ − σ²/2)``, drawn from a seeded ``random.Random``.

Everything is multiplied by ``time_scale``; ``zero_latency`` makes every duration 0. Callers
turn durations into absolute deadlines on the loop clock so errors do not accumulate.
"""

from __future__ import annotations

import math
import random

from ._config import SimConfig


class LatencyModel:
    """Durations (seconds, already scaled) for one server's requests."""

    __slots__ = ("_base_itl", "_lf_slope", "_mu", "_overhead", "_per_tok", "_rng", "_sigma",
                 "zero")

    def __init__(self, config: SimConfig) -> None:
        s = config.time_scale
        self.zero = config.zero_latency or s == 0
        self._overhead = config.prefill_overhead_s * s
        self._per_tok = config.prefill_per_token_s * s
        self._base_itl = config.itl_s * s
        n = config.max_num_seqs
        self._lf_slope = (config.load_factor - 1.0) / (n - 1) if n > 1 else 0.0
        self._sigma = math.sqrt(math.log1p(config.jitter_cv ** 2))
        self._mu = -0.5 * self._sigma ** 2
        self._rng = random.Random(config.seed ^ 0x5EED)

    def jitter(self) -> float:
        """One mean-preserving lognormal factor (1.0 when the cv is 0)."""
        if self._sigma == 0.0:
            return 1.0
        return math.exp(self._mu + self._sigma * self._rng.gauss(0.0, 1.0))

    def load_factor(self, running: int) -> float:
        """``LF`` for ``running`` sequences (≥ 1)."""
        return 1.0 + self._lf_slope * (max(running, 1) - 1)

    def ttft(self, uncached_tokens: int) -> float:
        """Prefill duration for a prompt with ``uncached_tokens`` new tokens."""
        if self.zero:
            return 0.0
        return (self._overhead + uncached_tokens * self._per_tok) * self.jitter()

    def itl(self, running: int) -> float:
        """One inter-token interval while ``running`` sequences decode."""
        if self.zero:
            return 0.0
        return self._base_itl * self.load_factor(running) * self.jitter()

    def itl_mean(self, running: int) -> float:
        """The expected inter-token interval (no jitter) while ``running`` decode."""
        return 0.0 if self.zero else self._base_itl * self.load_factor(running)
