"""What ``rollout-kit load --save-result`` writes: ``vllm bench serve``'s result JSON.

:func:`result_json` builds the dict: ``vllm bench serve --save-result``'s header keys
(``date``, ``backend``, ``model_id``, ``request_rate``, ``max_concurrency``, …), then the
metrics under its key names (``completed``, ``request_throughput``, ``median_ttft_ms``, …) so
scripts reading one read the other, the peaks (``max_output_tokens_per_s``,
``max_concurrent_requests``) computed as vllm does, the send lag, and with
``--save-detailed`` the per-request arrays; ``failures`` (this project's key) lists each
failure reason with its count and the server's message. :func:`file_name` is where it goes: vllm's
default ``{label}-{rate}qps[-concurrencyN]-{model}-{date}.json`` unless
``--result-filename``; a sweep writes one object per level, one per line.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: the per-request arrays that ``--save-detailed`` adds to the result
_DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "errors")


def num(x: Any) -> float:
    """``float(x)``, or NaN when ``x`` is not a number."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _peaks(frame: pd.DataFrame) -> dict[str, float]:
    """``max_output_tokens_per_s`` and ``max_concurrent_requests`` as vllm computes them."""
    import numpy as np

    ok = frame[(frame["status"] == "accepted") & ~frame["warmup"].astype(bool)]
    if ok.empty:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0.0}
    sent = ok["sent_s"].to_numpy(dtype=float)
    e2el = ok["e2el_s"].to_numpy(dtype=float)
    good = np.isfinite(sent) & np.isfinite(e2el)
    events = sorted([(t, 1) for t in sent[good]] + [(t, -1) for t in (sent + e2el)[good]],
                    key=lambda ev: (ev[0], ev[1]))  # an end before a start at the same time
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    stamps: list[float] = []
    for s, ttft, gaps in zip(sent, ok["ttft_s"].to_numpy(dtype=float), ok["itl_s"],
                             strict=True):
        if not (math.isfinite(s) and math.isfinite(ttft)):
            continue
        t = s + ttft
        stamps.append(t)
        for g in gaps if isinstance(gaps, list | tuple | np.ndarray) else ():
            t += float(g)
            stamps.append(t)
    tok = 0.0
    if stamps:
        arr = np.asarray(stamps) - min(stamps)
        tok = float(np.bincount(arr.astype(np.int64)).max())
    return {"max_output_tokens_per_s": tok, "max_concurrent_requests": float(peak)}


def _lag(frame: pd.DataFrame) -> dict[str, float]:
    import numpy as np

    lag = frame.loc[~frame["warmup"].astype(bool), "send_lag_s"].to_numpy(dtype=float)
    lag = lag[np.isfinite(lag)]
    if not lag.size:
        return {}
    return {"median_send_lag_ms": float(np.median(lag)) * 1e3,
            "p99_send_lag_ms": float(np.percentile(lag, 99)) * 1e3}


def failures(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Why measured requests (or turns) did not succeed, most common first: ``{"status",
    "reason", "count", "error"}`` — ``status`` ``failed`` or ``cancelled`` (Ctrl-C), ``error``
    the most common message of that reason (the server's text of an HTTP error), ``None``
    when none was kept."""
    bad = frame[(frame["status"] != "accepted") & ~frame["warmup"].astype(bool)]
    errors = bad["error"] if "error" in bad.columns else [None] * len(bad)
    counts: Counter[tuple[str, str]] = Counter()
    messages: dict[tuple[str, str], Counter[str]] = {}
    for status, reason, error in zip(bad["status"], bad["reason"], errors, strict=True):
        key = (str(status), "no reason given" if reason is None or reason != reason
               else str(reason))
        counts[key] += 1
        if isinstance(error, str) and error:
            messages.setdefault(key, Counter())[error] += 1
    # most common first, then by name: a stable order
    return [{"status": status, "reason": reason, "count": n,
             "error": messages[key].most_common(1)[0][0] if key in messages else None}
            for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            for status, reason in (key,)]


def result_json(args: argparse.Namespace, metrics: dict[str, Any], *,
                rate: float | None = None, concurrency: int | None = None,
                frame: pd.DataFrame | None = None) -> dict[str, Any]:
    """The ``vllm bench serve --save-result`` dict: its header keys, then the metrics."""
    rate = args.request_rate if rate is None else rate
    out: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": args.backend,
        "backend": args.backend,
        "label": args.label,
        "model_id": _model_id(args),
        "tokenizer_id": args.tokenizer or _model_id(args),
        "num_prompts": args.num_prompts,
        **args.meta,
        "request_rate": rate if math.isfinite(rate) else "inf",
        "burstiness": args.burstiness,
        "max_concurrency": concurrency if concurrency is not None else args.max_concurrency,
    }
    if args.ramp_up_strategy is not None:
        out.update(ramp_up_strategy=args.ramp_up_strategy,
                   ramp_up_start_rps=args.ramp_up_start_rps,
                   ramp_up_end_rps=args.ramp_up_end_rps)
    out.update(metrics)
    if args.slos is None:
        out["request_goodput"] = None
    out.setdefault("rtfx", 0.0)
    if frame is not None:
        for k, v in _peaks(frame).items():
            out.setdefault(k, v)
        out.update(_lag(frame))
        stats = frame[~frame["warmup"].astype(bool)]
        out["failures"] = failures(frame)  # each reason, its count and server message
        out["latencies"] = [num(x) for x in stats["e2el_s"]]
        out["queue_times"] = [num(x) for x in stats["queue_wait_s"]]
        if args.save_detailed:
            out["input_lens"] = [int(x) if x == x else 0 for x in stats["prompt_tokens"]]
            out["output_lens"] = [int(x) if x == x else 0 for x in stats["output_tokens"]]
            out["ttfts"] = [num(x) for x in stats["ttft_s"]]
            out["itls"] = [list(map(float, x)) if isinstance(x, list | tuple) else []
                           for x in stats["itl_s"]]
            out["start_times"] = [num(x) for x in stats["sent_s"]]
            out["errors"] = [_error(r, e) for r, e in zip(
                stats["reason"], stats["error"] if "error" in stats.columns
                else [None] * len(stats), strict=True)]
    return {k: _plain(v) for k, v in out.items()}


def _model_id(args: argparse.Namespace) -> str | None:
    """``--model``, else the model the server named at start (``None``: it names none)."""
    model = getattr(args, "model_id", None) or args.model
    return str(model) if model else None


def _error(reason: Any, error: Any) -> str:
    """One ``errors`` entry: ``""`` for a success, else the message (or the reason)."""
    if reason is None or reason != reason:
        return ""
    return str(error) if isinstance(error, str) and error else str(reason)


def _plain(v: Any) -> Any:
    """A JSON-friendly value (numpy scalars -> Python; NaN stays NaN as vllm writes it)."""
    if hasattr(v, "item") and not isinstance(v, list | dict | str):
        try:
            return v.item()
        except (ValueError, AttributeError):
            return v
    return v


def file_name(args: argparse.Namespace, *, sweep: bool) -> Path:
    """The result file (its folder created): ``--result-filename`` or vllm's default."""
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    label = args.label or args.backend
    model = (_model_id(args) or "model").split("/")[-1]
    conc = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
    name: str
    if args.result_filename:
        name = str(args.result_filename)
    elif sweep:
        levels = str(args.sweep or args.sweep_concurrency)
        kind = "qps" if args.sweep else "concurrency"
        name = f"{label}-sweep-{levels.replace(',', '_')}{kind}-{model}-{date}.json"
    elif args.ramp_up_strategy is not None:
        name = (f"{label}-ramp-up-{args.ramp_up_strategy}-{args.ramp_up_start_rps}qps-"
                f"{args.ramp_up_end_rps}qps{conc}-{model}-{date}.json")
    else:
        name = f"{label}-{args.request_rate}qps{conc}-{model}-{date}.json"
    folder = Path(args.result_dir) if args.result_dir else Path()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
