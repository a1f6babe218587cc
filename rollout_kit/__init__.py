"""rollout_kit: drive LLM rollouts from a notebook, with one task-id source and perf traces.

The curated public API is listed in ``__all__`` (kept sorted; a test enforces it).
``rollout_kit.sim``, ``rollout_kit.plotting``, ``rollout_kit.analysis``,
``rollout_kit.notebook`` and the other public subpackages are imported by path, or as
attributes (``rk.analysis.summary(...)``).

The names and subpackages are imported on first use (PEP 562): ``import rollout_kit.tracing``
or ``rollout-kit --help`` do not pay for pandas and aiohttp.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._version import __version__

if _TYPE_CHECKING:
    from ._config import (
        EngineConfig,
        ExecutorConfig,
        GenerationConfig,
        RetryPolicy,
        Timeouts,
    )
    from ._controller import RolloutController
    from ._errors import (
        AgentClosedError,
        AgentError,
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
        ToolError,
        TraceError,
        TraceSchemaError,
        TraceStateError,
        TurnTimeoutError,
        UnknownTaskIdError,
        WorkflowError,
    )
    from ._executor import WorkflowExecutor
    from ._ids import TaskIdGenerator
    from ._io import ModelRequest, ModelResponse, RolloutResult
    from ._workflows import MultiTurnWorkflow, RolloutWorkflow, SingleTurnWorkflow
    from .agents import AgentClient, AgentEndpoint, AgentWorkflow
    from .engines import (
        InferenceEngine,
        RemoteInfEngine,
        RemoteSGLangEngine,
        RemotevLLMEngine,
    )
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

# public name -> the submodule that defines it
_EXPORTS: dict[str, str] = {
    "AgentClient": ".agents",
    "AgentClosedError": "._errors",
    "AgentEndpoint": ".agents",
    "AgentError": "._errors",
    "AgentWorkflow": ".agents",
    "annotate": ".tracing",
    "atrace_phase": ".tracing",
    "ConfigError": "._errors",
    "ControllerStateError": "._errors",
    "DatasetError": "._errors",
    "DuplicateTaskIdError": "._errors",
    "EngineBadRequestError": "._errors",
    "EngineConfig": "._config",
    "EngineConnectionError": "._errors",
    "EngineError": "._errors",
    "EngineOverloadedError": "._errors",
    "EngineResponseError": "._errors",
    "EngineServerError": "._errors",
    "EngineStatusError": "._errors",
    "EngineTimeoutError": "._errors",
    "EngineUnreachableError": "._errors",
    "ExecutorConfig": "._config",
    "GenerationConfig": "._config",
    "increment": ".tracing",
    "InferenceEngine": ".engines",
    "InvalidTaskIdError": "._errors",
    "load_traces": ".tracing",
    "LocalScheduler": ".workers",
    "ModelRequest": "._io",
    "ModelResponse": "._io",
    "MultiTurnWorkflow": "._workflows",
    "NoHealthyServerError": "._errors",
    "register_phase": ".tracing",
    "RemoteInfEngine": ".engines",
    "RemoteSGLangEngine": ".engines",
    "RemotevLLMEngine": ".engines",
    "RetryPolicy": "._config",
    "RolloutController": "._controller",
    "RolloutKitError": "._errors",
    "RolloutResult": "._io",
    "RolloutTimeoutError": "._errors",
    "RolloutWorkflow": "._workflows",
    "SchedulerError": "._errors",
    "SingleTurnWorkflow": "._workflows",
    "SyncInLoopError": "._errors",
    "TaskIdError": "._errors",
    "TaskIdGenerator": "._ids",
    "TaskIdMismatchError": "._errors",
    "Timeouts": "._config",
    "ToolError": "._errors",
    "trace_phase": ".tracing",
    "trace_session": ".tracing",
    "TraceError": "._errors",
    "Tracer": ".tracing",
    "Traces": ".tracing",
    "TraceSchemaError": "._errors",
    "TraceStateError": "._errors",
    "TurnTimeoutError": "._errors",
    "UnknownTaskIdError": "._errors",
    "WorkflowError": "._errors",
    "WorkflowExecutor": "._executor",
}


#: the public subpackages and modules: ``rk.analysis.summary(...)`` after ``import
#: rollout_kit as rk`` imports ``rollout_kit.analysis`` then, as ``import
#: rollout_kit.analysis`` would
_SUBMODULES = frozenset({"agents", "analysis", "areal", "engines", "examples", "load",
                         "notebook", "otel", "plotting", "replay", "report", "rl", "sim",
                         "testing", "tracing", "workers"})


def __getattr__(name: str) -> _Any:
    if name in _SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)  # binds it in globals()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)


__all__ = [
    "__version__",
    "AgentClient",
    "AgentClosedError",
    "AgentEndpoint",
    "AgentError",
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
    "ToolError",
    "trace_phase",
    "trace_session",
    "TraceError",
    "Tracer",
    "Traces",
    "TraceSchemaError",
    "TraceStateError",
    "TurnTimeoutError",
    "UnknownTaskIdError",
    "WorkflowError",
    "WorkflowExecutor",
]
