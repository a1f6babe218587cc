"""The server's own spans joined to the sessions they served.

A generate request sent inside a traced task carries a ``traceparent`` whose trace id is the
tracer's ``trace_prefix`` plus the task id and whose parent span id is the session's
(:func:`rollout_kit.tracing.traceparent`). A server span naming that parent is joined to that
``(task_id, session_id)``; its attributes (vLLM's names, which the simulators use too) become
columns of the sessions frame:

============================  ===============================================
``server_spans``              the session's server spans (one per request)
``server_queue_s``            sum of ``gen_ai.latency.time_in_queue``
``server_ttft_s``             ``gen_ai.latency.time_to_first_token`` of its first request
``server_prefill_s``          sum of ``gen_ai.latency.time_in_model_prefill``
``server_decode_s``           sum of ``gen_ai.latency.time_in_model_decode``
``server_e2e_s``              sum of ``gen_ai.latency.e2e``
``server_start_ts``           the first request's arrival at the server, on the trace clock
``server_frontend_s``         the session's ``in_flight_s`` minus ``server_e2e_s``
``client_overhead_s``         the session's ``generate_s`` minus ``server_e2e_s``
============================  ===============================================

``client_overhead_s`` is *not* the client's overhead under load: it holds the server's HTTP
front end, tokenization and detokenization (outside its ``llm_request`` span) and the
network too. The engine splits it (its session columns, :mod:`rollout_kit.engines._remote`):

* ``client_own_s`` — what the client measures of itself: from the call to the request
  written, and from the last byte read to the return;
* ``server_frontend_s`` — what lies between the request written and the last byte read
  outside the server's span: the server's front end and the network.

``client_overhead_s`` ≈ ``client_own_s + server_frontend_s`` (plus any retries, and the
workflow's own time inside its generate span); it is kept for the notebooks that read it.

Spans that cannot be joined are kept apart, each with the reason (``unmatched`` and its
``why`` column) and counted — never joined to a guess: another tracer's trace, no parent, a
parent that is the task rather than a session, a session the frame does not hold, or missing
latency attributes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..tracing import TASK_SPAN_ID

QUEUE = "gen_ai.latency.time_in_queue"
TTFT = "gen_ai.latency.time_to_first_token"
PREFILL = "gen_ai.latency.time_in_model_prefill"
DECODE = "gen_ai.latency.time_in_model_decode"
E2E = "gen_ai.latency.e2e"
#: the span attributes the join reads (vLLM 0.32's ``llm_request`` span) → the columns of
#: the joined spans frame
ATTRIBUTES = {QUEUE: "queue_s", TTFT: "ttft_s", PREFILL: "prefill_s", DECODE: "decode_s",
              E2E: "e2e_s"}
_REQUIRED = (QUEUE, TTFT, E2E)

SERVER_COLUMNS = ("server_spans", "server_queue_s", "server_ttft_s", "server_prefill_s",
                  "server_decode_s", "server_e2e_s", "server_start_ts", "server_frontend_s",
                  "client_overhead_s")


@dataclass(frozen=True, slots=True)
class ServerView:
    """What :func:`join_server_spans` returns.

    Attributes:
        sessions: the sessions frame with the :data:`SERVER_COLUMNS` added (NaN / 0 where no
            span was joined, unless the frame had them: an SGLang engine records them from
            each answer's ``meta_info``, and a session without a span keeps them).
        spans: the joined spans, one row each, with ``task_id``, ``session_id``,
            ``start_ts`` (the server's arrival time on the trace clock) and the latencies as
            ``queue_s``, ``ttft_s``, ``prefill_s``, ``decode_s``, ``e2e_s`` (what
            :func:`rollout_kit.plotting.plot_timeline` draws with ``server_spans=``).
        unmatched: the spans not joined, with ``why``.
        counts: ``joined`` and one count per reason in ``unmatched``.
    """

    sessions: pd.DataFrame
    spans: pd.DataFrame
    unmatched: pd.DataFrame
    counts: dict[str, int] = field(default_factory=dict)


def _number(attrs: dict[str, Any], key: str) -> float:
    v = attrs.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _place(row: dict[str, Any], prefix: str | None,
           known: set[tuple[int, int]]) -> tuple[int, int] | str:
    """The ``(task_id, session_id)`` a span belongs to, or why it has none."""
    tid, parent = row.get("trace_id"), row.get("parent_span_id")
    if not (isinstance(tid, str) and len(tid) == 32 and _is_hex(tid)):
        return "not a W3C trace id"
    if not (isinstance(parent, str) and len(parent) == 16 and _is_hex(parent)):
        return "no parent span"
    if prefix is not None and tid[:16] != prefix:
        return "another tracer's trace"
    span = int(parent, 16)
    if span == TASK_SPAN_ID:
        return "parent is the task (a call outside any session)"
    key = (int(tid[16:], 16), span - 1)
    if key not in known:
        return "no such session in the frame"
    attrs = row.get("attributes") or {}
    missing = [k for k in _REQUIRED if math.isnan(_number(attrs, k))]
    if missing:
        return "missing attributes: " + ", ".join(missing)
    return key


def join_server_spans(sessions: pd.DataFrame, spans: pd.DataFrame, *,
                      trace_prefix: str | None, wall_epoch: float) -> ServerView:
    """Join server spans (an :class:`~._receiver.OtlpReceiver`'s ``spans()``) to sessions.

    Args:
        sessions: a sessions frame (index ``(task_id, session_id)``, a ``generate_s``
            column).
        spans: span rows (:mod:`._spans` columns).
        trace_prefix: the tracer's ``trace_prefix`` (spans of other traces are left out);
            ``None`` trusts every trace id's task part (e.g. traces reloaded from files).
        wall_epoch: the trace's wall-clock anchor (``Tracer.wall_epoch`` /
            ``Traces.wall_epoch``), to put ``server_start_ts`` on the trace clock.
    """
    known = {(int(t), int(s)) for t, s in sessions.index}
    joined: list[dict[str, Any]] = []
    unmatched: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    for raw in spans.to_dict("records"):
        row = {str(k): v for k, v in raw.items()}
        where = _place(row, trace_prefix, known)
        if isinstance(where, str):
            unmatched.append({**row, "why": where})
            counts[where] += 1
            continue
        attrs = row["attributes"]
        joined.append({"task_id": where[0], "session_id": where[1], **row,
                       "start_ts": row["start_wall"] - wall_epoch,
                       **{col: _number(attrs, k) for k, col in ATTRIBUTES.items()}})
        counts["joined"] += 1
    out = sessions.copy()
    for col in SERVER_COLUMNS:  # columns a session has already (SGLang's meta_info) stay
        if col not in out.columns:
            out[col] = 0 if col == "server_spans" else math.nan
    spans_frame = pd.DataFrame(joined)
    if joined:
        spans_frame = spans_frame.sort_values(["task_id", "session_id", "start_wall"])
        per = spans_frame.groupby(["task_id", "session_id"])
        agg = pd.DataFrame({
            "server_spans": per.size(),
            "server_queue_s": per["queue_s"].sum(min_count=1),
            "server_ttft_s": per["ttft_s"].first(),
            "server_prefill_s": per["prefill_s"].sum(min_count=1),
            "server_decode_s": per["decode_s"].sum(min_count=1),
            "server_e2e_s": per["e2e_s"].sum(min_count=1),
            "server_start_ts": per["start_ts"].min(),
        })
        hit = out.index.isin(agg.index)
        for col in agg.columns:
            out.loc[hit, col] = agg[col].reindex(out.index[hit]).to_numpy()
    out["server_spans"] = pd.to_numeric(out["server_spans"], errors="coerce").fillna(0) \
        .astype("int64")
    if "in_flight_s" in out.columns:
        out["server_frontend_s"] = out["in_flight_s"] - out["server_e2e_s"]
    if "generate_s" in out.columns:
        out["client_overhead_s"] = out["generate_s"] - out["server_e2e_s"]
    unmatched_frame = pd.DataFrame(unmatched, columns=[*spans.columns, "why"])
    return ServerView(out, spans_frame, unmatched_frame, dict(counts))
