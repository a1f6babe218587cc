"""rollout_kit: drive LLM rollouts from a notebook, with one task-id source and perf traces.

The curated public API is listed in ``__all__`` (kept sorted; a test enforces it).
``rollout_kit.sim``, ``rollout_kit.plotting``, ``rollout_kit.analysis`` and
``rollout_kit.notebook`` are imported by path.

The names are imported on first use (PEP 562): ``import rollout_kit.errors`` or
``rollout-kit --help`` do not pay for pandas and aiohttp.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._version import __version__

if _TYPE_CHECKING:
    from .agents import AgentClient, AgentEndpoint, AgentWorkflow
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
        DatasetError,
        DuplicateTaskIdError,
        EngineBadRequestError,
        EngineConnectionError,
        EngineError,
        EngineOverloadedError,
        EngineResponseError,
        EngineServerError,
        EngineStatusError,
        EngineTimeoutError,
        EngineUnreachableError,
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
    from .workers import LocalScheduler
    from .workflows import MultiTurnWorkflow, RolloutWorkflow, SingleTurnWorkflow

# public name -> the submodule that defines it
_EXPORTS: dict[str, str] = {
    "annotate": ".tracing",
    "atrace_phase": ".tracing",
    "ConfigError": ".errors",
    "ControllerStateError": ".errors",
    "DatasetError": ".errors",
    "DuplicateTaskIdError": ".errors",
    "EngineBadRequestError": ".errors",
    "EngineConfig": ".config",
    "EngineConnectionError": ".errors",
    "EngineError": ".errors",
    "EngineOverloadedError": ".errors",
    "EngineResponseError": ".errors",
    "EngineServerError": ".errors",
    "EngineStatusError": ".errors",
    "AgentClient": ".agents",
    "AgentEndpoint": ".agents",
    "AgentWorkflow": ".agents",
    "EngineTimeoutError": ".errors",
    "EngineUnreachableError": ".errors",
    "ExecutorConfig": ".config",
    "GenerationConfig": ".config",
    "increment": ".tracing",
    "InferenceEngine": ".engines",
    "InvalidTaskIdError": ".errors",
    "load_traces": ".tracing",
    "LocalScheduler": ".workers",
    "ModelRequest": ".io",
    "ModelResponse": ".io",
    "MultiTurnWorkflow": ".workflows",
    "NoHealthyServerError": ".errors",
    "register_phase": ".tracing",
    "RemoteInfEngine": ".engines",
    "RemoteSGLangEngine": ".engines",
    "RemotevLLMEngine": ".engines",
    "RetryPolicy": ".config",
    "RolloutController": ".controller",
    "RolloutKitError": ".errors",
    "RolloutResult": ".io",
    "RolloutTimeoutError": ".errors",
    "RolloutWorkflow": ".workflows",
    "SchedulerError": ".errors",
    "SingleTurnWorkflow": ".workflows",
    "SyncInLoopError": ".errors",
    "TaskIdError": ".errors",
    "TaskIdGenerator": ".ids",
    "TaskIdMismatchError": ".errors",
    "Timeouts": ".config",
    "trace_phase": ".tracing",
    "trace_session": ".tracing",
    "TraceError": ".errors",
    "Tracer": ".tracing",
    "Traces": ".tracing",
    "TraceSchemaError": ".errors",
    "TraceStateError": ".errors",
    "UnknownTaskIdError": ".errors",
    "WorkflowError": ".errors",
    "WorkflowExecutor": ".executor",
}


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "__version__",
    "AgentClient",
    "AgentEndpoint",
    "AgentWorkflow",
    "annotate",
    "atrace_phase",
    "ConfigError",
    "ControllerStateError",
    "DatasetError",
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
    "EngineUnreachableError",
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
