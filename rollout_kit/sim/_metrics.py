"""Server-side metrics of a simulated server: counters and histograms as sequences finish.

``MetricsRecorder`` is what the request path writes to (plain ints, batched histogram
observations); ``exposition`` reads it at scrape time for ``GET /metrics``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

_TIME_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
                0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                  100000)


class Histogram:
    """A cumulative-bucket histogram."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """Record ``value`` ``n`` times."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n


@dataclass(slots=True)
class _Finished:
    stop: int = 0
    length: int = 0
    abort: int = 0


class MetricsRecorder:
    """Counters and histograms one server accumulates."""

    __slots__ = (
        "_pending",
        "cached_tokens",
        "decode",
        "e2e",
        "finished",
        "generation_tokens",
        "inference",
        "itl",
        "max_tokens_param",
        "n_param",
        "num_requests",
        "preemptions",
        "prefill",
        "prefix_hits",
        "prefix_queries",
        "prompt_tokens",
        "queue",
        "req_gen_tokens",
        "req_prompt_tokens",
        "ttft",
    )

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cached_tokens = 0
        self.num_requests = 0
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.finished = _Finished()
        self.ttft = Histogram(_TIME_BUCKETS)
        self.itl = Histogram(_ITL_BUCKETS)
        self.e2e = Histogram(_TIME_BUCKETS)
        self.queue = Histogram(_TIME_BUCKETS)
        self.prefill = Histogram(_TIME_BUCKETS)
        self.decode = Histogram(_TIME_BUCKETS)
        self.inference = Histogram(_TIME_BUCKETS)
        self.req_prompt_tokens = Histogram(_TOKEN_BUCKETS)
        self.req_gen_tokens = Histogram(_TOKEN_BUCKETS)
        self.max_tokens_param = Histogram(_TOKEN_BUCKETS)
        self.n_param = Histogram((1, 2, 5, 10, 20))
        self._pending: list[tuple[int, int, float, float, float, float, int]] = []

    def record(self, *, prompt_tokens: int, cached_tokens: int, generated: int, finish: str,
               queue_s: float, prefill_s: float, decode_s: float, e2e_s: float,
               max_tokens: int) -> None:
        """Account one finished (or aborted) sequence.

        Counters update at once; histogram observations are batched (``flush``) to keep
        the request path cheap.
        """
        self.num_requests += 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += generated
        self.cached_tokens += cached_tokens
        if finish == "abort":
            self.finished.abort += 1
        elif finish == "length":
            self.finished.length += 1
        else:
            self.finished.stop += 1
        pending = self._pending
        pending.append((prompt_tokens, generated, queue_s, prefill_s, decode_s, e2e_s,
                        max_tokens))
        if len(pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        """Fold the batched observations into the histograms."""
        pending = self._pending
        self._pending = []
        for prompt_tokens, generated, queue_s, prefill_s, decode_s, e2e_s, max_tokens \
                in pending:
            self.queue.observe(queue_s)
            self.e2e.observe(e2e_s)
            self.req_prompt_tokens.observe(prompt_tokens)
            self.req_gen_tokens.observe(generated)
            self.max_tokens_param.observe(max_tokens)
            self.n_param.observe(1)
            if generated:
                self.ttft.observe(queue_s + prefill_s)
                self.prefill.observe(prefill_s)
                self.decode.observe(decode_s)
                self.inference.observe(prefill_s + decode_s)
                if generated > 1:
                    self.itl.observe(decode_s / (generated - 1), generated - 1)
