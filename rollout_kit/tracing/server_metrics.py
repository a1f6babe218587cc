"""Which server metrics a run keeps, and the named series made of them: one table for the
scraper (:class:`~rollout_kit.engines.MetricsScraper`, which keeps only
:data:`KEPT_METRICS`) and for
:func:`rollout_kit.analysis.server_series` (which computes :data:`SERIES`).

A source is ``(how, names…)``; the first source of a series whose metrics a server exposes
gives that series for that server:

* ``sum``: a gauge, summed over its label sets (engines, data-parallel ranks);
* ``mean``: a gauge, averaged over its label sets;
* ``rate``: a counter (summed over label sets) as a per-second rate between two scrapes;
* ``ratio``: the increase of the first counter over the increase of the second between
  two scrapes (NaN where the second did not move);
* ``hist_mean``: a histogram's per-interval mean, ``Δ<name>_sum / Δ<name>_count`` (NaN
  where no observation fell in the interval).

A counter that goes down (the server restarted) counts from zero again, as Prometheus'
``rate`` does.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["KEPT_METRICS", "SCRAPE_FAILED", "SERIES", "SERIES_NAMES", "Series", "Source"]

Source = tuple[str, ...]  # (how, metric names...)

#: the sample a scraper records for a scrape that got no answer (a timeout, a refused
#: connection, an error status, text that is not Prometheus): value 1, label ``reason``; its
#: series (``scrape_failed``) shows where the other series have a gap
SCRAPE_FAILED = "rollout_kit:scrape_failed"


class Series(NamedTuple):
    """One named series: its name, its unit and its sources per flavour."""

    name: str
    unit: str
    vllm: tuple[Source, ...]
    sglang: tuple[Source, ...]


#: the named series, in the order of the frames built from them
SERIES: Final = (
    Series("running", "requests",
           (("sum", "vllm:num_requests_running"),),
           (("sum", "sglang:num_running_reqs"),)),
    Series("waiting", "requests",
           (("sum", "vllm:num_requests_waiting"),),
           (("sum", "sglang:num_queue_reqs"),)),
    Series("kv_cache_usage", "fraction",
           (("mean", "vllm:kv_cache_usage_perc"), ("mean", "vllm:gpu_cache_usage_perc")),
           (("mean", "sglang:token_usage"),)),
    Series("preemptions_per_s", "1/s",
           (("rate", "vllm:num_preemptions_total"),),
           (("rate", "sglang:num_retracted_requests_total"),)),
    Series("prefix_cache_hit_rate", "fraction",
           (("ratio", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
            ("ratio", "vllm:gpu_prefix_cache_hits_total",
             "vllm:gpu_prefix_cache_queries_total")),
           (("ratio", "sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
            ("mean", "sglang:cache_hit_rate"))),
    Series("prompt_tokens_per_s", "tokens/s",
           (("rate", "vllm:prompt_tokens_total"),),
           (("rate", "sglang:prompt_tokens_total"),)),
    Series("generation_tokens_per_s", "tokens/s",
           (("rate", "vllm:generation_tokens_total"),),
           (("rate", "sglang:generation_tokens_total"),)),
    Series("ttft_s", "s",
           (("hist_mean", "vllm:time_to_first_token_seconds"),),
           (("hist_mean", "sglang:time_to_first_token_seconds"),)),
    Series("scrape_failed", "scrapes",
           (("sum", SCRAPE_FAILED),),
           (("sum", SCRAPE_FAILED),)),
)
SERIES_NAMES: Final = tuple(s.name for s in SERIES)

# histograms whose per-interval means a later view may want (the server's own queue,
# prefill, decode and end-to-end times): their _sum and _count are kept too
_MORE_HISTOGRAMS = (
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    "vllm:inter_token_latency_seconds",
    "sglang:e2e_request_latency_seconds", "sglang:queue_time_seconds",
    "sglang:inter_token_latency_seconds",
)
_MORE = (
    "vllm:request_success_total", "sglang:num_requests_total",
    "sglang:num_aborted_requests_total", "sglang:num_used_tokens",
    "sglang:num_retracted_reqs", "sglang:num_paused_reqs",
)


def _kept() -> frozenset[str]:
    names: set[str] = set(_MORE)
    for series in SERIES:
        for how, *metrics in (*series.vllm, *series.sglang):
            for m in metrics:
                if how == "hist_mean":
                    names.update((f"{m}_sum", f"{m}_count"))
                else:
                    names.add(m)
    for h in _MORE_HISTOGRAMS:
        names.update((f"{h}_sum", f"{h}_count"))
    return frozenset(names)


#: the sample names (as exposed: ``…_total``, ``…_sum``, ``…_count``) a scrape keeps
KEPT_METRICS: Final = _kept()
