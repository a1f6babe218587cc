"""``SimConfig``: everything that shapes one simulated server (model, capacity, latency, output).

Frozen and keyword-only; derive variants with ``dataclasses.replace``. Latency fields are in
seconds at ``time_scale == 1``; every simulated duration is multiplied by ``time_scale``.

Versions imitated (documented choices):

* SGLang flavour: **0.5.23** defaults — cumulative ``text``, ``output_ids`` and logprobs in
  stream chunks (``sglang_incremental_streaming=True`` gives 0.5.23's incremental mode:
  deltas), ``"Abort in waiting queue"`` for aborts before prefill, unknown
  ``sampling_params`` keys rejected with 400 ``{"error": "<string>"}``, metric names
  ``sglang:num_aborted_requests_total`` and ``sglang:queue_time_seconds``.
* vLLM flavour: the **0.32** server the project tests against (``/version`` says
  ``vllm_version``); bodies are serialised like 0.10.2/0.32 with every null field present,
  nested error bodies (``flat_errors=True`` gives the ≤0.10.0 flat shape), over-long
  ``max_tokens`` clamped to the remaining context like 0.33 (``max_tokens_policy="reject"``
  gives 0.10.2's 400), and requests sent while paused held until ``/resume``
  (``paused_new_requests="reject"`` gives 0.33's 503).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from .._errors import ConfigError
from ._faults import FaultPlan

ApiName = Literal["sglang", "vllm"]


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Configuration of one simulated inference server.

    Attributes:
        model_name: served model name (``/v1/models``, ``model`` in responses).
        context_length: max prompt + completion tokens.
        max_num_seqs: running slots; more sequences wait in a FIFO queue.
        max_waiting: waiting-queue capacity; a full queue answers 429 (vLLM) / 503 (SGLang).
        time_scale: multiplies every simulated duration (0.01 makes tests fast).
        zero_latency: skip every sleep (still yields to the loop) for client benchmarks.
        prefill_overhead_s: fixed part of the time to first token.
        prefill_per_token_s: per uncached prompt token part of the time to first token.
        itl_s: inter-token latency of a lone request.
        load_factor: ITL multiplier when all ``max_num_seqs`` slots run
            (``LF = 1 + (f-1)(running-1)/(max_num_seqs-1)``).
        jitter_cv: coefficient of variation of the mean-preserving lognormal jitter.
        seed: seeds output text, lengths, logprobs, jitter and faults.
        answer_fn: ``answer_fn(prompt_text) -> str``: the completion is that text then EOS
            (replaces the built-in answer model).
        accuracy: the built-in answer model's probability of answering an arithmetic prompt
            (``"What is 17+25?"``, also ``-`` and ``*``) right: ``"The answer is 42."``,
            else a plausible wrong number. Samples differ at temperature > 0 and repeat with
            the same ``seed`` sampling parameter; temperature 0 is one fixed draw per prompt
            (right for about ``accuracy`` of the prompts). Other prompts get seeded filler.
        mean_output_tokens: mean length (EOS included) of random completions.
        output_length: the length model. ``"uniform"``: random completions are uniform in
            ``[1, 2·mean_output_tokens − 1]`` and answers are as long as they are.
            ``"lognormal"``: every completion (per request, seeded like its text) is
            lognormal with mean ``mean_output_tokens`` and log-sd ``output_length_sigma``,
            an answer coming after digit-free filler (a long "reasoning" before it) — the
            long tail of RL generation lengths that a synchronous RL step waits for.
        output_length_sigma: the lognormal's log-sd (the tail: 0 is a fixed length, 1 puts
            the 99th percentile near 5× the median).
        otlp_traces_endpoint: an OTLP/HTTP ``/v1/traces`` URL on loopback: each finished
            request is exported there as an ``llm_request`` span with vLLM's attribute
            names, a child of its ``traceparent`` (needs the
            ``otel`` extra).
        honor_seed: ``False`` makes the server ignore the ``seed`` sampling parameter (a
            seeded sample then varies like an unseeded one): a server that cannot reproduce.
        default_max_tokens: vLLM's ``max_tokens`` default (16).
        default_max_new_tokens: SGLang's ``max_new_tokens`` default (128).
        max_logprobs: vLLM's ``--max-logprobs``.
        block_size: prefix-cache block size in tokens.
        prefix_cache_blocks: prefix-cache capacity in blocks (LRU); 0 disables the cache.
        flat_errors: vLLM ≤0.10.0 flat error bodies.
        max_tokens_policy: vLLM over-long ``max_tokens``: ``"clamp"`` (0.33) or ``"reject"``.
        paused_new_requests: vLLM requests arriving during ``/pause?mode=abort|wait``:
            ``"hold"`` until ``/resume`` (0.32) or ``"reject"`` with 503 (0.33).
        prompt_tokens_details: vLLM ``--enable-prompt-tokens-details`` (SGLang
            ``--enable-cache-report``): ``usage.prompt_tokens_details.cached_tokens`` on the
            OpenAI-compatible endpoints.
        chat_template: the chat template's variant:
            ``"plain"`` renders history as given; ``"drop_think"`` keeps only the text after
            the last ``</think>`` of earlier assistant messages (Qwen3-style), so re-rendered
            conversations drift from the generated ids, and the tool mode's outputs start with
            a ``<think>`` part.
        sglang_incremental_streaming: SGLang ``--incremental-streaming-output`` (deltas).
        stream_chunk_tokens: tokens per stream chunk.
        vllm_version / sglang_version: versions reported by ``/version`` / ``/server_info``.
        weight_update_s: simulated duration of ``/update_weights_from_disk`` (SGLang flavour;
            like every duration, times ``time_scale``; none with ``zero_latency``).
        faults: the fault plan the server starts with (copied; change it at run time).
        tokenizer: ``None`` for the byte tokenizer (UTF-8 bytes + 3), or the path of a Hugging
            Face ``tokenizer.json`` (or a folder holding one, e.g. a model folder) to count
            and generate tokens as a client with that tokenizer does (needs the
            ``tokenizers`` package: ``pip install 'rollout-kit[tokenizer]'``).
    """

    model_name: str = "sim-model"
    context_length: int = 4096
    max_num_seqs: int = 256
    max_waiting: int = 4096
    time_scale: float = 1.0
    zero_latency: bool = False
    prefill_overhead_s: float = 0.030
    prefill_per_token_s: float = 0.0002
    itl_s: float = 0.012
    load_factor: float = 2.0
    jitter_cv: float = 0.1
    seed: int = 0
    answer_fn: Callable[[str], str] | None = None
    accuracy: float = 0.7
    mean_output_tokens: int = 64
    output_length: Literal["uniform", "lognormal"] = "uniform"
    output_length_sigma: float = 1.0
    honor_seed: bool = True
    otlp_traces_endpoint: str | None = None
    default_max_tokens: int = 16
    default_max_new_tokens: int = 128
    max_logprobs: int = 20
    block_size: int = 16
    prefix_cache_blocks: int = 65536
    flat_errors: bool = False
    max_tokens_policy: Literal["clamp", "reject"] = "clamp"
    paused_new_requests: Literal["hold", "reject"] = "hold"
    prompt_tokens_details: bool = False
    chat_template: Literal["plain", "drop_think"] = "plain"
    sglang_incremental_streaming: bool = False
    stream_chunk_tokens: int = 1
    vllm_version: str = "0.32.0"
    sglang_version: str = "0.5.23"
    weight_update_s: float = 0.0
    faults: FaultPlan | None = field(default=None, compare=False)
    tokenizer: str | Path | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.model_name, str) and bool(self.model_name),
               "model_name must be a non-empty string")
        for name in ("context_length", "max_num_seqs", "mean_output_tokens",
                     "default_max_tokens", "default_max_new_tokens", "block_size",
                     "stream_chunk_tokens"):
            v = getattr(self, name)
            _check(_count(v) and v >= 1, f"SimConfig.{name} must be an int >= 1, got {v!r}")
        for name in ("max_waiting", "max_logprobs", "prefix_cache_blocks", "seed"):
            v = getattr(self, name)
            _check(_count(v) and v >= 0, f"SimConfig.{name} must be an int >= 0, got {v!r}")
        for name in ("time_scale", "prefill_overhead_s", "prefill_per_token_s", "itl_s",
                     "jitter_cv", "weight_update_s", "output_length_sigma"):
            v = getattr(self, name)
            _check(_num(v) and v >= 0, f"SimConfig.{name} must be a number >= 0, got {v!r}")
        _check(_num(self.load_factor) and self.load_factor >= 1,
               f"SimConfig.load_factor must be >= 1, got {self.load_factor!r}")
        _check(self.answer_fn is None or callable(self.answer_fn),
               "SimConfig.answer_fn must be callable or None")
        _check(_num(self.accuracy) and 0 <= self.accuracy <= 1,
               f"SimConfig.accuracy must be a number in [0, 1], got {self.accuracy!r}")
        _check(self.max_tokens_policy in ("clamp", "reject"),
               f"max_tokens_policy must be 'clamp' or 'reject', got {self.max_tokens_policy!r}")
        _check(self.paused_new_requests in ("hold", "reject"),
               "paused_new_requests must be 'hold' or 'reject', "
               f"got {self.paused_new_requests!r}")
        _check(self.output_length in ("uniform", "lognormal"),
               f"output_length must be 'uniform' or 'lognormal', got {self.output_length!r}")
        _check(self.chat_template in ("plain", "drop_think"),
               f"chat_template must be 'plain' or 'drop_think', got {self.chat_template!r}")
        _check(self.faults is None or isinstance(self.faults, FaultPlan),
               "SimConfig.faults must be a FaultPlan or None")
        ep = self.otlp_traces_endpoint
        if ep is not None:
            url = urlsplit(ep) if isinstance(ep, str) else None
            _check(url is not None and url.scheme in ("http", "https")
                   and url.hostname in ("127.0.0.1", "localhost", "::1"),
                   f"SimConfig.otlp_traces_endpoint must be an http URL on loopback, got {ep!r}")
        tok = self.tokenizer
        _check(tok is None or (isinstance(tok, str | Path) and str(tok) != ""),
               f"SimConfig.tokenizer must be a path or None, got {tok!r}")
        if tok is not None:
            file = Path(tok).expanduser()
            _check((file / "tokenizer.json").is_file() if file.is_dir() else file.is_file(),
                   f"SimConfig.tokenizer: no tokenizer file at {tok} (want tokenizer.json or "
                   "a folder with it)")

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with ``changes`` applied (validated again).

        Raises:
            ConfigError: an unknown field or an invalid value.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ConfigError(f"unknown SimConfig field(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)
