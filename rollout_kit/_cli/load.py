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

Conversations (:mod:`.load_conversations`): ``--backend openai-chat --endpoint
/v1/chat/completions`` (as ``vllm bench serve`` names them), a conversation dataset
(``sharegpt_multiturn``, ``multi_turn``, ``synthetic_multiturn``, ``agent_trace``) or
``--multi-turn`` make each "prompt" a conversation: it arrives at ``--request-rate``, sends
its turns ``--think-time`` apart (``--num-turns``, ``--system-prompt-len``), and the summary
adds TTFT by first / later turns, cache hits and goodput per conversation.

It prints the same summary table as ``vllm bench serve`` (plus the achieved rate and the
send lag), and ``--save-result`` writes a JSON with ``vllm bench serve --save-result``'s key
names for the shared metrics (``completed``, ``request_throughput``, ``median_ttft_ms``, …),
so scripts reading one read the other. A sweep writes one such object per level, one per
line (like ``--append-result`` over several runs).

Modules: :mod:`.load_options` (the options and their checks), :mod:`.load_summary` (the
printed tables), :mod:`.load_results` (the saved result JSON); this one runs the load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

from .._loop import run_sync
from .load_options import check_args
from .load_results import file_name, result_json
from .load_summary import failure_lines, format_summary, sweep_table
from .output import note as _note
from .output import out as _out


def _requests(args: argparse.Namespace) -> list[Any]:
    from dataclasses import replace

    from ..load import load_dataset

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
          concurrency: int | None = None, conversations: list[Any] | None = None) -> Any:
    from ..load import Arrivals, LoadSpec

    if conversations and all(c.timestamp is not None for c in conversations):
        return LoadSpec(arrivals=Arrivals.schedule(c.timestamp for c in conversations),
                        num_requests=len(conversations), duration=args.duration,
                        max_concurrency=args.max_concurrency, warmup=args.warmup)
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
    if getattr(args, "conversations", False):
        overrides["prompt_tokens_details"] = True  # cached tokens per turn, as vLLM's flag
    if args.model:
        overrides["model_name"] = args.model
    if args.tokenizer:
        overrides["tokenizer"] = args.tokenizer
    from ..engines import backend_for

    family = backend_for(args.backend).server_family
    async with serve(family, n=1, **overrides) as cluster:  # type: ignore[arg-type]
        yield str(cluster.addresses[0])


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from .._config import EngineConfig, ExecutorConfig, GenerationConfig
    from .._controller import RolloutController
    from ..load import run_load_async

    if getattr(args, "conversations", False):
        from .load_conversations import conversations

        requests = conversations(args)
    else:
        requests = _requests(args)
    gconfig = GenerationConfig(logprobs=args.request_logprobs)
    levels = [args.max_concurrency] if args.max_concurrency else []
    levels += args.concurrencies or []
    cap = max([*levels, args.num_prompts + args.warmup, 1])
    async with _server(args) as address:
        ctl = RolloutController(servers={getattr(args, "flavour", args.backend): [address]},
                                engine_config=EngineConfig(stream=True, model=args.model,
                                                           transport=args.transport),
                                executor_config=ExecutorConfig(max_concurrent_rollouts=cap),
                                trace_path=args.trace_path)
        try:
            await ctl.initialize_async()
            # the result's model_id and file name: --model, else the model the server names
            args.model_id = args.model or next(
                (m for e in ctl.engines if isinstance(m := getattr(e, "model", None), str)),
                None)
            if args.rates or args.concurrencies:
                from ..load import sweep_async

                runs: list[Any] = []
                sweep = await sweep_async(ctl, requests, rates=args.rates,
                                          concurrencies=args.concurrencies,
                                          spec_template=_spec(args), gconfig=gconfig,
                                          goodput=args.slos,
                                          percentiles=tuple(args.percentiles),
                                          progress=not args.disable_tqdm, runs=runs)
                return {"sweep": sweep, "runs": runs}
            if getattr(args, "conversations", False):
                from ..load import run_conversations_async

                crun = await run_conversations_async(
                    ctl, requests, _spec(args, conversations=requests), gconfig=gconfig,
                    think_time=args.think_time, seed=args.seed,
                    progress=not args.disable_tqdm)
                return {"conversations": crun}
            run = await run_load_async(ctl, requests, _spec(args), gconfig=gconfig,
                                       progress=not args.disable_tqdm)
            return {"run": run}
        finally:
            await ctl.close_async()


def _report_conversations(args: argparse.Namespace, crun: Any) -> int:
    from .load_conversations import conversation_lines

    metrics = crun.metrics(goodput=args.slos, percentiles=tuple(args.percentiles))
    res = result_json(args, metrics, frame=crun.turns)
    table = format_summary(res, metrics=args.metrics, percentiles=args.percentiles)
    body, _, last = table.rpartition("\n")
    _out("\n".join([body, *conversation_lines(res), last]))
    return _finish(args, res, crun.turns, crun.interrupted, "conversations",
                   f"none of the {args.num_prompts} conversations completed",
                   completed=int(res.get("completed_conversations") or 0))


def run(args: argparse.Namespace) -> int:
    """Run ``rollout-kit load``; returns the exit code (1 when no request completed).

    Bad options and unreachable servers raise :class:`~rollout_kit.RolloutKitError`
    (``rollout_kit._cli.main`` prints them as one line).
    """
    check_args(args)
    from .load_conversations import check_args as check_conversation_args

    check_conversation_args(args)  # also: an unknown flavour, one line naming the known ones
    r = run_sync(_main(args), what="rollout-kit load")
    if "conversations" in r:
        return _report_conversations(args, r["conversations"])
    if "sweep" in r:
        sweep = r["sweep"]
        _out(sweep_table(sweep))
        results = []
        for (_, row), level_run in zip(sweep.iterrows(), r["runs"], strict=False):
            level = row["level"]
            m = {k: v for k, v in row.items() if k not in ("level", "max_concurrency")}
            results.append(result_json(
                args, m, rate=float(level) if args.rates else None,
                concurrency=int(level) if args.concurrencies else None,
                frame=level_run.frame))
        if args.save_result:
            path = file_name(args, sweep=True)
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
    return _finish(args, res, run_.frame, run_.interrupted, "requests",
                   f"none of the {args.num_prompts} requests completed",
                   completed=int(res.get("completed") or 0))


def _finish(args: argparse.Namespace, res: dict[str, Any], frame: Any, interrupted: bool,
            unit: str, none_done: str, *, completed: int) -> int:
    """The failure reasons, the saved result and the exit code of one run (130 when
    interrupted, 1 when nothing — no request, no whole conversation — completed)."""
    for line in failure_lines(frame):
        _out(line)
    if args.save_result:
        path = file_name(args, sweep=False)
        path.write_text(json.dumps(res) + "\n")
        _out(f"wrote: {path}")
    if interrupted:
        _note(f"interrupted: the results above cover the {unit} sent before Ctrl-C")
        return 130
    if not completed:
        sys.stdout.flush()
        sys.stderr.write(f"rollout-kit: error: {none_done}; the reasons are above\n")
        return 1
    return 0
