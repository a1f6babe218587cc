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
from .controller import RolloutController
from .engines import (
    InferenceEngine,
    RemoteInfEngine,
    RemoteSGLangEngine,
    RemotevLLMEngine,
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
from .executor import WorkflowExecutor
from .ids import TaskIdGenerator
from .io import ModelRequest, ModelResponse, RolloutResult
from .workers import LocalScheduler
from .tracing import (
    Tracer,
    Traces,
    annotate,
    atrace_phase,
    increment,
    load_traces,
    register_phase,
    trace_phase,
    trace_session,
)
from .workflows import MultiTurnWorkflow, RolloutWorkflow, SingleTurnWorkflow

__all__ = [
    "__version__",
    "annotate",
    "atrace_phase",
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
    "increment",
    "InferenceEngine",
    "InvalidTaskIdError",
    "load_traces",
    "LocalScheduler",
    "ModelRequest",
    "ModelResponse",
    "MultiTurnWorkflow",
    "NoHealthyServerError",
    "register_phase",
    "RemoteInfEngine",
    "RemoteSGLangEngine",
    "RemotevLLMEngine",
    "RetryPolicy",
    "RolloutController",
    "RolloutKitError",
    "RolloutResult",
    "RolloutTimeoutError",
    "RolloutWorkflow",
    "SchedulerError",
    "SingleTurnWorkflow",
    "SyncInLoopError",
    "TaskIdError",
    "TaskIdGenerator",
    "TaskIdMismatchError",
    "Timeouts",
    "trace_phase",
    "trace_session",
    "TraceError",
    "Tracer",
    "Traces",
    "TraceSchemaError",
    "TraceStateError",
    "UnknownTaskIdError",
    "WorkflowError",
    "WorkflowExecutor",
]
