"""``rollout-kit load``'s options: the argument parser and the checks run before any request.

:func:`add_arguments` adds the options, with ``vllm bench serve``'s names where they mean the
same (server, load, dataset and result groups). :func:`check_args` refuses bad values with a
one-line :class:`~rollout_kit.ConfigError` naming the option, and adds the parsed forms
the run uses to ``args``: ``rates`` / ``concurrencies`` (``--sweep`` /
``--sweep-concurrency`` levels), ``percentiles``, ``metrics`` (``--percentile-metrics``),
``slos`` (``--goodput``), ``meta`` (``--metadata``) and ``address`` (the server, without
``--sim``).
"""

from __future__ import annotations

import argparse
import math

from .._errors import ConfigError
from .._paths import parse_address
from .load_summary import METRIC_HEADERS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``rollout-kit load``'s options to ``parser``."""
    srv = parser.add_argument_group("server (as vllm bench serve)")
    srv.add_argument("--backend", default="vllm", metavar="FLAVOUR",
                     help="server flavour, a name of rollout_kit.engines.flavour_names() "
                          "(vllm: /v1/completions; sglang: /generate; vllm-chat, "
                          "sglang-chat: /v1/chat/completions, conversations), or vllm bench "
                          "serve's openai (vllm) / openai-chat (vllm-chat) (vllm)")
    srv.add_argument("--base-url", default=None,
                     help="server URL, e.g. http://127.0.0.1:8000 (overrides --host/--port)")
    srv.add_argument("--host", default="127.0.0.1", help="server host (127.0.0.1)")
    srv.add_argument("--port", type=int, default=8000, help="server port (8000)")
    srv.add_argument("--model", default=None,
                     help="model name sent with each request (the server's by default)")
    srv.add_argument("--tokenizer", default=None,
                     help="tokenizer.json or a model folder holding one: prompt lengths in "
                          "its tokens (default: the simulator's byte tokenizer)")
    srv.add_argument("--transport", choices=("loop", "aiohttp"), default="loop",
                     help="HTTP transport: the loop's own HTTP/1.1 client or aiohttp (loop)")
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
    load.add_argument("--num-prompts", type=int, default=None,
                      help="requests to send, warm-up not counted (1000; agent_trace: the "
                           "trace's own sessions)")
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
    data.add_argument("--dataset-name", default="random", metavar="NAME",
                      help="a name of rollout_kit.load.DATASET_NAMES, as vllm bench "
                           "serve's (random)")
    data.add_argument("--dataset-path", default=None, help="the dataset file")
    data.add_argument("--random-input-len", type=int, default=None,
                      help="prompt tokens (1024; a conversation's turns: 256, so that a "
                           "4-turn history fits a 4k context)")
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
    data.add_argument("--request-logprobs", action="store_true",
                      help="ask the server for each output token's logprob (off, as in vllm "
                           "bench serve: the server skips that work)")

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
    from .load_conversations import add_arguments as add_conversation_arguments

    add_conversation_arguments(parser)


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


#: ``--num-prompts`` unless given (vllm bench serve's), but for a trace of sessions
DEFAULT_NUM_PROMPTS = 1000


def _is_trace(dataset_name: str) -> bool:
    return dataset_name.strip().lower().replace("-", "_") == "agent_trace"


def check_args(args: argparse.Namespace) -> None:
    """Check the options (:class:`~rollout_kit.ConfigError` on a bad one) and add
    their parsed forms to ``args`` (see the module docstring)."""
    rate = args.request_rate
    if math.isnan(rate) or not rate > 0:
        raise ConfigError(f"--request-rate must be > 0 (or inf), got {rate}")
    if math.isnan(args.burstiness) or not args.burstiness > 0:
        raise ConfigError(f"--burstiness must be > 0, got {args.burstiness}")
    if args.num_prompts is not None and args.num_prompts < 1:
        raise ConfigError(f"--num-prompts must be >= 1, got {args.num_prompts}")
    # a trace replays its own sessions at their own times unless --num-prompts says more
    # (or fewer): rollout_kit._cli.load_conversations.conversations counts them
    if args.num_prompts is None and not _is_trace(args.dataset_name):
        args.num_prompts = DEFAULT_NUM_PROMPTS
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
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got "
                              f"{getattr(args, name)}")
    if not 0 <= args.random_range_ratio < 1:
        raise ConfigError(f"--random-range-ratio must be in [0, 1), got "
                          f"{args.random_range_ratio}")
    from ..load import dataset_takes_path

    if dataset_takes_path(args.dataset_name) and not args.dataset_path:
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
    from ..load import parse_goodput

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
