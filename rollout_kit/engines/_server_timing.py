"""The server's own view of each request (SGLang's ``meta_info``) as the session's columns.

SGLang answers every ``/generate`` with its own timings of the request (see
:mod:`._flavours.sglang`); a call adds them to its session under the names the OTLP join gives
vLLM's spans (:mod:`rollout_kit.otel._join`), so :func:`rollout_kit.analysis.why_slow`,
``slowest_split`` and the server lanes read both servers alike, with no OTLP receiver:

============================  ========================================================
``server_spans``              the answers that carried the server's timings (one per
                              request, continuations included)
``server_queue_s``            sum of ``queue_time`` (the scheduler's waiting queue)
``server_prefill_s``          sum of ``prefill_finished_time - forward_entry_time``
``server_decode_s``           sum of ``e2e_latency - first_token_latency`` (first token to
                              finish, as SGLang's own span counts decode)
``server_e2e_s``              sum of ``e2e_latency`` (request received to finished)
``server_frontend_s``         sum over answers of the request's time in flight (written →
                              last byte read) minus its ``e2e_latency``: the HTTP front end
                              before and after SGLang's clock, and the network
``server_preemptions``        sum of ``num_retractions`` (requests retracted to free KV cache)
``server_ttft_s``             ``first_token_latency`` of the session's first request
``server_start_wall``         ``request_received_ts`` of its first request (Unix seconds);
                              the frames add ``server_start_ts``, on the trace clock
``server_weight_version``     the weight version the server reported last (integer labels)
============================  ========================================================

Each column is a difference of stamps taken by one SGLang process (the scheduler's
``forward_entry_time`` / ``prefill_finished_time``; the front end's latencies): the
processes turn their monotonic clocks into Unix time with offsets of their own, a few
milliseconds apart, so stamps of two processes are never subtracted.

An answer without a value leaves it out of that sum (an abort before prefill has no prefill);
a session none of whose answers carried the timings has none of these columns set.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..tracing import annotate, annotate_first, increment


def server_counts(answers: Sequence[tuple[dict[str, float], int, int]]
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """``(sums, firsts)``: the session columns one call adds to and those it sets once.

    Args:
        answers: each server answer's timings with its request written and last byte read
            (``perf_counter_ns``; 0 when unknown), in order.
    """
    sums: dict[str, float] = {}
    firsts: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        sums[key] = sums.get(key, 0.0) + value

    for timing, sent_ns, done_ns in answers:
        e2e = timing.get("e2e_latency")
        received = timing.get("request_received_ts")
        if e2e is None or received is None:
            continue  # not SGLang's stamps (e.g. a simulator's own extension only)
        add("server_spans", 1.0)
        add("server_e2e_s", e2e)
        if "queue_time" in timing:
            add("server_queue_s", timing["queue_time"])
        entry, prefilled = timing.get("forward_entry_time"), timing.get("prefill_finished_time")
        if entry is not None and prefilled is not None:
            add("server_prefill_s", max(prefilled - entry, 0.0))
        first = timing.get("first_token_latency")
        if first is not None:
            add("server_decode_s", max(e2e - first, 0.0))
            firsts.setdefault("server_ttft_s", first)
        if sent_ns and done_ns:
            add("server_frontend_s", (done_ns - sent_ns) / 1e9 - e2e)
        add("server_preemptions", timing.get("num_retractions", 0.0))
        firsts.setdefault("server_start_wall", received)
    return sums, firsts


def record_server_timings(answers: Sequence[tuple[dict[str, float], int, int]]) -> None:
    """Add a call's answers' server timings to the current session (no-op without one, or
    when no answer carried them)."""
    sums, firsts = server_counts(answers)
    if not sums:
        return
    spans = int(sums.pop("server_spans"))
    preempted = int(sums.pop("server_preemptions"))
    increment(server_spans=spans, server_preemptions=preempted, **sums)
    annotate_first(**firsts)
    last = answers[-1][0].get("weight_version")
    if last is not None:
        annotate(server_weight_version=int(last))
