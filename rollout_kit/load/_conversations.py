"""Conversations as load: user-centric timing over the chat API.

Conversations (:class:`~._datasets.Conversation`) arrive on an arrival process (the same
:class:`~._arrivals.Arrivals` and :class:`~._spec.LoadSpec` as single requests); each is **one
task** of the controller, and each of its turns **one traced session** of that task: the
:class:`ConversationWorkflow` drives an :class:`~rollout_kit.agents.AgentClient` (sticky
routing per conversation, the session's ``conversation``, ``turn``, ``ttft_s`` and
``cached_tokens`` in the sessions frame). Turn ``k + 1`` is sent ``think_s`` seconds after
turn ``k``'s answer arrived (the user reads, then types), with the whole history — system
prompt, every message and every reply the server gave — so the server's prefix cache can serve
what it has seen (``usage.prompt_tokens_details.cached_tokens`` per turn).
``max_concurrency`` counts conversations (a user holds a slot from arrival to last answer).
Use a chat flavour (``vllm-chat``, ``sglang-chat``) and ``EngineConfig(stream=True)`` for
TTFT::

    from rollout_kit.load import Arrivals, LoadSpec, run_conversations_async
    from rollout_kit.load import synthetic_conversations
    convs = synthetic_conversations(100, turns=4, input_len=128, output_len=64,
                                    system_prompt_len=512, think_time="exponential:1")
    run = await run_conversations_async(ctl, convs, LoadSpec(arrivals=Arrivals(rate=5.0)))
    run.metrics(goodput="ttft:200")     # per turn, plus conversation keys
    run.by_turn()                       # TTFT and cache hits by turn index

What a run returns is a :class:`~._turns.ConversationRun` (:mod:`._turns`): the conversations'
frame (the runner's, one row per conversation), the turns frame and their metrics.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._config import GenerationConfig
from .._errors import ConfigError, EngineError, truncate
from ..agents import AgentClient
from ..engines import RecordingEngine
from ..tracing import current_task_id
from ._datasets.conversation import Conversation, ThinkTime, with_think_time
from ._runner import run_load_async
from ._spec import LoadSpec
from ._turns import ConversationRecord, ConversationRun, TurnRecord, build_conversation_run

if TYPE_CHECKING:
    from .._controller import RolloutController
    from ..engines import InferenceEngine



class ConversationWorkflow:
    """Send a :class:`~._datasets.Conversation`'s turns through an ``AgentClient``.

    Args:
        gconfig: sampling settings (default ``GenerationConfig(logprobs=False)``, as load
            requests); each turn's ``output_len`` sets ``max_tokens`` and the conversation's
            ``ignore_eos`` is or-ed in.
        turn_timeout: seconds one turn may take (the task fails with ``turn_timeout``).

    The records of every task it ran are in :attr:`records` (task id → record); the
    trajectory is ``{"turns": n, "answered": k}``.
    """

    def __init__(self, gconfig: GenerationConfig | None = None, *,
                 turn_timeout: float | None = None) -> None:
        if gconfig is not None and not isinstance(gconfig, GenerationConfig):
            raise ConfigError(f"gconfig must be a GenerationConfig, got "
                              f"{type(gconfig).__name__}")
        base = gconfig or GenerationConfig(logprobs=False)
        self.gconfig = base.new(n_samples=1) if base.n_samples != 1 else base
        self._eos = self.gconfig if self.gconfig.ignore_eos else self.gconfig.new(
            ignore_eos=True)
        self.turn_timeout = turn_timeout
        self.records: dict[int, ConversationRecord] = {}
        self._anonymous = -1

    def validate(self, data: Any) -> None:
        """Refuse anything but a :class:`~._datasets.Conversation` (``ConfigError``)."""
        if not isinstance(data, Conversation):
            raise ConfigError(f"a conversation load run takes Conversation items (from the "
                              f"conversation datasets), got {type(data).__name__}")

    def _record(self, num_turns: int) -> ConversationRecord:
        tid = current_task_id()
        if tid is None:  # outside a controller task: a key of its own
            tid = self._anonymous
            self._anonymous -= 1
        rec = self.records[tid] = ConversationRecord(num_turns=num_turns)
        return rec

    async def arun_episode(self, engine: InferenceEngine, data: Conversation) -> dict[str, Any]:
        """Send the turns, each ``think_s`` after the previous answer."""
        rec = self._record(data.num_turns)
        client = AgentClient(RecordingEngine(engine, rec),  # type: ignore[arg-type]
                             gconfig=self._eos if data.ignore_eos else self.gconfig,
                             turn_timeout=self.turn_timeout)
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": data.system}] if data.system else [])
        answered = math.nan
        try:
            for k, turn in enumerate(data.turns):
                tr = TurnRecord(turn=k, role=turn.role, think_s=turn.think_s if k else 0.0)
                rec.turns.append(tr)
                if k:
                    tr.due = answered + turn.think_s
                    await _sleep_until(tr.due)
                messages.append(turn.message(k))
                try:
                    if turn.output_len is not None:
                        done = await client.complete_json_async(messages,
                                                                max_tokens=turn.output_len)
                    else:
                        done = await client.complete_json_async(messages)
                except BaseException as exc:
                    tr.status = "cancelled" if isinstance(exc, asyncio.CancelledError) \
                        else "failed"
                    tr.reason = _reason(exc)
                    if tr.status == "failed":
                        tr.error = truncate(str(exc) or type(exc).__name__)
                    raise
                answered = tr.answered = time.perf_counter()
                tr.status = "accepted"
                tr.session_id = client.turns[-1].session_id if client.turns else None
                reply = done["choices"][0]["message"]
                msg: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
                if reply.get("tool_calls"):
                    msg["tool_calls"] = reply["tool_calls"]
                messages.append(msg)
        finally:
            client.close()
        return {"turns": data.num_turns, "answered": len(rec.turns)}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "interrupted"
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return reason
    return "engine_error" if isinstance(exc, EngineError) else type(exc).__name__


async def _sleep_until(due: float) -> None:
    """Sleep until ``perf_counter()`` reaches ``due`` (the loop's timer: it wakes up to about
    a millisecond late, which the turn's ``send_lag_s`` shows; a think time is seconds)."""
    while (left := due - time.perf_counter()) > 0:
        await asyncio.sleep(left)


def _prepare(conversations: Sequence[Any],
             think_time: ThinkTime | str | float | Mapping[str, Any] | None,
             seed: int) -> list[Conversation]:
    try:
        items = list(conversations)
    except TypeError:
        raise ConfigError(f"conversations must be a sequence, got "
                          f"{type(conversations).__name__}") from None
    for i, c in enumerate(items):
        if not isinstance(c, Conversation):
            raise ConfigError(f"conversations[{i}]: a Conversation is needed (from the "
                              f"conversation datasets), got {type(c).__name__}")
    if think_time is not None:
        items = with_think_time(items, think_time, seed)
    return items


async def run_conversations_async(
        controller: RolloutController, conversations: Sequence[Conversation],
        spec: LoadSpec | None = None, *, gconfig: GenerationConfig | None = None,
        think_time: ThinkTime | str | float | Mapping[str, Any] | None = None,
        seed: int = 0, turn_timeout: float | None = None,
        progress: bool = False) -> ConversationRun:
    """Offer conversations as load: each arrives on ``spec``'s schedule, then sends its turns
    a think time apart (see the module docstring).

    Args:
        controller: an initialized controller with a chat flavour (``vllm-chat``…).
        conversations: the dataset (cycled when the spec asks for more).
        spec: arrivals, bounds (``num_requests`` counts conversations),
            ``max_concurrency`` (conversations), warm-up (conversations).
        gconfig: sampling settings of every turn.
        think_time: replaces every turn's think time with draws from this
            :class:`~._datasets.ThinkTime` (seeded by ``seed``); default: the dataset's.
        seed: seeds ``think_time``'s draws.
        turn_timeout: seconds one turn may take.
        progress: a progress bar of conversations.

    Returns:
        The :class:`~._turns.ConversationRun` (interrupted runs too, as ``run_load_async``).

    Raises:
        ConfigError: items that are not conversations, a bad spec.
        DatasetError: a malformed or negative ``think_time``.
    """
    items = _prepare(conversations, think_time, seed)
    wf = ConversationWorkflow(gconfig, turn_timeout=turn_timeout)
    run = await run_load_async(controller, items, spec or LoadSpec(), workflow=wf,
                               progress=progress)
    return build_conversation_run(run, wf.records, items)


def run_conversations(controller: RolloutController, conversations: Sequence[Conversation],
                      spec: LoadSpec | None = None, **options: Any) -> ConversationRun:
    """Blocking twin of :func:`run_conversations_async` (a script, or a notebook cell
    without ``await``)."""
    return controller.binding.blocking(
        run_conversations_async(controller, conversations, spec, **options),
        "run_conversations()")
