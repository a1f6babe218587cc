"""``rollout-kit load`` with conversations: the chat endpoint, multi-turn datasets, think time.

A run is a *conversation run* when the endpoint is a chat endpoint (``--backend openai-chat``
— ``vllm bench serve``'s name, the ``vllm-chat`` flavour — or ``sglang-chat``; ``--endpoint
/v1/chat/completions``), when the dataset is a conversation dataset (``sharegpt_multiturn``,
``multi_turn``, ``synthetic_multiturn``, ``agent_trace``), or with ``--multi-turn``. Then:

* ``--num-prompts`` counts conversations, ``--request-rate`` is their arrival rate,
  ``--max-concurrency`` caps the conversations in flight and ``--warmup`` counts
  conversations;
* ``random`` becomes synthetic conversations of ``--num-turns`` turns (1 without
  ``--multi-turn``, else 4) of ``--random-input-len`` (default 256 here, not 1,024: the
  history must fit the context) / ``--random-output-len`` tokens, with
  ``--system-prompt-len`` tokens of system prompt shared by all; ``sharegpt`` keeps the first
  user turn (as ``vllm bench serve``'s chat backend) or, with ``--multi-turn``, every turn
  (at most ``--num-turns``); ``jsonl`` / ``custom`` prompts are one-turn conversations;
* ``--think-time`` replaces every think time (the dataset's, or 0) with draws from a
  distribution: ``2``, ``uniform:1,3``, ``exponential:2``, ``lognormal:2,0.5`` (seconds);
* ``agent_trace`` replays the trace's own sessions, each at its traced time
  (``--trace-time-scale``); ``--num-prompts`` takes that many instead (oversampled).

The summary is ``vllm bench serve``'s over the turns (each turn a request) plus a
conversation section (arrival rate offered and achieved, completion time, goodput per
conversation, TTFT of first and later turns, cache hits); ``--save-result`` writes the
turns' metrics and the conversation keys.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from .._errors import ConfigError
from .load_results import num

#: datasets whose items are conversations
CONVERSATION_DATASETS = ("sharegpt_multiturn", "multi_turn", "synthetic_multiturn",
                         "agent_trace")
#: ``--random-input-len`` unless given: vllm bench serve's for single requests, and for the
#: turns of a conversation what keeps 4 turns' history and replies (4 × (256 + 128) tokens)
#: inside a 4,096-token context, the simulator's and many small models'
SINGLE_INPUT_LEN = 1024
CONVERSATION_INPUT_LEN = 256
#: single-request datasets a conversation run can turn into conversations
_CONVERTIBLE = ("random", "sharegpt", "jsonl", "custom")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the conversation options (the ``conversations`` group)."""
    g = parser.add_argument_group(
        "conversations (multi-turn chat load: one task per conversation, one session per turn)")
    g.add_argument("--endpoint", default=None,
                   help="API path, as vllm bench serve: /v1/chat/completions (the chat "
                        "backends' default: conversations) or /v1/completions")
    g.add_argument("--multi-turn", action="store_true",
                   help="send every turn of each conversation (random: synthetic "
                        "conversations; sharegpt: all user turns); implies the chat API")
    g.add_argument("--num-turns", type=int, default=None,
                   help="turns per conversation (random: exactly; file datasets: at most) "
                        "(random: 4 with --multi-turn, else 1)")
    g.add_argument("--think-time", default=None, metavar="DIST",
                   help="seconds between an answer and the next turn, drawn per turn: 2, "
                        "constant:2, uniform:1,3, exponential:2, lognormal:2,0.5 (default: "
                        "the dataset's, else 0)")
    g.add_argument("--system-prompt-len", type=int, default=0,
                   help="random conversations: a system prompt of this many tokens shared by "
                        "all (0)")


def _chat_endpoint(flavour: str) -> str | None:
    from ..engines import backend_for

    return backend_for(flavour).chat_endpoint


def check_args(args: argparse.Namespace) -> None:
    """Decide whether this is a conversation run (``args.conversations``), resolve the
    flavour (``args.flavour``), and check the conversation options (``ConfigError``)."""
    from ..engines import backend_for

    backend = backend_for(args.backend)  # an unknown flavour: one line naming the known ones
    args.flavour = backend.flavour  # an alias (openai-chat) -> the flavour (vllm-chat)
    chat = backend.chat_endpoint
    endpoint = args.endpoint
    if endpoint is not None and endpoint not in (chat, backend.generate_endpoint):
        hint = (" (the chat API: --backend openai-chat)" if endpoint == "/v1/chat/completions"
                else "")
        served = ", ".join(e for e in (chat, backend.generate_endpoint) if e)
        raise ConfigError(f"--endpoint {endpoint}: --backend {args.backend} serves {served}"
                          f"{hint}")
    name = args.dataset_name.strip().lower().replace("-", "_")
    conv = (name in CONVERSATION_DATASETS or args.multi_turn
            or (chat is not None and endpoint in (None, chat)))
    args.conversations = conv
    if args.random_input_len is None:  # a turn's share of a context the history must fit
        args.random_input_len = CONVERSATION_INPUT_LEN if conv else SINGLE_INPUT_LEN
    if args.num_turns is not None and args.num_turns < 1:
        raise ConfigError(f"--num-turns must be >= 1, got {args.num_turns}")
    if args.system_prompt_len < 0:
        raise ConfigError(f"--system-prompt-len must be >= 0, got {args.system_prompt_len}")
    if not conv:
        for opt, given in (("--num-turns", args.num_turns is not None),
                           ("--think-time", args.think_time is not None),
                           ("--system-prompt-len", args.system_prompt_len > 0)):
            if given:
                raise ConfigError(f"{opt} applies to conversations: use a chat backend "
                                  "(--backend openai-chat) or --multi-turn")
        return
    if chat is None:
        raise ConfigError(f"conversations go to /v1/chat/completions, which --backend "
                          f"{args.backend} does not speak: use --backend openai-chat "
                          "(vllm-chat) or sglang-chat")
    if endpoint is not None and endpoint != chat:
        raise ConfigError(f"conversations go to {chat}, not --endpoint {endpoint}")
    if name not in CONVERSATION_DATASETS and name not in _CONVERTIBLE:
        raise ConfigError(f"--dataset-name {args.dataset_name} has no conversations; with the "
                          f"chat API use one of {', '.join(CONVERSATION_DATASETS + _CONVERTIBLE)}")
    if args.rates or args.concurrencies:
        raise ConfigError("--sweep / --sweep-concurrency run single requests; a conversation "
                          "run takes one --request-rate")
    if args.think_time is not None:
        from ..load import ThinkTime

        ThinkTime.parse(args.think_time)  # a negative or malformed one: one line, no run


def conversations(args: argparse.Namespace) -> list[Any]:
    """The conversations of a conversation run (``--num-prompts`` + ``--warmup`` of them)."""
    from ..load import Conversation, ConversationTurn, load_dataset

    name = args.dataset_name.strip().lower().replace("-", "_")
    if name == "agent_trace" and args.num_prompts is None:  # the trace's own sessions
        items = load_dataset(name, args.dataset_path, time_scale=args.trace_time_scale,
                             seed=args.seed, **({"tokenizer": args.tokenizer}
                                                if args.tokenizer else {}))
        if len(items) <= args.warmup:
            raise ConfigError(f"--dataset-path {args.dataset_path} holds {len(items)} "
                              f"session(s); --warmup {args.warmup} leaves none to measure")
        args.num_prompts = len(items) - args.warmup
        return list(items)
    n = args.num_prompts + args.warmup
    tok: dict[str, Any] = {"tokenizer": args.tokenizer} if args.tokenizer else {}
    turns = args.num_turns
    if name in ("random", "synthetic_multiturn"):
        items = load_dataset(
            "synthetic_multiturn", num=n,
            turns=turns if turns is not None else (4 if args.multi_turn or
                                                   name == "synthetic_multiturn" else 1),
            input_len=args.random_input_len, output_len=args.random_output_len,
            range_ratio=args.random_range_ratio, system_prompt_len=args.system_prompt_len,
            seed=args.seed, **tok)
    elif name in ("sharegpt", "sharegpt_multiturn", "multi_turn"):
        file_name = "multi_turn" if name == "multi_turn" else "sharegpt_multiturn"
        max_turns = turns if turns is not None else (
            1 if name == "sharegpt" and not args.multi_turn else None)
        items = load_dataset(file_name, args.dataset_path, num=n, max_turns=max_turns,
                             output_len=args.sharegpt_output_len, seed=args.seed,
                             ignore_eos=args.ignore_eos, **tok)
    elif name == "agent_trace":
        items = load_dataset(name, args.dataset_path, time_scale=args.trace_time_scale,
                             num=n, seed=args.seed, **tok)
    else:  # jsonl / custom: each prompt a one-turn conversation
        reqs = load_dataset(name, args.dataset_path, num=n, seed=args.seed, **tok)
        items = [Conversation(turns=(ConversationTurn(content=r.prompt,
                                                      output_len=r.output_len),),
                              ignore_eos=args.ignore_eos and r.output_len is not None)
                 for r in reqs]
    return list(items)[:n]


def conversation_lines(m: dict[str, Any]) -> list[str]:
    """The conversation section of the summary."""
    def row(label: str, value: Any) -> str:
        if isinstance(value, float):
            return f"{label:<40} {value:<10.2f}"
        return f"{label:<40} {value:<10}"

    lines = ["{s:{c}^{n}}".format(s=" Conversations ", n=50, c="-")]
    lines.append(row("Successful conversations:", int(m.get("completed_conversations", 0))))
    lines.append(row("Failed conversations:", int(m.get("failed_conversations", 0))))
    lines.append(row("Turns per conversation:", num(m.get("turns_per_conversation"))))
    for label, key in (("Conversation rate offered (conv/s):", "offered_rate"),
                       ("Conversation rate achieved (conv/s):", "achieved_rate"),
                       ("Conversation throughput (conv/s):", "conversation_throughput")):
        v = num(m.get(key))
        if math.isfinite(v):
            lines.append(row(label, v))
    if math.isfinite(num(m.get("conversation_goodput"))):
        lines.append(row("Conversation goodput (conv/s):", num(m["conversation_goodput"])))
    lines.append(row("Mean conversation time (ms):", num(m.get("mean_conversation_ms"))))
    lines.append(row("Median conversation time (ms):", num(m.get("median_conversation_ms"))))
    p99 = m.get("p99_conversation_ms")
    if p99 is not None:
        lines.append(row("P99 conversation time (ms):", num(p99)))
    lines.append(row("Median TTFT, first turns (ms):", num(m.get("median_ttft_first_turn_ms"))))
    lines.append(row("Median TTFT, later turns (ms):",
                     num(m.get("median_ttft_later_turns_ms"))))
    lines.append(row("Cache hit ratio, later turns:", num(m.get("cache_hit_ratio"))))
    return lines
