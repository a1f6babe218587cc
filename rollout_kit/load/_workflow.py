"""Workflows of a load run: plain generate requests per task, or any workflow, measured.

* :class:`GenerateRequest` turns one :class:`~rollout_kit.load.LoadRequest` (any
  object with ``prompt`` / ``prompt_ids``, ``output_len``, ``ignore_eos``, ``samples`` and
  ``output_lens``) into ``samples`` traced ``generate_async`` calls, sent concurrently in one
  task, one session each (``max_new_tokens = output_len``, or sample ``i``'s
  ``output_lens[i]``), and returns the responses' timings as the trajectory.
* :class:`Measured` wraps the workflow of a run (``GenerateRequest`` or a full workflow such
  as ``SingleTurnWorkflow`` with generate + reward) and hands it an engine that records every
  ``generate_async`` call of the task: when the first one was sent, its first token, the last
  token of the last one, the stream gaps and the token counts. The runner reads the record
  by the row index the task was given. Records stay in this process: the runner needs
  in-process workers (the default ``LocalScheduler``).

For a task with several generate calls (a request's ``samples > 1``, a workflow's
``n_samples > 1``, multi-turn): ``sent`` is the first call's start, TTFT the earliest first
token of any call, E2EL the last call's end (both from ``sent``), ITL every gap of every call,
and the token counts are sums.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._config import GenerationConfig
from .._errors import ConfigError
from .._io import ModelRequest, ModelResponse, new_rid
from .._workflows.single_turn import gather_all
from ..engines import RecordingEngine
from ..tracing import atrace_phase, trace_session

if TYPE_CHECKING:
    from ..engines import InferenceEngine


class RequestLike(Protocol):
    """What :class:`GenerateRequest` reads from a request (``LoadRequest`` has it)."""

    @property
    def prompt(self) -> str | None: ...

    @property
    def prompt_ids(self) -> tuple[int, ...] | None: ...

    @property
    def output_len(self) -> int | None: ...

    @property
    def ignore_eos(self) -> bool: ...

    @property
    def samples(self) -> int: ...

    @property
    def output_lens(self) -> tuple[int, ...] | None: ...


class GenerateRequest:
    """``samples`` concurrent ``generate_async`` calls per task from a load request (one
    by default); the trajectory is their timings.

    Args:
        gconfig: the sampling settings (default ``GenerationConfig(logprobs=False)``: the
            request ``vllm bench serve`` sends, no logprobs computed); a request's
            ``output_len`` (per sample: ``output_lens[i]``) replaces ``max_new_tokens`` and
            its ``ignore_eos`` is or-ed in.

    The trajectory of one sample: ``{"prompt_tokens", "output_tokens", "ttft", "itl",
    "latency", "server", "stop_reason"}`` (seconds; ``ttft`` NaN and ``itl`` empty without
    streaming); with ``samples > 1`` a list of these, one per sample in order. Each sample
    is its own traced session with a ``generate`` phase; if one call raises, the others are
    cancelled and the task fails.
    """

    def __init__(self, gconfig: GenerationConfig | None = None) -> None:
        if gconfig is not None and not isinstance(gconfig, GenerationConfig):
            raise ConfigError(f"gconfig must be a GenerationConfig, got "
                              f"{type(gconfig).__name__}")
        base = gconfig or GenerationConfig(logprobs=False)
        if base.n_samples != 1:
            base = base.new(n_samples=1)
        self.gconfig = base
        self._configs: dict[tuple[int | None, bool], GenerationConfig] = {}

    def config_for(self, output_len: int | None, ignore_eos: bool) -> GenerationConfig:
        """The sampling settings of a request (cached per ``(output_len, ignore_eos)``)."""
        key = (output_len, bool(ignore_eos))
        g = self._configs.get(key)
        if g is None:
            changes: dict[str, Any] = {}
            if output_len is not None:
                changes["max_new_tokens"] = int(output_len)
            if ignore_eos and not self.gconfig.ignore_eos:
                changes["ignore_eos"] = True
            g = self.gconfig.new(**changes) if changes else self.gconfig
            self._configs[key] = g
        return g

    def validate(self, data: Any) -> None:
        """Refuse a request without a prompt, or with bad lengths or samples
        (``ConfigError``)."""
        prompt = getattr(data, "prompt", None)
        ids = getattr(data, "prompt_ids", None)
        if not prompt and not ids:
            raise ConfigError(f"a load request needs a non-empty prompt or prompt_ids, got "
                              f"{type(data).__name__}")
        out = getattr(data, "output_len", None)
        if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 1):
            raise ConfigError(f"a load request's output_len must be an int >= 1, got {out!r}")
        try:
            n, lens = data.samples, data.output_lens
        except AttributeError:
            raise ConfigError(f"a load request needs samples and output_lens (a LoadRequest "
                              f"has them), got {type(data).__name__}") from None
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"a load request's samples must be an int >= 1, got {n!r}")
        if lens is not None and (not isinstance(lens, tuple) or len(lens) != n):
            raise ConfigError(f"a load request's output_lens must be a tuple of {n} "
                              f"length(s), got {lens!r}")

    def request_for(self, data: RequestLike) -> ModelRequest:
        """The ``ModelRequest`` of one load request."""
        g = self.config_for(data.output_len, data.ignore_eos)
        ids = data.prompt_ids
        if ids:
            return ModelRequest(input_ids=list(ids), gconfig=g)
        return ModelRequest(text=data.prompt, gconfig=g)

    def requests_for(self, data: RequestLike) -> list[ModelRequest]:
        """The ``ModelRequest`` of each of a load request's samples (a shared ``rid``
        prefix, so sticky routing sends them to one server, as ``SingleTurnWorkflow``)."""
        n = data.samples
        lens = data.output_lens
        eos = data.ignore_eos
        configs = [self.config_for(lens[i] if lens is not None else data.output_len, eos)
                   for i in range(n)]
        ids = data.prompt_ids
        rid = new_rid()
        if ids:
            return [ModelRequest(rid=f"{rid}:{i}", input_ids=list(ids), gconfig=g)
                    for i, g in enumerate(configs)]
        return [ModelRequest(rid=f"{rid}:{i}", text=data.prompt, gconfig=g)
                for i, g in enumerate(configs)]

    async def arun_episode(self, engine: InferenceEngine,
                           data: RequestLike) -> dict[str, Any] | list[dict[str, Any]]:
        """Send the request: ``samples`` concurrent traced sessions with a ``generate``
        phase each (one, the common case, without any extra task or list)."""
        if data.samples != 1:
            return await gather_all([_sample(engine, req) for req in self.requests_for(data)])
        req = self.request_for(data)  # written out: no extra coroutine or call for one
        with trace_session():
            async with atrace_phase("generate"):
                resp = await engine.generate_async(req)
        return _timings(resp)


def _timings(resp: ModelResponse) -> dict[str, Any]:
    """A sample's trajectory: its token counts and timings."""
    return {"prompt_tokens": resp.input_len, "output_tokens": resp.output_len,
            "ttft": resp.ttft, "itl": list(resp.itl), "latency": resp.latency,
            "server": resp.server, "stop_reason": resp.stop_reason}


async def _sample(engine: InferenceEngine, req: ModelRequest) -> dict[str, Any]:
    """One of several samples: a traced session with a ``generate`` phase; its timings."""
    with trace_session():
        async with atrace_phase("generate"):
            resp = await engine.generate_async(req)
    return _timings(resp)


def call_times(t0: float, resp: ModelResponse) -> tuple[float, float]:
    """The first token's instant (NaN when not measured) and the end's of a call made at
    ``t0``, counted from the engine's own ``start`` (an engine without one: from ``t0``)."""
    start = resp.start if resp.start >= t0 else t0  # NaN compares false
    end = start + resp.latency if not math.isnan(resp.latency) else time.perf_counter()
    return start + resp.ttft, end


@dataclass(slots=True)
class TaskRecord:
    """What :class:`Measured` saw of one task's generate calls (``perf_counter`` seconds)."""

    sent: float = math.nan
    first_token: float = math.nan
    end: float = math.nan
    prompt_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    done_calls: int = 0
    retries: int = 0
    itl: list[float] = field(default_factory=list)
    version: int = -1

    def begin_call(self, t0: float) -> TaskRecord:
        """A call of the task is sent at ``t0`` (the first one's instant is ``sent``); its
        answer is filed here too (:meth:`add`)."""
        if self.calls == 0:
            self.sent = t0
        self.calls += 1
        return self

    def add(self, t0: float, resp: ModelResponse) -> None:
        """File one finished call made at ``t0``.

        The engine times ``ttft`` and ``latency`` from its own ``start``, which comes after
        ``t0`` (opening the engine, building the request): the first token is filed at
        ``start + ttft`` and the end at ``start + latency``, so TTFT and E2EL count from the
        call, as ``vllm bench serve`` counts from before its request is built. An engine
        without a ``start`` is taken to have started at ``t0``.
        """
        self.done_calls += 1
        ft, end = call_times(t0, resp)
        if not math.isnan(ft) and (math.isnan(self.first_token) or ft < self.first_token):
            self.first_token = ft
        if math.isnan(self.end) or end > self.end:
            self.end = end
        self.retries += resp.retries
        self.prompt_tokens += resp.input_len
        self.output_tokens += resp.output_len
        if resp.itl:
            self.itl.extend(resp.itl)


@dataclass(frozen=True, slots=True)
class LoadItem:
    """A task's data in a load run: the row index, the item the workflow gets, and the
    ``perf_counter()`` instant the request is due (NaN: none; the runner submits a task up
    to :data:`~rollout_kit.load._runner.PRESTAGE_S` before it, and the task waits)."""

    index: int
    data: Any
    due: float = math.nan


class Measured:
    """Run ``workflow`` on :class:`LoadItem` data, recording its generate calls by index.

    Args:
        workflow: any workflow instance (an object with an async ``arun_episode``).
    """

    def __init__(self, workflow: Any) -> None:
        if isinstance(workflow, type) or not callable(getattr(workflow, "arun_episode", None)):
            raise ConfigError(f"workflow must be a workflow instance (with an async "
                              f"arun_episode), got {workflow!r}")
        self.workflow = workflow
        self.records: dict[int, TaskRecord] = {}
        validate = getattr(workflow, "validate", None)
        self._validate = validate if callable(validate) else None

    def validate(self, data: Any) -> None:
        """The wrapped workflow's ``validate`` on the item."""
        if self._validate is not None:
            self._validate(data.data if isinstance(data, LoadItem) else data)

    async def arun_episode(self, engine: InferenceEngine, data: LoadItem) -> Any:
        """Run the wrapped workflow with a recording engine once the item is due; file the
        record first."""
        rec = TaskRecord(version=engine.get_version())
        self.records[data.index] = rec
        due = data.due
        while time.perf_counter() < due:  # NaN compares false: no wait
            await asyncio.sleep(0)
        return await self.workflow.arun_episode(RecordingEngine(engine, rec), data.data)
