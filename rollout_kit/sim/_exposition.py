"""``GET /metrics`` of a simulated server: ``prometheus_client`` collectors with real names.

The collectors read the server's ``MetricsRecorder`` and scheduler state at scrape time (the
request path does no work for them) and ``generate_latest`` prints them: vLLM names
(``vllm:*``, labels ``engine``, ``model_name``) or SGLang 0.5.23 names (``sglang:*``, labels
``engine_type``, ``model_name``, ``tp_rank``, …). Counters end in ``_total``; histograms have
``_bucket``/``_count``/``_sum``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ._context import ServerContext
from ._metrics import Histogram, MetricsRecorder


def _histogram(name: str, help_: str, labels: Sequence[str], values: Sequence[str],
               hist: Histogram) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    acc = 0
    for bound, c in zip(hist.bounds, hist.counts, strict=False):
        acc += c
        buckets.append((str(float(bound)), acc))
    buckets.append(("+Inf", hist.count))
    fam = HistogramMetricFamily(name, help_, labels=labels)
    fam.add_metric(values, buckets, hist.sum)
    return fam


def _gauge(name: str, help_: str, labels: Sequence[str], values: Sequence[str],
           value: float) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, help_, labels=labels)
    fam.add_metric(values, value)
    return fam


def _counter(name: str, help_: str, labels: Sequence[str], values: Sequence[str],
             value: float) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, help_, labels=labels)
    fam.add_metric(values, value)
    return fam


def _used_tokens(ctx: ServerContext) -> int:
    return sum(s.prompt_tokens + s.n_done for s in ctx.engine.live if s.state == "running")


def gen_throughput(ctx: ServerContext) -> float:
    """Generated tokens per second since the server started."""
    engine = ctx.engine
    up = engine.loop.time() - engine.started_at
    return engine.metrics.generation_tokens / up if up > 0 else 0.0


class _ServerCollector(Collector):
    """Reads one simulated server's state when scraped."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        self.ctx.engine.metrics.flush()
        return self._families(self.ctx, self.ctx.engine.metrics)

    def _families(self, ctx: ServerContext, rec: MetricsRecorder) -> Iterator[Metric]:
        raise NotImplementedError


class VLLMCollector(_ServerCollector):
    """vLLM's metrics of one simulated server."""

    def _families(self, ctx: ServerContext, rec: MetricsRecorder) -> Iterator[Metric]:
        e = ctx.engine
        cfg = ctx.config
        lb = ("engine", "model_name")
        lv = ("0", cfg.model_name)
        yield _gauge("vllm:num_requests_running",
                     "Number of requests in model execution batches.", lb, lv, e.running)
        yield _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                     lb, lv, e.num_waiting)
        yield _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                     lb, lv, _used_tokens(ctx) / (cfg.context_length * cfg.max_num_seqs))
        for name, help_, value in (
            ("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
             rec.preemptions),
            ("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
             rec.prompt_tokens),
            ("vllm:generation_tokens_total", "Number of generation tokens processed.",
             rec.generation_tokens),
            ("vllm:prefix_cache_queries_total",
             "Prefix cache queries, in terms of number of queried tokens.", rec.prefix_queries),
            ("vllm:prefix_cache_hits_total",
             "Prefix cache hits, in terms of number of cached tokens.", rec.prefix_hits),
        ):
            yield _counter(name, help_, lb, lv, value)
        success = CounterMetricFamily("vllm:request_success_total",
                                      "Count of successfully processed requests.",
                                      labels=(*lb, "finished_reason"))
        for reason in ("stop", "length", "abort"):
            success.add_metric((*lv, reason), getattr(rec.finished, reason))
        yield success
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
            yield _histogram(name, help_, lb, lv, hist)


class SGLangCollector(_ServerCollector):
    """SGLang 0.5.23's metrics of one simulated server."""

    def _families(self, ctx: ServerContext, rec: MetricsRecorder) -> Iterator[Metric]:
        e = ctx.engine
        cfg = ctx.config
        base = ("engine_type", "model_name")
        base_v = ("unified", cfg.model_name)
        sched = (*base, "moe_ep_rank", "pp_rank", "tp_rank", "dp_rank")
        sched_v = (*base_v, "0", "0", "0", "0")
        used = _used_tokens(ctx)
        hit_rate = rec.prefix_hits / rec.prefix_queries if rec.prefix_queries else 0.0
        for name, help_, value in (
            ("sglang:num_running_reqs", "The number of running requests.", e.running),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
             e.num_waiting),
            ("sglang:num_paused_reqs", "The number of paused requests.", 1 if e.frozen else 0),
            ("sglang:num_retracted_reqs", "The number of retracted requests.", 0),
            ("sglang:num_used_tokens", "The number of used tokens.", used),
            ("sglang:token_usage", "The token usage.",
             used / (cfg.context_length * cfg.max_num_seqs)),
            ("sglang:gen_throughput", "The generation throughput (token/s).",
             gen_throughput(ctx)),
            ("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate),
        ):
            yield _gauge(name, help_, sched, sched_v, value)
        for name, help_, value in (
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
             rec.prompt_tokens),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.",
             rec.generation_tokens),
            ("sglang:cached_tokens_total", "Number of cached prompt tokens.",
             rec.cached_tokens),
            ("sglang:num_requests_total", "Number of requests processed.", rec.num_requests),
            ("sglang:num_aborted_requests_total", "Number of requests aborted.",
             rec.finished.abort),
        ):
            yield _counter(name, help_, base, base_v, value)
        for name, hist, help_ in (
            ("sglang:time_to_first_token_seconds", rec.ttft,
             "Histogram of time to first token."),
            ("sglang:inter_token_latency_seconds", rec.itl, "Histogram of inter-token latency."),
            ("sglang:e2e_request_latency_seconds", rec.e2e,
             "Histogram of End-to-end request latency."),
            ("sglang:queue_time_seconds", rec.queue, "Histogram of queueing time."),
        ):
            yield _histogram(name, help_, base, base_v, hist)


def metrics_response(collector: Collector,
                     headers: dict[str, str] | None = None) -> web.Response:
    """The Prometheus text of ``collector`` as a ``text/plain`` response."""
    return web.Response(body=generate_latest(collector), content_type="text/plain",
                        charset="utf-8", headers=headers)
