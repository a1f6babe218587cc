"""The simulated engine: running slots, FIFO waiting queue, token timing, abort and pause.

One ``SimEngine`` per server. A request becomes one ``Sequence`` per generated sample; each
sequence takes one of ``max_num_seqs`` running slots (or waits FIFO; a full queue is refused),
gets its ``OutputPlan``, and releases tokens at absolute deadlines on the loop clock:
first token at ``admit + ttft``, then one ITL (scaled by the current load factor) per token.
Sleeps are futures woken by ``loop.call_at``; ``abort``/``pause`` wake them early, and the
tokens whose deadline has passed form the partial output.

Pause modes: ``abort`` (abort everything in flight, hold new requests), ``wait`` (hold new
requests, let in-flight ones finish), ``keep`` (freeze in-flight ones where they are and hold
new requests; ``resume`` continues them). SGLang's ``retract``/``in_place`` map to ``keep``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from ._answers import arithmetic_answer, arithmetic_answer_text
from ._chat_template import TOOLS_HEADER, tool_reply
from ._config import SimConfig
from ._generation import OutputPlan, SamplingSpec, plan_output, sequence_key
from ._latency import LatencyModel
from ._metrics import MetricsRecorder
from ._prefix_cache import PrefixCache
from ._tokenizer import BYTE_OFFSET, SimTokenizer

ABORT_RUNNING = "Aborted"
ABORT_WAITING = "Abort in waiting queue"
PauseMode = Literal["abort", "wait", "keep"]
#: the byte tokenizer's ids of the tools block header: a prompt not starting with them is no
#: tool-mode prompt, found with one comparison
_TOOLS_IDS = [b + BYTE_OFFSET for b in TOOLS_HEADER.encode()]
_TOOLS_FIRST = _TOOLS_IDS[0]
AdmitResult = Literal["ok", "aborted", "full"]
Emit = Callable[["SimSequence", int], Awaitable[None]]


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class SimSequence:
    """One generated sample of one request, with its timestamps (loop clock)."""

    __slots__ = ("abort_after", "aborted", "admit_fut", "admit_t", "arrival", "cached",
                 "end_t", "first_t", "index", "max_tokens", "n_done", "plan", "prompt_ids",
                 "prompt_text", "rid", "spec", "state", "trace_parent", "waker")

    def __init__(self, rid: str, prompt_ids: Sequence[int], spec: SamplingSpec,
                 arrival: float, index: int = 0, prompt_text: str | None = None,
                 trace_parent: str | None = None) -> None:
        self.rid = rid
        self.trace_parent = trace_parent  # the request's W3C traceparent header
        self.prompt_ids = prompt_ids
        self.prompt_text = prompt_text
        self.spec = spec
        self.max_tokens = spec.max_tokens
        self.index = index
        self.arrival = arrival
        self.admit_t = arrival
        self.first_t = arrival
        self.end_t = arrival
        self.cached = 0
        self.n_done = 0
        self.plan: OutputPlan | None = None
        self.state: Literal["new", "waiting", "running", "dropped", "done"] = "new"
        self.aborted: str | None = None
        self.admit_fut: asyncio.Future[bool] | None = None
        self.waker: asyncio.Future[None] | None = None
        self.abort_after: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def finished_in_queue(self) -> bool:
        """Aborted before it was admitted (no prefill, no tokens)."""
        return self.aborted == ABORT_WAITING

    def timing(self, now: float) -> dict[str, float]:
        """Server-side timings in seconds (``queue_s``, ``prefill_s``, ``decode_s``,
        ``first_token_s``, ``e2e_s``) plus ``cached_tokens``."""
        got = self.n_done > 0
        return {
            "queue_s": self.admit_t - self.arrival,
            "prefill_s": (self.first_t - self.admit_t) if got else 0.0,
            "decode_s": (self.end_t - self.first_t) if got else 0.0,
            "first_token_s": (self.first_t - self.arrival) if got else 0.0,
            "e2e_s": now - self.arrival,
            "cached_tokens": self.cached,
        }


class SimEngine:
    """Scheduler state of one simulated server."""

    def __init__(self, config: SimConfig, tokenizer: SimTokenizer, *, replica: int = 0,
                 draws: int = 0) -> None:
        self.config = config
        #: told apart from other servers of one cluster (same seed) in unseeded draws
        self.replica = replica
        #: sequences planned so far: the draw counter of unseeded samples
        self.draws = draws
        self.tokenizer = tokenizer
        self.latency = LatencyModel(config)
        self.cache = PrefixCache(config.block_size, config.prefix_cache_blocks)
        self.metrics = MetricsRecorder()
        #: called with (sequence, finish reason, loop time) as each sequence is accounted
        #: (the span exporter of ``SimConfig.otlp_traces_endpoint``)
        self.span_sink: Callable[[SimSequence, str, float], None] | None = None
        self.running = 0
        self.waiting: deque[SimSequence] = deque()
        self.live: set[SimSequence] = set()
        self.paused = False
        self.pause_mode: PauseMode | None = None
        self.frozen = False
        self.weight_version = 0
        self.weight_label = "default"
        self.started_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resume: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._stream_group = max(1, config.stream_chunk_tokens)
        itl = config.itl_s * config.time_scale
        self._batch_group = max(1, math.ceil(0.05 / itl)) if itl > 0 else 1 << 30

    # -- lifecycle -------------------------------------------------------------------------
    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the loop the server runs on (events are created here)."""
        self._loop = loop
        self._resume = asyncio.Event()
        self._resume.set()
        self._closing = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.started_at = loop.time()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "SimEngine is not bound to a loop"
        return self._loop

    def close(self) -> None:
        """Wake every hanging handler and abort every sequence (server stop)."""
        if self._closing is not None:
            self._closing.set()
        if self._resume is not None:
            self._resume.set()
        self.abort(None)

    async def hang(self) -> None:
        """Wait until the server stops (or the handler is cancelled)."""
        assert self._closing is not None
        await self._closing.wait()

    # -- sequences ---------------------------------------------------------------------------
    def new_sequence(self, rid: str, prompt_ids: Sequence[int], spec: SamplingSpec, *,
                     index: int, sample_index: int, client_rid: str | None,
                     prompt_text: str | None = None,
                     trace_parent: str | None = None) -> SimSequence:
        """A sequence with its output plan decided (not yet admitted)."""
        cfg = self.config
        if spec.seed is not None and not cfg.honor_seed:
            spec = dataclasses.replace(spec, seed=None)
        seq = SimSequence(rid, prompt_ids, spec, self.loop.time(), index, prompt_text,
                          trace_parent)
        self.draws += 1
        key = sequence_key(cfg.seed, prompt_ids, spec, sample_index, client_rid,
                           draw=hash((self.draws, self.replica)))
        fn = cfg.answer_fn
        answer: str | None = None
        if fn is not None:
            text = prompt_text if prompt_text is not None else self.tokenizer.decode(prompt_ids)
            answer = str(fn(text))
        elif (answer := self._tool_reply(prompt_ids, prompt_text)) is not None:
            pass
        elif self.tokenizer.byte_level:
            answer = arithmetic_answer(prompt_ids, cfg.accuracy, key)
        else:  # a real tokenizer: look for the question in the text
            text = prompt_text if prompt_text is not None else self.tokenizer.decode(
                prompt_ids[-512:])
            answer = arithmetic_answer_text(text, cfg.accuracy, key)
        seq.plan = plan_output(self.tokenizer, spec, key, answer=answer,
                               mean_output_tokens=cfg.mean_output_tokens,
                               length_sigma=(cfg.output_length_sigma
                                             if cfg.output_length == "lognormal" else None))
        return seq

    def _tool_reply(self, prompt_ids: Sequence[int], prompt_text: str | None) -> str | None:
        """The tool mode's forced output (``chat_template.tool_reply``) for a prompt that
        starts with the tools block; other prompts cost one comparison."""
        if prompt_text is not None:
            if not prompt_text.startswith(TOOLS_HEADER):
                return None
            text = prompt_text
        elif self.tokenizer.byte_level:
            if not prompt_ids or prompt_ids[0] != _TOOLS_FIRST or (
                    list(prompt_ids[:len(_TOOLS_IDS)]) != _TOOLS_IDS):
                return None
            text = self.tokenizer.decode(prompt_ids)
        else:  # a real tokenizer may add a BOS: look at the decoded start
            if not self.tokenizer.decode(prompt_ids[:16]).startswith(TOOLS_HEADER[:8]):
                return None
            text = self.tokenizer.decode(prompt_ids)
        return tool_reply(text, self.config.chat_template)

    async def gate(self, *, may_reject: bool) -> bool:
        """Hold a new request while paused.

        Returns:
            False when the request must be refused (vLLM ``paused_new_requests="reject"``
            during an ``abort``/``wait`` pause), else True once generation may start.
        """
        while self.paused:
            if (may_reject and self.config.paused_new_requests == "reject"
                    and self.pause_mode in ("abort", "wait")):
                return False
            assert self._resume is not None
            await self._resume.wait()
        return True

    async def admit(self, seq: SimSequence) -> AdmitResult:
        """Take a running slot, waiting FIFO if none is free."""
        self.live.add(seq)
        if self._idle is not None:
            self._idle.clear()
        if seq.aborted is not None:
            return "aborted"
        if self.running < self.config.max_num_seqs and not self.waiting:
            self._start(seq)
            return "ok"
        if len(self.waiting) >= self.config.max_waiting:
            self._forget(seq)
            return "full"
        fut: asyncio.Future[bool] = self.loop.create_future()
        seq.admit_fut = fut
        seq.state = "waiting"
        self.waiting.append(seq)
        try:
            ok = await fut
        except asyncio.CancelledError:
            if seq.state == "waiting":
                self.waiting.remove(seq)
                seq.state = "done"
            raise
        return "ok" if ok else "aborted"

    def _start(self, seq: SimSequence) -> None:
        self.running += 1
        seq.state = "running"
        seq.admit_t = self.loop.time()
        seq.cached = self.cache.lookup_and_insert(seq.prompt_ids)

    def _forget(self, seq: SimSequence) -> None:
        self.live.discard(seq)
        if not self.live and self._idle is not None:
            self._idle.set()

    def release(self, seq: SimSequence, *, record: bool = True) -> None:
        """Give back the slot (if any), admit the next waiter, account the sequence."""
        was = seq.state
        seq.state = "done"
        if was == "running":
            self.running -= 1
            self._admit_next()
        elif was == "waiting":
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        self._forget(seq)
        if record and was in ("running", "waiting", "dropped"):
            if was != "running":
                seq.end_t = seq.first_t = self.loop.time()
            finish = "abort" if seq.aborted is not None else (
                "length" if seq.plan is None or seq.plan.finish == "length" else "stop")
            m = self.metrics
            m.prefix_queries += seq.prompt_tokens if was == "running" else 0
            m.prefix_hits += seq.cached
            m.record(prompt_tokens=seq.prompt_tokens if was == "running" else 0,
                     cached_tokens=seq.cached, generated=seq.n_done, finish=finish,
                     queue_s=seq.admit_t - seq.arrival,
                     prefill_s=seq.first_t - seq.admit_t if seq.n_done else 0.0,
                     decode_s=seq.end_t - seq.first_t if seq.n_done else 0.0,
                     e2e_s=self.loop.time() - seq.arrival, max_tokens=seq.max_tokens)
            if self.span_sink is not None:
                self.span_sink(seq, finish, self.loop.time())

    def _admit_next(self) -> None:
        while self.waiting and self.running < self.config.max_num_seqs:
            nxt = self.waiting.popleft()
            fut = nxt.admit_fut
            if fut is None or fut.done():
                continue
            self._start(nxt)
            fut.set_result(True)

    # -- token timing ------------------------------------------------------------------------
    async def _sleep_until(self, seq: SimSequence, deadline: float) -> None:
        loop = self.loop
        if deadline <= loop.time():
            return
        fut: asyncio.Future[None] = loop.create_future()
        seq.waker = fut
        handle = loop.call_at(deadline, _wake, fut)
        try:
            await fut
        finally:
            handle.cancel()
            seq.waker = None

    async def _frozen_wait(self) -> float:
        assert self._resume is not None
        while self.frozen:
            await self._resume.wait()
        return self.loop.time()

    async def run(self, seq: SimSequence, emit: Emit | None) -> None:
        """Release the sequence's tokens on schedule; ``emit(seq, n)`` after each chunk.

        Ends with ``seq.n_done`` tokens released and ``seq.aborted`` set if it was cut short.
        """
        plan = seq.plan
        assert plan is not None
        total = len(plan)
        if seq.abort_after is not None and seq.abort_after < total:
            total = seq.abort_after
        lat = self.latency
        loop = self.loop
        if lat.zero:
            await self._run_zero(seq, emit, total, len(plan))
            return
        group = self._stream_group if emit is not None else self._batch_group
        t = seq.admit_t + lat.ttft(seq.prompt_tokens - seq.cached)
        i = 0
        while i < total and seq.aborted is None:
            if self.frozen:
                now = await self._frozen_wait()
                t = now + (lat.ttft(seq.prompt_tokens - seq.cached) if i == 0 else 0.0)
            g = min(group, total - i)
            deadlines: list[float] = []
            for j in range(g):
                if i + j > 0:
                    t += lat.itl(self.running)
                deadlines.append(t)
            await self._sleep_until(seq, deadlines[-1])
            if seq.aborted is not None or self.frozen:
                k = bisect_right(deadlines, loop.time())
                if k == 0:
                    continue
                if k < g:
                    deadlines = deadlines[:k]
                    g = k
            if i == 0:
                seq.first_t = deadlines[0]
            i += g
            seq.n_done = i
            seq.end_t = deadlines[-1]
            if emit is not None:
                await emit(seq, i)
        if seq.aborted is None and total < len(plan):
            seq.aborted = ABORT_RUNNING
        if seq.n_done == 0:
            seq.end_t = seq.first_t = loop.time()

    async def _run_zero(self, seq: SimSequence, emit: Emit | None, total: int,
                        full: int) -> None:
        await asyncio.sleep(0)
        now = self.loop.time()
        seq.first_t = seq.end_t = now
        if seq.aborted is not None:
            return
        if emit is None:
            seq.n_done = total
        else:
            step = self._stream_group
            i = 0
            while i < total and seq.aborted is None:
                i = min(i + step, total)
                seq.n_done = i
                await emit(seq, i)
        if seq.aborted is None and total < full:
            seq.aborted = ABORT_RUNNING

    # -- control ------------------------------------------------------------------------------
    def abort(self, rid_prefix: str | None, *, exact: bool = False) -> int:
        """Abort live sequences whose rid starts with (or equals) ``rid_prefix``; all if None.

        Returns:
            How many sequences were aborted.
        """
        count = 0
        for seq in list(self.live):
            if rid_prefix is not None:
                if exact and seq.rid != rid_prefix:
                    continue
                if not exact and not seq.rid.startswith(rid_prefix):
                    continue
            if seq.aborted is not None or seq.state == "done":
                continue
            count += 1
            if seq.state == "waiting":
                seq.aborted = ABORT_WAITING
                self.waiting.remove(seq)
                seq.state = "dropped"
                self._forget(seq)
                if seq.admit_fut is not None:
                    _wake_bool(seq.admit_fut)
            else:
                seq.aborted = ABORT_RUNNING
                if seq.waker is not None:
                    _wake(seq.waker)
        return count

    async def pause(self, mode: PauseMode) -> None:
        """Pause generation (see the module docstring for the modes)."""
        assert self._resume is not None and self._idle is not None
        self.paused = True
        self.pause_mode = mode
        self._resume.clear()
        if mode == "abort":
            self.abort(None)
        elif mode == "keep":
            self.frozen = True
            for seq in list(self.live):
                if seq.waker is not None:
                    _wake(seq.waker)
        else:
            await self._idle.wait()

    def resume(self) -> None:
        """End a pause: held requests start, frozen sequences continue."""
        self.paused = False
        self.pause_mode = None
        self.frozen = False
        if self._resume is not None:
            self._resume.set()

    def capacity_left(self) -> int:
        """Sequences that can still be admitted or queued right now."""
        cfg = self.config
        return (cfg.max_num_seqs - self.running) + (cfg.max_waiting - len(self.waiting))

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)


def _wake_bool(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
