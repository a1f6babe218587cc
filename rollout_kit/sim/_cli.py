"""``rollout-kit sim``: serve simulated SGLang / vLLM servers until interrupted.

Prints one URL per line (flushed) once every server listens, then serves until SIGINT or
SIGTERM. Binds 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from .._errors import ConfigError
from ._config import SimConfig
from ._faults import FaultPlan
from ._server import serve
from ._tokenizer import load_tokenizer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``sim`` options to ``parser``."""
    d = SimConfig()
    parser.add_argument("--api", choices=("sglang", "vllm"), default="sglang",
                        help="wire protocol to speak (default: sglang)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0,
                        help="first port; servers use PORT, PORT+1, … (default: free ports)")
    parser.add_argument("--num-servers", type=int, default=1, help="how many servers")
    parser.add_argument("--model-name", default=d.model_name)
    parser.add_argument("--context-length", type=int, default=d.context_length)
    parser.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    parser.add_argument("--max-waiting", type=int, default=d.max_waiting)
    parser.add_argument("--time-scale", type=float, default=d.time_scale)
    parser.add_argument("--zero-latency", action="store_true",
                        help="no simulated latency (client-overhead benchmarks)")
    parser.add_argument("--prefill-overhead-s", type=float, default=d.prefill_overhead_s)
    parser.add_argument("--prefill-per-token-s", type=float, default=d.prefill_per_token_s)
    parser.add_argument("--itl-s", type=float, default=d.itl_s)
    parser.add_argument("--load-factor", type=float, default=d.load_factor)
    parser.add_argument("--jitter-cv", type=float, default=d.jitter_cv)
    parser.add_argument("--mean-output-tokens", type=int, default=d.mean_output_tokens)
    parser.add_argument("--output-length", choices=("uniform", "lognormal"),
                        default=d.output_length,
                        help="length model: lognormal gives every output a long-tailed "
                             "length with mean --mean-output-tokens")
    parser.add_argument("--output-length-sigma", type=float, default=d.output_length_sigma,
                        help="the lognormal's log-sd (its tail)")
    parser.add_argument("--weight-update-s", type=float, default=d.weight_update_s,
                        help="seconds one /update_weights_from_disk takes (SGLang)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--accuracy", type=float, default=d.accuracy,
                        help="probability an arithmetic prompt ('What is 17+25?') is "
                             f"answered right (default {d.accuracy})")
    parser.add_argument("--paused-new-requests", choices=("hold", "reject"),
                        default=d.paused_new_requests)
    parser.add_argument("--chat-template", choices=("plain", "drop_think"),
                        default=d.chat_template,
                        help="chat template variant: drop_think keeps only the text after "
                             "</think> of earlier assistant turns (reproduces retokenization "
                             "drift)")
    parser.add_argument("--enable-prompt-tokens-details", action="store_true",
                        help="usage.prompt_tokens_details.cached_tokens on the OpenAI-"
                             "compatible endpoints (vLLM's flag; SGLang's "
                             "--enable-cache-report)")
    parser.add_argument("--error-rate", type=float, default=0.0,
                        help="fraction of generation requests answered with an error")
    parser.add_argument("--tokenizer", default=None, metavar="PATH",
                        help="count and generate tokens with this tokenizer.json (or a model "
                             "folder holding one) instead of bytes, so lengths agree with a "
                             "client using it (e.g. vllm bench serve --tokenizer PATH)")
    parser.add_argument("--error-status", type=int, action="append", default=None,
                        help="status for injected errors (repeatable; default 500)")


def _config(args: argparse.Namespace) -> SimConfig:
    faults = None
    if args.error_rate:
        faults = FaultPlan(error_rate=args.error_rate, seed=args.seed,
                           error_statuses=tuple(args.error_status or (500,)))
    return SimConfig(
        model_name=args.model_name, context_length=args.context_length,
        max_num_seqs=args.max_num_seqs, max_waiting=args.max_waiting,
        time_scale=args.time_scale, zero_latency=args.zero_latency,
        prefill_overhead_s=args.prefill_overhead_s,
        prefill_per_token_s=args.prefill_per_token_s, itl_s=args.itl_s,
        load_factor=args.load_factor, jitter_cv=args.jitter_cv,
        mean_output_tokens=args.mean_output_tokens, output_length=args.output_length,
        output_length_sigma=args.output_length_sigma, weight_update_s=args.weight_update_s,
        seed=args.seed, accuracy=args.accuracy,
        paused_new_requests=args.paused_new_requests, faults=faults,
        chat_template=args.chat_template,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        tokenizer=args.tokenizer)


async def _serve(args: argparse.Namespace, config: SimConfig) -> None:
    n = args.num_servers
    ports = [args.port + i for i in range(n)] if args.port else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix
            pass
    async with serve(args.api, n, config=config, host=args.host, ports=ports) as cluster:
        for url in cluster.urls:
            print(url, flush=True)
        await stop.wait()


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status."""
    try:
        config = _config(args)
        if args.num_servers < 1:
            raise ConfigError("--num-servers must be >= 1")
        load_tokenizer(config.tokenizer)  # a bad file is a usage error, before listening
    except ConfigError as exc:
        print(f"rollout-kit sim: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args, config))
    except OSError as exc:
        print(f"rollout-kit sim: cannot listen: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
