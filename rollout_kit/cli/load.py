"""``rollout-kit load``: open-loop load against SGLang / vLLM servers, like ``vllm bench serve``.

Options keep ``vllm bench serve``'s names where they mean the same (``--request-rate``,
``--burstiness``, ``--max-concurrency``, ``--num-prompts``, ``--dataset-name`` /
``--dataset-path``, ``--random-input-len`` / ``--random-output-len`` /
``--random-range-ratio``, ``--goodput ttft:200 tpot:50``, ``--seed``, ``--base-url`` or
``--host`` / ``--port``, ``--backend``, ``--model``, ``--tokenizer``, ``--ignore-eos``,
``--percentile-metrics``, ``--metric-percentiles``, ``--save-result`` / ``--result-dir`` /
``--result-filename``, ``--label``, ``--metadata``, ``--disable-tqdm``), plus:

* ``--sweep 5,10,20`` (request rates) or ``--sweep-concurrency 1,4,16``: one run per level,
  stopping at saturation; a table with one row per level;
* ``--warmup N``: N more requests sent first and left out of the statistics;
* ``--duration S``: stop sending after S seconds;
* ``--sim``: start a simulated server of ``--backend``'s kind in this process.

It prints the same summary table as ``vllm bench serve`` (plus the achieved rate and the
send lag), and ``--save-result`` writes a JSON with ``vllm bench serve --save-result``'s key
names for the shared metrics (``completed``, ``request_throughput``, ``median_ttft_ms``, …),
so scripts reading one read the other. A sweep writes one such object per level, one per
line (like ``--append-result`` over several runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._loop import run_sync
from .._paths import parse_address
from ..errors import ConfigError
from ._output import note as _note
from ._output import out as _out

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["METRIC_HEADERS", "add_arguments", "format_summary", "result_json", "run"]

# metric -> (printed name, header line) as vllm bench serve prints them
METRIC_HEADERS: dict[str, tuple[str, str]] = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}
_DATASETS = ("random", "sharegpt", "prefix_repetition", "mooncake", "trace", "jsonl", "custom")
_DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "errors")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``rollout-kit load``'s options to ``parser``."""
    srv = parser.add_argument_group("server (as vllm bench serve)")
    srv.add_argument("--backend", choices=("vllm", "sglang"), default="vllm",
                     help="server API (vllm: /v1/completions; sglang: /generate) (vllm)")
    srv.add_argument("--base-url", default=None,
                     help="server URL, e.g. http://127.0.0.1:8000 (overrides --host/--port)")
    srv.add_argument("--host", default="127.0.0.1", help="server host (127.0.0.1)")
    srv.add_argument("--port", type=int, default=8000, help="server port (8000)")
    srv.add_argument("--model", default=None,
                     help="model name sent with each request (the server's by default)")
    srv.add_argument("--tokenizer", default=None,
                     help="tokenizer.json or a model folder holding one: prompt lengths in "
                          "its tokens (default: the simulator's byte tokenizer)")
    srv.add_argument("--sim", action="store_true",
                     help="start a simulated --backend server in this process (ignores "
                          "--base-url/--host/--port)")
    srv.add_argument("--sim-time-scale", type=float, default=1.0,
                     help="the --sim server's latency scale (1.0)")

    load = parser.add_argument_group("load")
    load.add_argument("--request-rate", type=float, default=math.inf,
                      help="requests per second (inf: all at once)")
    load.add_argument("--burstiness", type=float, default=1.0,
                      help="gamma shape of the inter-arrival times: 1 = Poisson, < 1 "
                           "burstier, > 1 smoother, inf = constant rate (1.0)")
    load.add_argument("--max-concurrency", type=int, default=None,
                      help="at most this many requests in flight (unbounded)")
    load.add_argument("--num-prompts", type=int, default=1000,
                      help="requests to send, warm-up not counted (1000)")
    load.add_argument("--duration", type=float, default=None,
                      help="stop sending after this many seconds")
    load.add_argument("--warmup", "--num-warmups", dest="warmup", type=int, default=0,
                      help="requests sent first and left out of the statistics (0)")
    load.add_argument("--ramp-up-strategy", choices=("linear",), default=None,
                      help="ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps")
    load.add_argument("--ramp-up-start-rps", type=float, default=None)
    load.add_argument("--ramp-up-end-rps", type=float, default=None)
    load.add_argument("--seed", type=int, default=0, help="random seed (0)")
    sweep = load.add_mutually_exclusive_group()
    sweep.add_argument("--sweep", default=None, metavar="RATES",
                       help="sweep request rates, e.g. 5,10,20 (stops at saturation)")
    sweep.add_argument("--sweep-concurrency", default=None, metavar="LEVELS",
                       help="sweep max concurrency, e.g. 1,4,16 (stops at saturation)")

    data = parser.add_argument_group("dataset (as vllm bench serve)")
    data.add_argument("--dataset-name", choices=_DATASETS, default="random",
                      help="random (synthetic lengths), sharegpt, prefix_repetition, "
                           "mooncake/trace, jsonl/custom (random)")
    data.add_argument("--dataset-path", default=None, help="the dataset file")
    data.add_argument("--random-input-len", type=int, default=1024)
    data.add_argument("--random-output-len", type=int, default=128)
    data.add_argument("--random-range-ratio", type=float, default=0.0,
                      help="lengths uniform in [len·(1−r), len·(1+r)] (0.0)")
    data.add_argument("--prefix-repetition-prefix-len", type=int, default=256)
    data.add_argument("--prefix-repetition-suffix-len", type=int, default=256)
    data.add_argument("--prefix-repetition-num-prefixes", type=int, default=10)
    data.add_argument("--prefix-repetition-output-len", type=int, default=128)
    data.add_argument("--sharegpt-output-len", type=int, default=None)
    data.add_argument("--trace-time-scale", type=float, default=1.0,
                      help="mooncake/trace datasets: multiply timestamps by this (1.0)")
    data.add_argument("--ignore-eos", action="store_true",
                      help="generate exactly the output length (random datasets always do)")

    res = parser.add_argument_group("results (as vllm bench serve)")
    res.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                     help="SLOs for goodput, e.g. ttft:200 tpot:50 e2el:2000 (ms)")
    res.add_argument("--percentile-metrics", default="ttft,tpot,itl,e2el",
                     help="metrics whose percentiles are printed (ttft,tpot,itl,e2el)")
    res.add_argument("--metric-percentiles", default="99",
                     help="percentiles printed and saved, e.g. 50,90,99 (99)")
    res.add_argument("--save-result", action="store_true", help="write the result JSON")
    res.add_argument("--save-detailed", action="store_true",
                     help="also save per-request arrays (ttfts, itls, input_lens, …)")
    res.add_argument("--result-dir", default=None, help="folder of the result JSON (.)")
    res.add_argument("--result-filename", default=None,
                     help="file name (default: {label}-{rate}qps[-concurrencyN]-{model}-"
                          "{date}.json)")
    res.add_argument("--label", default=None, help="label in the result (the backend)")
    res.add_argument("--metadata", nargs="*", default=None, metavar="KEY=VALUE",
                     help="extra key=value pairs saved in the result")
    res.add_argument("--trace-path", default=None,
                     help="also write the rollout_kit traces (JSONL) here")
    res.add_argument("--disable-tqdm", action="store_true", help="hide the progress bar")


# -- checking ---------------------------------------------------------------------------

def _levels(text: str, option: str, *, integer: bool) -> list[float]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{option} needs at least one level, e.g. {option} 5,10,20")
    out: list[float] = []
    for p in parts:
        try:
            v = float(int(p)) if integer else float(p)
        except ValueError:
            kind = "integers" if integer else "numbers"
            raise ConfigError(f"{option}: {p!r} is not a number ({option} takes {kind} "
                              "separated by commas)") from None
        if not v > 0 or math.isnan(v):
            raise ConfigError(f"{option}: every level must be > 0, got {p}")
        out.append(v)
    return out


def _percentiles(text: str) -> list[float]:
    out: list[float] = []
    for p in (s.strip() for s in text.split(",") if s.strip()):
        try:
            v = float(p)
        except ValueError:
            raise ConfigError(f"--metric-percentiles: {p!r} is not a number") from None
        if not 0 < v < 100 and v != 100:
            raise ConfigError(f"--metric-percentiles: {p} is not in (0, 100]")
        out.append(v)
    if not out:
        raise ConfigError("--metric-percentiles needs at least one percentile, e.g. 99")
    return out


def _check_args(args: argparse.Namespace) -> None:
    rate = args.request_rate
    if math.isnan(rate) or not rate > 0:
        raise ConfigError(f"--request-rate must be > 0 (or inf), got {rate}")
    if math.isnan(args.burstiness) or not args.burstiness > 0:
        raise ConfigError(f"--burstiness must be > 0, got {args.burstiness}")
    if args.num_prompts < 1:
        raise ConfigError(f"--num-prompts must be >= 1, got {args.num_prompts}")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ConfigError(f"--max-concurrency must be >= 1, got {args.max_concurrency}")
    if args.warmup < 0:
        raise ConfigError(f"--warmup must be >= 0, got {args.warmup}")
    if args.duration is not None and not args.duration > 0:
        raise ConfigError(f"--duration must be > 0, got {args.duration}")
    if args.ramp_up_strategy is not None:
        lo, hi = args.ramp_up_start_rps, args.ramp_up_end_rps
        if lo is None or hi is None:
            raise ConfigError("--ramp-up-strategy needs --ramp-up-start-rps and "
                              "--ramp-up-end-rps")
        if not lo > 0 or not hi > 0:
            raise ConfigError(f"--ramp-up-start-rps/--ramp-up-end-rps must be > 0, got "
                              f"{lo} and {hi}")
    for name in ("random_input_len", "random_output_len"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got "
                              f"{getattr(args, name)}")
    if not 0 <= args.random_range_ratio < 1:
        raise ConfigError(f"--random-range-ratio must be in [0, 1), got "
                          f"{args.random_range_ratio}")
    if args.dataset_name not in ("random", "prefix_repetition") and not args.dataset_path:
        raise ConfigError(f"--dataset-name {args.dataset_name} needs --dataset-path")
    if not args.sim_time_scale >= 0:
        raise ConfigError(f"--sim-time-scale must be >= 0, got {args.sim_time_scale}")
    args.rates = _levels(args.sweep, "--sweep", integer=False) if args.sweep else None
    args.concurrencies = ([int(v) for v in _levels(args.sweep_concurrency,
                                                   "--sweep-concurrency", integer=True)]
                          if args.sweep_concurrency else None)
    args.percentiles = _percentiles(args.metric_percentiles)
    metrics = [m.strip() for m in args.percentile_metrics.split(",") if m.strip()]
    unknown = [m for m in metrics if m not in METRIC_HEADERS]
    if unknown:
        raise ConfigError(f"--percentile-metrics: unknown metric(s) {unknown}; choose from "
                          f"{list(METRIC_HEADERS)}")
    args.metrics = metrics
    from ..load.metrics import parse_goodput

    args.slos = parse_goodput(" ".join(args.goodput)) if args.goodput else None
    meta: dict[str, str] = {}
    for item in args.metadata or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--metadata {item!r}: use KEY=VALUE")
        meta[key.strip()] = value.strip()
    args.meta = meta
    if not args.sim:
        args.address = parse_address(args.base_url or f"{args.host}:{args.port}",
                                     "--base-url" if args.base_url else "--host/--port")


# -- running ----------------------------------------------------------------------------

def _requests(args: argparse.Namespace) -> list[Any]:
    from dataclasses import replace

    from ..load.datasets import load_dataset

    n = args.num_prompts + args.warmup
    name = args.dataset_name
    opts: dict[str, Any] = {"seed": args.seed}
    if args.tokenizer:
        opts["tokenizer"] = args.tokenizer
    if name == "random":
        opts.update(num=n, input_len=args.random_input_len, output_len=args.random_output_len,
                    range_ratio=args.random_range_ratio)
    elif name == "prefix_repetition":
        opts.update(num=max(n, args.prefix_repetition_num_prefixes),
                    num_prefixes=args.prefix_repetition_num_prefixes,
                    prefix_len=args.prefix_repetition_prefix_len,
                    suffix_len=args.prefix_repetition_suffix_len,
                    output_len=args.prefix_repetition_output_len)
    elif name == "sharegpt":
        opts.update(num=n, output_len=args.sharegpt_output_len)
    elif name in ("mooncake", "trace"):
        opts.update(time_scale=args.trace_time_scale, num=n)
    else:  # jsonl / custom: in file order, the first n (fewer lines are oversampled)
        opts.update(num=n)
    reqs = list(load_dataset(name, args.dataset_path, **opts))
    if args.ignore_eos:
        reqs = [replace(r, ignore_eos=True) for r in reqs]
    return reqs[:n]


def _spec(args: argparse.Namespace, rate: float | None = None,
          concurrency: int | None = None) -> Any:
    from ..load.arrivals import Arrivals
    from ..load.runner import LoadSpec

    ramp = ((args.ramp_up_start_rps, args.ramp_up_end_rps)
            if args.ramp_up_strategy is not None else None)
    arrivals = Arrivals(rate=args.request_rate if rate is None else rate,
                        burstiness=args.burstiness, ramp_up=ramp, seed=args.seed)
    return LoadSpec(arrivals=arrivals, num_requests=args.num_prompts + args.warmup,
                    duration=args.duration,
                    max_concurrency=concurrency if concurrency is not None
                    else args.max_concurrency,
                    warmup=args.warmup)


@contextlib.asynccontextmanager
async def _server(args: argparse.Namespace) -> AsyncIterator[str]:
    if not args.sim:
        yield str(args.address)
        return
    from ..sim import serve

    overrides: dict[str, Any] = {"time_scale": args.sim_time_scale, "seed": args.seed}
    if args.model:
        overrides["model_name"] = args.model
    if args.tokenizer:
        overrides["tokenizer"] = args.tokenizer
    async with serve(args.backend, n=1, **overrides) as cluster:
        yield str(cluster.addresses[0])


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from ..config import EngineConfig, ExecutorConfig
    from ..controller import RolloutController
    from ..load.runner import run_load_async

    requests = _requests(args)
    levels = [args.max_concurrency] if args.max_concurrency else []
    levels += args.concurrencies or []
    cap = max([*levels, args.num_prompts + args.warmup, 1])
    async with _server(args) as address:
        servers = {"sglang": [address] if args.backend == "sglang" else [],
                   "vllm": [address] if args.backend == "vllm" else []}
        ctl = RolloutController(sglang=servers["sglang"], vllm=servers["vllm"],
                                engine_config=EngineConfig(stream=True, model=args.model),
                                executor_config=ExecutorConfig(max_concurrent_rollouts=cap),
                                trace_path=args.trace_path)
        try:
            await ctl.initialize_async()
            if args.rates or args.concurrencies:
                from ..load.sweep import sweep_async

                runs: list[Any] = []
                sweep = await sweep_async(ctl, requests, rates=args.rates,
                                          concurrencies=args.concurrencies,
                                          spec_template=_spec(args), goodput=args.slos,
                                          percentiles=tuple(args.percentiles),
                                          progress=not args.disable_tqdm, runs=runs)
                return {"sweep": sweep, "runs": runs}
            run = await run_load_async(ctl, requests, _spec(args),
                                       progress=not args.disable_tqdm)
            return {"run": run}
        finally:
            await ctl.close_async()


# -- output -----------------------------------------------------------------------------

def _fmt_row(label: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{label:<40} {value:<10.2f}"
    return f"{label:<40} {value:<10}"


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def format_summary(m: dict[str, Any], *, metrics: Sequence[str] = tuple(METRIC_HEADERS),
                   percentiles: Sequence[float] = (99,)) -> str:
    """``vllm bench serve``'s summary table for a result dict (plus achieved rate and lag)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_fmt_row("Successful requests:", int(m.get("completed", 0))))
    lines.append(_fmt_row("Failed requests:", int(m.get("failed", 0))))
    if m.get("max_concurrency") is not None:
        lines.append(_fmt_row("Maximum request concurrency:", m["max_concurrency"]))
    rate = _num(m.get("request_rate"))
    if math.isfinite(rate):
        lines.append(_fmt_row("Request rate configured (RPS):", rate))
    if math.isfinite(_num(m.get("achieved_rate"))):
        lines.append(_fmt_row("Request rate achieved (RPS):", _num(m["achieved_rate"])))
    lines.append(_fmt_row("Benchmark duration (s):", _num(m.get("duration"))))
    lines.append(_fmt_row("Total input tokens:", int(m.get("total_input_tokens", 0))))
    lines.append(_fmt_row("Total generated tokens:", int(m.get("total_output_tokens", 0))))
    lines.append(_fmt_row("Request throughput (req/s):", _num(m.get("request_throughput"))))
    if m.get("request_goodput") is not None:
        lines.append(_fmt_row("Request goodput (req/s):", _num(m["request_goodput"])))
    lines.append(_fmt_row("Output token throughput (tok/s):", _num(m.get("output_throughput"))))
    if "max_output_tokens_per_s" in m:
        lines.append(_fmt_row("Peak output token throughput (tok/s):",
                              _num(m["max_output_tokens_per_s"])))
    if "max_concurrent_requests" in m:
        lines.append(_fmt_row("Peak concurrent requests:", _num(m["max_concurrent_requests"])))
    lines.append(_fmt_row("Total token throughput (tok/s):",
                          _num(m.get("total_token_throughput"))))
    for key in metrics:
        short, header = METRIC_HEADERS[key]
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_fmt_row(f"Mean {short} (ms):", _num(m.get(f"mean_{key}_ms"))))
        lines.append(_fmt_row(f"Median {short} (ms):", _num(m.get(f"median_{key}_ms"))))
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            lines.append(_fmt_row(f"P{word} {short} (ms):", _num(m.get(f"p{word}_{key}_ms"))))
    if "p99_send_lag_ms" in m:
        lines.append("{s:{c}^{n}}".format(s="Send Lag (actual - scheduled)", n=50, c="-"))
        lines.append(_fmt_row("Median send lag (ms):", _num(m.get("median_send_lag_ms"))))
        lines.append(_fmt_row("P99 send lag (ms):", _num(m["p99_send_lag_ms"])))
    lines.append("=" * 50)
    return "\n".join(lines)


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
        "model_id": args.model,
        "tokenizer_id": args.tokenizer or args.model,
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
        out["latencies"] = [_num(x) for x in stats["e2el_s"]]
        out["queue_times"] = [_num(x) for x in stats["queue_wait_s"]]
        if args.save_detailed:
            out["input_lens"] = [int(x) if x == x else 0 for x in stats["prompt_tokens"]]
            out["output_lens"] = [int(x) if x == x else 0 for x in stats["output_tokens"]]
            out["ttfts"] = [_num(x) for x in stats["ttft_s"]]
            out["itls"] = [list(map(float, x)) if isinstance(x, list | tuple) else []
                           for x in stats["itl_s"]]
            out["start_times"] = [_num(x) for x in stats["sent_s"]]
            out["errors"] = ["" if r is None or r != r else str(r) for r in stats["reason"]]
    return {k: _plain(v) for k, v in out.items()}


def _plain(v: Any) -> Any:
    """A JSON-friendly value (numpy scalars -> Python; NaN stays NaN as vllm writes it)."""
    if hasattr(v, "item") and not isinstance(v, list | dict | str):
        try:
            return v.item()
        except (ValueError, AttributeError):
            return v
    return v


def _file_name(args: argparse.Namespace, *, sweep: bool) -> Path:
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    label = args.label or args.backend
    model = (args.model or "model").split("/")[-1]
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


def _sweep_table(sweep: pd.DataFrame) -> str:
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


def run(args: argparse.Namespace) -> int:
    """Run ``rollout-kit load``; returns the exit code (1 when no request completed).

    Bad options and unreachable servers raise :class:`~rollout_kit.errors.RolloutKitError`
    (``rollout_kit.cli.main`` prints them as one line).
    """
    _check_args(args)
    r = run_sync(_main(args), what="rollout-kit load")
    if "sweep" in r:
        sweep = r["sweep"]
        _out(_sweep_table(sweep))
        results = []
        for (_, row), level_run in zip(sweep.iterrows(), r["runs"], strict=False):
            level = row["level"]
            m = {k: v for k, v in row.items() if k not in ("level", "max_concurrency")}
            results.append(result_json(
                args, m, rate=float(level) if args.rates else None,
                concurrency=int(level) if args.concurrencies else None,
                frame=level_run.frame))
        if args.save_result:
            path = _file_name(args, sweep=True)
            path.write_text("\n".join(json.dumps(x) for x in results) + "\n")
            _out(f"wrote: {path}")
        interrupted = any(bool(x.get("interrupted")) for x in results)
        if interrupted:
            _note("interrupted: the levels above ran before Ctrl-C")
            return 130
        return 0 if sum(int(x.get("completed") or 0) for x in results) else 1
    run_ = r["run"]
    metrics = run_.metrics(goodput=args.slos, percentiles=tuple(args.percentiles))
    res = result_json(args, metrics, frame=run_.frame)
    _out(format_summary(res, metrics=args.metrics, percentiles=args.percentiles))
    reasons = _failure_lines(run_.frame)
    for line in reasons:
        _out(f"failed: {line}")
    if args.save_result:
        path = _file_name(args, sweep=False)
        path.write_text(json.dumps(res) + "\n")
        _out(f"wrote: {path}")
    if run_.interrupted:
        _note("interrupted: the results above cover the requests sent before Ctrl-C")
        return 130
    if not res.get("completed"):
        sys.stdout.flush()
        sys.stderr.write(f"rollout-kit: error: none of the {args.num_prompts} requests "
                         "completed; the reasons are above\n")
        return 1
    return 0


def _failure_lines(frame: pd.DataFrame, top: int = 3) -> list[str]:
    bad = frame[(frame["status"] != "accepted") & ~frame["warmup"].astype(bool)]
    if bad.empty:
        return []
    counts = bad["reason"].fillna("no reason given").astype(str).value_counts()
    return [f"{n} × {reason}" for reason, n in counts.head(top).items()]
