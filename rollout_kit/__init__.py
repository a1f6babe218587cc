"""rollout_kit: drive LLM rollouts from a notebook, with one task-id source and perf traces.

The curated public API is listed in ``__all__`` (kept sorted; a test enforces it).
``rollout_kit.sim``, ``rollout_kit.plotting``, ``rollout_kit.analysis`` and
``rollout_kit.notebook`` are imported by path.
"""

from __future__ import annotations

from ._version import __version__
from .config import (
    EngineConfig,
    ExecutorConfig,
    GenerationConfig,
    RetryPolicy,
    Timeouts,
)
from .errors import (
    ConfigError,
    ControllerStateError,
    DuplicateTaskIdError,
    EngineBadRequestError,
    EngineConnectionError,
    EngineError,
    EngineOverloadedError,
    EngineResponseError,
    EngineServerError,
    EngineStatusError,
    EngineTimeoutError,
    InvalidTaskIdError,
    NoHealthyServerError,
    RolloutKitError,
    RolloutTimeoutError,
    SchedulerError,
    SyncInLoopError,
    TaskIdError,
    TaskIdMismatchError,
    TraceError,
    TraceSchemaError,
    TraceStateError,
    UnknownTaskIdError,
    WorkflowError,
)
from .ids import TaskIdGenerator
from .io import ModelRequest, ModelResponse, RolloutResult

__all__ = [
    "__version__",
    "ConfigError",
    "ControllerStateError",
    "DuplicateTaskIdError",
    "EngineBadRequestError",
    "EngineConfig",
    "EngineConnectionError",
    "EngineError",
    "EngineOverloadedError",
    "EngineResponseError",
    "EngineServerError",
    "EngineStatusError",
    "EngineTimeoutError",
    "ExecutorConfig",
    "GenerationConfig",
    "InvalidTaskIdError",
    "ModelRequest",
    "ModelResponse",
    "NoHealthyServerError",
    "RetryPolicy",
    "RolloutKitError",
    "RolloutResult",
    "RolloutTimeoutError",
    "SchedulerError",
    "SyncInLoopError",
    "TaskIdError",
    "TaskIdGenerator",
    "TaskIdMismatchError",
    "Timeouts",
    "TraceError",
    "TraceSchemaError",
    "TraceStateError",
    "UnknownTaskIdError",
    "WorkflowError",
]
