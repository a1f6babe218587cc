"""Value types that flow through rollouts: requests, responses, results.

Names follow AReaL (``ModelRequest``, ``ModelResponse``) so workflows port easily.
"""

from __future__ import annotations

import itertools
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from .config import GenerationConfig
from .errors import ConfigError

__all__ = ["ModelRequest", "ModelResponse", "RolloutResult", "Status", "StopReason", "new_rid"]

_RID_PREFIX = uuid.uuid4().hex[:12]
_rid_counter = itertools.count()


def new_rid() -> str:
    """A unique request id: a per-process random prefix and a counter.

    Cheaper than ``uuid4()`` (no ``os.urandom`` per request) and still unique across
    processes; it never contains ``:`` (sticky routing keys on the part before the last one).
    """
    return f"{_RID_PREFIX}{next(_rid_counter):x}"

StopReason = Literal["stop", "length", "abort", "tool_calls"]
Status = Literal["pending", "accepted", "rejected", "failed", "cancelled"]


@dataclass(slots=True, kw_only=True)
class ModelRequest:
    """One generation request: a prompt as ``input_ids`` or ``text``, plus sampling config.

    Requests with the same ``rid`` go to the same server under sticky routing (prefix cache).
    """

    rid: str = field(default_factory=new_rid)
    input_ids: list[int] = field(default_factory=list)
    text: str | None = None
    gconfig: GenerationConfig = field(default_factory=GenerationConfig)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.input_ids and not self.text:
            raise ConfigError("ModelRequest needs a non-empty input_ids or text prompt")
        ids = self.input_ids
        if ids and (set(map(type, ids)) != {int} or min(ids) < 0):  # C-speed checks
            raise ConfigError("ModelRequest.input_ids must be non-negative ints")
        if not isinstance(self.gconfig, GenerationConfig):
            raise ConfigError(
                f"gconfig must be a GenerationConfig, got {type(self.gconfig).__name__}"
            )

    def copy(self) -> ModelRequest:
        return ModelRequest(rid=self.rid, input_ids=list(self.input_ids), text=self.text,
                            gconfig=self.gconfig, metadata=dict(self.metadata))


@dataclass(slots=True, kw_only=True)
class ModelResponse:
    """What one ``agenerate`` call produced, with its client-side timings.

    ``ttft`` and ``itl`` are measured from the stream when streaming is on; otherwise
    ``ttft`` is ``nan`` (never a copy of ``latency``) and ``itl`` is empty. ``latency`` and
    ``ttft`` count from ``start``, the ``time.perf_counter()`` instant the engine began
    timing the call (``nan`` for an engine that does not say): a caller that timed its own
    call from earlier finds the first token at ``start + ttft``.
    """

    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_versions: list[int] = field(default_factory=list)
    stop_reason: StopReason = "stop"
    text: str | None = None
    latency: float = math.nan
    ttft: float = math.nan
    itl: list[float] = field(default_factory=list)
    server: str | None = None
    n_continuations: int = 0
    retries: int = 0
    cached_tokens: int = 0
    server_timing: dict[str, float] = field(default_factory=dict)
    start: float = math.nan

    @property
    def input_len(self) -> int:
        return len(self.input_tokens)

    @property
    def output_len(self) -> int:
        return len(self.output_tokens)


@dataclass(slots=True, kw_only=True)
class RolloutResult:
    """The outcome of one task: its id, terminal status, why, and the trajectory.

    ``error`` holds the exception of a failed task; ``traceback`` its formatted traceback.
    ``reason`` (also the ``reason`` column of the tasks frame) is, by status:

    - rejected: ``returned_none`` (the workflow returned ``None``) or ``should_accept_fn``.
    - cancelled: ``cancelled`` (``cancel()``) or ``closed`` (queued when the executor closed).
    - failed, on the server's side (``error`` is the engine error; its ``brief`` names the
      address): ``no_healthy_server``, ``connection_error``, ``timeout``, ``server_error``,
      ``server_overloaded``, ``bad_request``, ``http_error``, ``bad_response``,
      ``engine_error`` (see :mod:`rollout_kit.errors`).
    - failed, in the workflow: ``workflow_exception`` (any other exception).
    - failed, with Ray workers: ``worker_error`` (the worker died or could not run it) and
      ``task_id_mismatch``.
    """

    task_id: int
    status: Status
    reason: str | None = None
    error: BaseException | None = None
    traceback: str | None = None
    trajectory: Any = None
    worker: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "accepted"
