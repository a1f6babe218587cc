"""The comparison of a recorded call with its replay: one row of the replay frame.

Columns (index ``(task_id, session_id, call)`` of the recorded call):

* ``status``: ``identical`` (the same output tokens — or, for a dump without token ids such as
  AReaL's, the same text), ``diverged``, ``failed`` (the replay's request failed) or
  ``not_replayed`` (nothing could be sent, or the task id is not in the dump);
* ``first_divergence``: the first output token that differs (``<NA>`` when identical; the
  shorter length when one output is a prefix of the other; a character position for a dump
  without token ids);
* ``tokens_then`` / ``tokens_now``, ``stop_then`` / ``stop_now``, ``server_then`` /
  ``server_now``, ``latency_then_s`` / ``latency_now_s``, ``ttft_then_s`` / ``ttft_now_s``;
* ``logprob_max_abs_delta`` / ``logprob_mean_abs_delta``: over the positions before the
  first divergence (NaN when there are none or either side has no logprobs);
* ``seed``, ``version_then`` (the weight version of the last recorded token) and
  ``version_now`` (the engine's version at replay time);
* ``reason``: why not identical, in words — unseeded sampling, a changed weight version, a
  server that does not reproduce its own output with the same seed (it ignores seeds), or one
  that does but not the recorded output (other weights, settings or numerics).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._calls import Replayed, is_seeded

FRAME_COLUMNS = (
    "status", "reason", "first_divergence", "tokens_then", "tokens_now", "stop_then",
    "stop_now", "logprob_max_abs_delta", "logprob_mean_abs_delta", "seed", "server_then",
    "server_now", "version_then", "version_now", "latency_then_s", "latency_now_s",
    "ttft_then_s", "ttft_now_s", "replay_task_id",
)


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is a prefix
    of the other), or ``None`` when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _logprob_deltas(then: Sequence[float], now: Sequence[float], upto: int) -> tuple[float, float]:
    deltas = [abs(x - y) for x, y in zip(then[:upto], now[:upto], strict=False)
              if not (math.isnan(x) or math.isnan(y))]
    if not deltas:
        return math.nan, math.nan
    return max(deltas), sum(deltas) / len(deltas)


def _same(call: Mapping[str, Any], a: Replayed, b: Replayed) -> bool:
    if call.get("output_ids"):
        return a.output_ids == b.output_ids
    return a.text == b.text


def matches_recording(call: Mapping[str, Any], now: Replayed) -> bool:
    """Whether a replay gave the recorded output (token ids, or the text of a dump without
    them)."""
    recorded = call.get("output_ids")
    if recorded:
        return now.output_ids == list(recorded)
    return now.text == (call.get("output_text") or "")


def compare_call(call: Mapping[str, Any], now: Replayed, again: Replayed | None,
                 version_now: int) -> dict[str, Any]:
    """One frame row: the recorded ``call`` against its replay ``now``.

    ``again`` is a second replay of a diverged call (the determinism check): it tells a
    server that ignores seeds from one that differs from the recording.
    """
    then_ids: list[int] = list(call.get("output_ids") or ())
    then_lps: list[float] = list(call.get("logprobs") or ())
    if then_ids:
        div = first_divergence(then_ids, now.output_ids)
    else:  # a dump without token ids (AReaL's): compare the text
        div = first_divergence(str(call.get("output_text") or ""), now.text)
    upto = len(then_ids) if div is None else div
    lp_max, lp_mean = _logprob_deltas(then_lps, now.logprobs, upto)
    version_then = call.get("version_end")
    row: dict[str, Any] = {
        "first_divergence": div, "tokens_then": len(then_ids) or call.get("completion_tokens"),
        "tokens_now": len(now.output_ids), "stop_then": call.get("stop_reason"),
        "stop_now": now.stop_reason, "logprob_max_abs_delta": lp_max,
        "logprob_mean_abs_delta": lp_mean, "seed": call.get("seed"),
        "server_then": call.get("server"), "server_now": now.server,
        "version_then": version_then, "version_now": version_now,
        "latency_then_s": call.get("latency_s"), "latency_now_s": now.latency_s,
        "ttft_then_s": call.get("ttft_s"), "ttft_now_s": now.ttft_s,
    }
    if now.error is not None:
        row.update(status="failed", reason=now.error, first_divergence=None)
        return row
    if div is None:
        row.update(status="identical", reason=None)
        return row
    reasons: list[str] = []
    if not is_seeded(call):
        t = (call.get("sampling") or {}).get("temperature", 1.0)
        reasons.append(f"unseeded sampling at temperature {t}: not reproducible")
    if version_then is not None and version_then != version_now:
        reasons.append(f"weight version changed ({version_then} then, {version_now} now)")
    if again is not None and again.error is None:
        if _same(call, now, again):
            reasons.append("the server repeats its own output for this seed but not the "
                           "recorded one: other weights, settings or numerics")
        else:
            reasons.append("the server gave two different outputs for the same seed: it "
                           "does not honour seeds")
    row.update(status="diverged", reason="; ".join(reasons) or "diverged")
    return row


def missing_row(reason: str, call: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``not_replayed`` row (nothing was sent)."""
    row: dict[str, Any] = dict.fromkeys(FRAME_COLUMNS)
    row.update(status="not_replayed", reason=reason)
    if call is not None:
        row.update(tokens_then=len(call.get("output_ids") or ()) or call.get("completion_tokens"),
                   stop_then=call.get("stop_reason"), seed=call.get("seed"),
                   server_then=call.get("server"), version_then=call.get("version_end"),
                   latency_then_s=call.get("latency_s"), ttft_then_s=call.get("ttft_s"))
    return row
