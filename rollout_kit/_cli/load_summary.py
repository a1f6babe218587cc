"""What ``rollout-kit load`` prints: vllm bench serve's summary table, a sweep's table, failures.

* :func:`format_summary`: the ``Serving Benchmark Result`` table of one result dict, as
  ``vllm bench serve`` prints it, plus the achieved rate, the peaks and the send lag
  (actual − scheduled);
* :func:`sweep_table`: one row per level of a sweep, and why it stopped;
* :func:`failures` / :func:`failure_lines`: why the measured requests did not succeed, with
  each reason's server message.

:data:`METRIC_HEADERS` names the latency metrics (``--percentile-metrics``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .load_results import failures, num

if TYPE_CHECKING:
    import pandas as pd

# metric -> (printed name, header line) as vllm bench serve prints them
METRIC_HEADERS: dict[str, tuple[str, str]] = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}


def _fmt_row(label: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{label:<40} {value:<10.2f}"
    return f"{label:<40} {value:<10}"


def format_summary(m: dict[str, Any], *, metrics: Sequence[str] = tuple(METRIC_HEADERS),
                   percentiles: Sequence[float] = (99,)) -> str:
    """``vllm bench serve``'s summary table for a result dict (plus achieved rate and lag)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_fmt_row("Successful requests:", int(m.get("completed", 0))))
    lines.append(_fmt_row("Failed requests:", int(m.get("failed", 0))))
    if m.get("max_concurrency") is not None:
        lines.append(_fmt_row("Maximum request concurrency:", m["max_concurrency"]))
    rate = num(m.get("request_rate"))
    if math.isfinite(rate):
        lines.append(_fmt_row("Request rate configured (RPS):", rate))
    if math.isfinite(num(m.get("achieved_rate"))):
        lines.append(_fmt_row("Request rate achieved (RPS):", num(m["achieved_rate"])))
    lines.append(_fmt_row("Benchmark duration (s):", num(m.get("duration"))))
    lines.append(_fmt_row("Total input tokens:", int(m.get("total_input_tokens", 0))))
    lines.append(_fmt_row("Total generated tokens:", int(m.get("total_output_tokens", 0))))
    lines.append(_fmt_row("Request throughput (req/s):", num(m.get("request_throughput"))))
    if m.get("request_goodput") is not None:
        lines.append(_fmt_row("Request goodput (req/s):", num(m["request_goodput"])))
    lines.append(_fmt_row("Output token throughput (tok/s):", num(m.get("output_throughput"))))
    if "max_output_tokens_per_s" in m:
        lines.append(_fmt_row("Peak output token throughput (tok/s):",
                              num(m["max_output_tokens_per_s"])))
    if "max_concurrent_requests" in m:
        lines.append(_fmt_row("Peak concurrent requests:", num(m["max_concurrent_requests"])))
    lines.append(_fmt_row("Total token throughput (tok/s):",
                          num(m.get("total_token_throughput"))))
    for key in metrics:
        short, header = METRIC_HEADERS[key]
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_fmt_row(f"Mean {short} (ms):", num(m.get(f"mean_{key}_ms"))))
        lines.append(_fmt_row(f"Median {short} (ms):", num(m.get(f"median_{key}_ms"))))
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            lines.append(_fmt_row(f"P{word} {short} (ms):", num(m.get(f"p{word}_{key}_ms"))))
    if "p99_send_lag_ms" in m:
        lines.append("{s:{c}^{n}}".format(s="Send Lag (actual - scheduled)", n=50, c="-"))
        lines.append(_fmt_row("Median send lag (ms):", num(m.get("median_send_lag_ms"))))
        lines.append(_fmt_row("P99 send lag (ms):", num(m["p99_send_lag_ms"])))
    lines.append("=" * 50)
    return "\n".join(lines)


def sweep_table(sweep: pd.DataFrame) -> str:
    """A sweep's levels as a text table (rates, throughput, latencies, saturation)."""
    cols = [("level", "level", "{:g}"), ("offered_rate", "offered/s", "{:.2f}"),
            ("achieved_rate", "achieved/s", "{:.2f}"),
            ("request_throughput", "req/s", "{:.2f}"),
            ("request_goodput", "goodput/s", "{:.2f}"),
            ("median_ttft_ms", "p50 TTFT ms", "{:.1f}"), ("p99_ttft_ms", "p99 TTFT ms", "{:.1f}"),
            ("median_tpot_ms", "p50 TPOT ms", "{:.1f}"), ("p99_e2el_ms", "p99 E2EL ms", "{:.1f}"),
            ("failed", "failed", "{:g}"), ("saturated", "saturated", "{}")]
    cols = [c for c in cols if c[0] in sweep.columns]
    rows = [[head for _, head, _ in cols]]
    for _, r in sweep.iterrows():
        cells = []
        for key, _, fmt in cols:
            v = r[key]
            cells.append("—" if v is None or (isinstance(v, float) and math.isnan(v))
                         else fmt.format(v))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    text = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    if "stop_reason" in sweep.columns:
        reasons = [str(s) for s in sweep["stop_reason"] if isinstance(s, str) and s]
        if reasons:
            text.append(f"stopped: {reasons[-1]}")
    return "\n".join(text)


def failure_lines(frame: pd.DataFrame, top: int = 3, width: int = 300) -> list[str]:
    """``"failed: N × reason: message"`` (``cancelled: …`` for requests cut by Ctrl-C, which
    the table's ``Failed requests`` does not count) for the ``top`` most common reasons
    measured requests did not succeed (the message cut to ``width`` characters)."""
    lines = []
    for f in failures(frame)[:top]:
        msg = f["error"]
        if msg and len(msg) > width:
            msg = msg[:width] + "…"
        lines.append(f"{f['status']}: {f['count']} × {f['reason']}" + (f": {msg}" if msg
                                                                         else ""))
    return lines
