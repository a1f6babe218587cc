"""Server-side metrics of a simulated server, rendered as Prometheus text with real names.

``MetricsRecorder`` collects counters and histograms as sequences finish; ``render_vllm``
and ``render_sglang`` print them under vLLM (``vllm:*``, labels ``model_name``, ``engine``)
and SGLang 0.5.23 (``sglang:*``, labels ``model_name``, ``engine_type``, ``tp_rank``, …) names.
Counters end in ``_total``; histograms have ``_bucket``/``_sum``/``_count``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Histogram", "MetricsRecorder", "render_sglang", "render_vllm"]

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

    def render(self, name: str, labels: str, help_: str) -> list[str]:
        """Prometheus text lines (``# HELP``, ``# TYPE``, buckets, sum, count)."""
        lines = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        acc = 0
        sep = "," if labels else ""
        for bound, c in zip(self.bounds, self.counts, strict=False):
            acc += c
            lines.append(f'{name}_bucket{{{labels}{sep}le="{float(bound)}"}} {float(acc)}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {float(self.count)}')
        lines.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        lines.append(f"{name}_count{{{labels}}} {float(self.count)}")
        return lines


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


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _scalar(lines: list[str], name: str, kind: str, help_: str, labels: str,
            value: float) -> None:
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} {kind}")
    lines.append(f"{name}{{{labels}}} {float(value)!r}")


def render_vllm(rec: MetricsRecorder, *, model: str, running: int, waiting: int,
                kv_usage: float) -> str:
    """Prometheus text with vLLM metric names."""
    rec.flush()
    lb = f'engine="0",model_name="{_esc(model)}"'
    out: list[str] = []
    _scalar(out, "vllm:num_requests_running", "gauge",
            "Number of requests in model execution batches.", lb, running)
    _scalar(out, "vllm:num_requests_waiting", "gauge",
            "Number of requests waiting to be processed.", lb, waiting)
    _scalar(out, "vllm:kv_cache_usage_perc", "gauge",
            "KV-cache usage. 1 means 100 percent usage.", lb, kv_usage)
    _scalar(out, "vllm:num_preemptions_total", "counter",
            "Cumulative number of preemption from the engine.", lb, rec.preemptions)
    _scalar(out, "vllm:prompt_tokens_total", "counter",
            "Number of prefill tokens processed.", lb, rec.prompt_tokens)
    _scalar(out, "vllm:generation_tokens_total", "counter",
            "Number of generation tokens processed.", lb, rec.generation_tokens)
    _scalar(out, "vllm:prefix_cache_queries_total", "counter",
            "Prefix cache queries, in terms of number of queried tokens.", lb,
            rec.prefix_queries)
    _scalar(out, "vllm:prefix_cache_hits_total", "counter",
            "Prefix cache hits, in terms of number of cached tokens.", lb, rec.prefix_hits)
    out.append("# HELP vllm:request_success_total Count of successfully processed requests.")
    out.append("# TYPE vllm:request_success_total counter")
    for reason in ("stop", "length", "abort"):
        out.append(f'vllm:request_success_total{{{lb},finished_reason="{reason}"}} '
                   f"{float(getattr(rec.finished, reason))!r}")
    for name, hist, help_ in (
        ("vllm:time_to_first_token_seconds", rec.ttft, "Histogram of time to first token."),
        ("vllm:inter_token_latency_seconds", rec.itl, "Histogram of inter-token latency."),
        ("vllm:e2e_request_latency_seconds", rec.e2e, "Histogram of e2e request latency."),
        ("vllm:request_queue_time_seconds", rec.queue, "Time spent in WAITING phase."),
        ("vllm:request_prefill_time_seconds", rec.prefill, "Time spent in PREFILL phase."),
        ("vllm:request_decode_time_seconds", rec.decode, "Time spent in DECODE phase."),
        ("vllm:request_inference_time_seconds", rec.inference,
         "Time spent in RUNNING phase."),
        ("vllm:request_prompt_tokens", rec.req_prompt_tokens,
         "Number of prefill tokens processed."),
        ("vllm:request_generation_tokens", rec.req_gen_tokens,
         "Number of generation tokens processed."),
        ("vllm:request_params_max_tokens", rec.max_tokens_param,
         "Histogram of the max_tokens request parameter."),
        ("vllm:request_params_n", rec.n_param, "Histogram of the n request parameter."),
    ):
        out.extend(hist.render(name, lb, help_))
    return "\n".join(out) + "\n"


def render_sglang(rec: MetricsRecorder, *, model: str, running: int, waiting: int,
                  paused: int, token_usage: float, used_tokens: int,
                  gen_throughput: float) -> str:
    """Prometheus text with SGLang 0.5.23 metric names."""
    rec.flush()
    base = f'engine_type="unified",model_name="{_esc(model)}"'
    sched = f'{base},moe_ep_rank="0",pp_rank="0",tp_rank="0",dp_rank="0"'
    out: list[str] = []
    hit_rate = rec.prefix_hits / rec.prefix_queries if rec.prefix_queries else 0.0
    _scalar(out, "sglang:num_running_reqs", "gauge", "The number of running requests.",
            sched, running)
    _scalar(out, "sglang:num_queue_reqs", "gauge",
            "The number of requests in the waiting queue.", sched, waiting)
    _scalar(out, "sglang:num_paused_reqs", "gauge", "The number of paused requests.",
            sched, paused)
    _scalar(out, "sglang:num_retracted_reqs", "gauge", "The number of retracted requests.",
            sched, 0)
    _scalar(out, "sglang:num_used_tokens", "gauge", "The number of used tokens.", sched,
            used_tokens)
    _scalar(out, "sglang:token_usage", "gauge", "The token usage.", sched, token_usage)
    _scalar(out, "sglang:gen_throughput", "gauge", "The generation throughput (token/s).",
            sched, gen_throughput)
    _scalar(out, "sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", sched,
            hit_rate)
    _scalar(out, "sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
            base, rec.prompt_tokens)
    _scalar(out, "sglang:generation_tokens_total", "counter",
            "Number of generation tokens processed.", base, rec.generation_tokens)
    _scalar(out, "sglang:cached_tokens_total", "counter",
            "Number of cached prompt tokens.", base, rec.cached_tokens)
    _scalar(out, "sglang:num_requests_total", "counter", "Number of requests processed.",
            base, rec.num_requests)
    _scalar(out, "sglang:num_aborted_requests_total", "counter",
            "Number of requests aborted.", base, rec.finished.abort)
    for name, hist, help_ in (
        ("sglang:time_to_first_token_seconds", rec.ttft, "Histogram of time to first token."),
        ("sglang:inter_token_latency_seconds", rec.itl, "Histogram of inter-token latency."),
        ("sglang:e2e_request_latency_seconds", rec.e2e,
         "Histogram of End-to-end request latency."),
        ("sglang:queue_time_seconds", rec.queue, "Histogram of queueing time."),
    ):
        out.extend(hist.render(name, base, help_))
    return "\n".join(out) + "\n"
