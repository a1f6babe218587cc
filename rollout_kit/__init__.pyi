# The public names of rollout_kit, written once: type checkers read them here (``name as
# name`` is a stub's re-export), and ``__init__.py`` loads each on first use from this list
# (lazy_loader). ``from . import sub as sub``: a public subpackage, an attribute of the root
# loaded on first use (``rk.analysis``). ``__all__`` is every other name, sorted ignoring
# case. A public name costs one line here.
from . import (
    agents as agents,
    analysis as analysis,
    areal as areal,
    engines as engines,
    examples as examples,
    load as load,
    notebook as notebook,
    otel as otel,
    plotting as plotting,
    replay as replay,
    report as report,
    rl as rl,
    sim as sim,
    testing as testing,
    tracing as tracing,
    workers as workers,
)
from ._config import (
    EngineConfig as EngineConfig,
    ExecutorConfig as ExecutorConfig,
    GenerationConfig as GenerationConfig,
    RetryPolicy as RetryPolicy,
    Timeouts as Timeouts,
)
from ._controller import RolloutController as RolloutController
from ._errors import (
    AgentClosedError as AgentClosedError,
    AgentError as AgentError,
    ConfigError as ConfigError,
    ControllerStateError as ControllerStateError,
    DatasetError as DatasetError,
    DuplicateTaskIdError as DuplicateTaskIdError,
    EngineBadRequestError as EngineBadRequestError,
    EngineConnectionError as EngineConnectionError,
    EngineError as EngineError,
    EngineOverloadedError as EngineOverloadedError,
    EngineResponseError as EngineResponseError,
    EngineServerError as EngineServerError,
    EngineStatusError as EngineStatusError,
    EngineTimeoutError as EngineTimeoutError,
    EngineUnreachableError as EngineUnreachableError,
    InvalidTaskIdError as InvalidTaskIdError,
    NoHealthyServerError as NoHealthyServerError,
    RolloutKitError as RolloutKitError,
    RolloutTimeoutError as RolloutTimeoutError,
    SchedulerError as SchedulerError,
    SyncInLoopError as SyncInLoopError,
    TaskIdError as TaskIdError,
    TaskIdMismatchError as TaskIdMismatchError,
    ToolError as ToolError,
    TraceError as TraceError,
    TraceSchemaError as TraceSchemaError,
    TraceStateError as TraceStateError,
    TurnTimeoutError as TurnTimeoutError,
    UnknownTaskIdError as UnknownTaskIdError,
    WorkflowError as WorkflowError,
)
from ._executor import WorkflowExecutor as WorkflowExecutor
from ._ids import TaskIdGenerator as TaskIdGenerator
from ._io import (
    ModelRequest as ModelRequest,
    ModelResponse as ModelResponse,
    RolloutResult as RolloutResult,
)
from ._version import __version__ as __version__
from ._workflows import (
    MultiTurnWorkflow as MultiTurnWorkflow,
    RolloutWorkflow as RolloutWorkflow,
    SingleTurnWorkflow as SingleTurnWorkflow,
)
from .agents import (
    AgentClient as AgentClient,
    AgentEndpoint as AgentEndpoint,
    AgentWorkflow as AgentWorkflow,
)
from .engines import (
    InferenceEngine as InferenceEngine,
    RemoteInfEngine as RemoteInfEngine,
    RemoteSGLangEngine as RemoteSGLangEngine,
    RemotevLLMEngine as RemotevLLMEngine,
)
from .tracing import (
    Tracer as Tracer,
    Traces as Traces,
    annotate as annotate,
    atrace_phase as atrace_phase,
    increment as increment,
    load_traces as load_traces,
    register_phase as register_phase,
    trace_phase as trace_phase,
    trace_session as trace_session,
)
from .workers import LocalScheduler as LocalScheduler
