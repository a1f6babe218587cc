"""The one exception tree of rollout_kit.

Every error rollout_kit raises on purpose is a ``RolloutKitError``. Where a stdlib
``except`` clause should still work, the class also derives from the matching builtin
(``ValueError``, ``KeyError``, ``TimeoutError``)::

    RolloutKitError
    ├── TaskIdError
    │   ├── InvalidTaskIdError(ValueError)      id is not a non-negative int (bool/float/str/…)
    │   ├── DuplicateTaskIdError(ValueError)    explicit id already used by the same owner
    │   ├── UnknownTaskIdError(KeyError)        id was never submitted / registered
    │   └── TaskIdMismatchError                 a worker echoed a different id than it was given
    ├── ConfigError(ValueError)                 invalid config, sampling values, workflow spec, path
    ├── TraceError
    │   ├── TraceStateError                     phase ended but never started, finalized twice, …
    │   └── TraceSchemaError(ValueError)        a trace file / DataFrame lacks required columns
    ├── EngineError                             talking to an inference server failed
    │   ├── EngineConnectionError               no response (refused, reset, DNS)
    │   │   └── EngineTimeoutError(TimeoutError)
    │   ├── EngineStatusError                   the server answered with an error status
    │   │   ├── EngineBadRequestError           4xx other than 408/429: never retried
    │   │   ├── EngineOverloadedError           429 / 503 (retried, honours Retry-After)
    │   │   └── EngineServerError               5xx and 408 (retried)
    │   ├── EngineResponseError                 2xx but the body is not what the API promises
    │   └── NoHealthyServerError                every address is down / out of rotation
    ├── WorkflowError                           a workflow raised; carries task_id and the cause
    ├── RolloutTimeoutError(TimeoutError)       wait()/wait_for() ran out of time
    ├── ControllerStateError                    used after aclose(), wrong loop, paused forever …
    ├── SyncInLoopError(RuntimeError)           a blocking call cannot run in this event loop
    └── SchedulerError                          remote workers (Ray) unavailable or died

Errors that concern a server carry ``server`` and ``endpoint``; status errors also carry
``status`` and a *truncated* ``body``. No message ever contains a whole prompt or an API key.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ControllerStateError",
    "DuplicateTaskIdError",
    "EngineBadRequestError",
    "EngineConnectionError",
    "EngineError",
    "EngineOverloadedError",
    "EngineResponseError",
    "EngineServerError",
    "EngineStatusError",
    "EngineTimeoutError",
    "InvalidTaskIdError",
    "NoHealthyServerError",
    "RolloutKitError",
    "RolloutTimeoutError",
    "SchedulerError",
    "SyncInLoopError",
    "TaskIdError",
    "TaskIdMismatchError",
    "TraceError",
    "TraceSchemaError",
    "TraceStateError",
    "UnknownTaskIdError",
    "WorkflowError",
    "truncate",
]

MAX_BODY_CHARS = 300


def truncate(text: object, limit: int = MAX_BODY_CHARS) -> str:
    """Return ``str(text)`` cut to ``limit`` characters, saying how much was dropped."""
    s = text if isinstance(text, str) else repr(text)
    if len(s) <= limit:
        return s
    return f"{s[:limit]}… [{len(s) - limit} more chars]"


class RolloutKitError(Exception):
    """Root of every error rollout_kit raises on purpose."""


class TaskIdError(RolloutKitError):
    """A task id is invalid, reused, unknown, or was not echoed back."""


class InvalidTaskIdError(TaskIdError, ValueError):
    """The value given as a task id is not a non-negative ``int``."""


class DuplicateTaskIdError(TaskIdError, ValueError):
    """An explicit task id was already used by the same owner."""


class UnknownTaskIdError(TaskIdError, KeyError):
    """The task id was never submitted or registered here."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TaskIdMismatchError(TaskIdError):
    """A worker returned a different task id than the one it was given."""


class ConfigError(RolloutKitError, ValueError):
    """Invalid configuration or arguments (sampling values, workflow spec, paths, …)."""


class TraceError(RolloutKitError):
    """Misuse of the tracer or a broken trace."""


class TraceStateError(TraceError):
    """An event does not fit the record's state (ending a phase never started, …)."""


class TraceSchemaError(TraceError, ValueError):
    """A trace file or DataFrame lacks required columns or is not a trace at all."""


class EngineError(RolloutKitError):
    """Talking to an inference server failed.

    Attributes:
        server: the server address (``host:port``) or ``None`` when not known.
        endpoint: the path that was requested, e.g. ``/generate``.
    """

    def __init__(self, message: str, *, server: str | None = None,
                 endpoint: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.endpoint = endpoint


class EngineConnectionError(EngineError):
    """No response: connection refused or reset, or the server went away."""


class EngineTimeoutError(EngineConnectionError, TimeoutError):
    """The request did not complete within its timeout."""


class EngineStatusError(EngineError):
    """The server answered with an error status.

    Attributes:
        status: the HTTP status code.
        body: the response body, truncated.
    """

    def __init__(self, message: str, *, status: int, body: str = "",
                 server: str | None = None, endpoint: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, server=server, endpoint=endpoint)
        self.status = status
        self.body = truncate(body)
        self.retry_after = retry_after


class EngineBadRequestError(EngineStatusError):
    """A 4xx answer (other than 408/429): the request itself is wrong; never retried."""


class EngineOverloadedError(EngineStatusError):
    """429 or 503: the server is busy or paused; retried after a backoff."""


class EngineServerError(EngineStatusError):
    """A 5xx (or 408) answer; retried."""


class EngineResponseError(EngineError):
    """A 2xx answer whose body does not follow the API (not JSON, missing keys, …)."""


class NoHealthyServerError(EngineError):
    """No server address is healthy."""


class WorkflowError(RolloutKitError):
    """A workflow raised while running a task.

    Attributes:
        task_id: the task whose workflow failed.
        traceback: the formatted traceback of the original exception.
    """

    def __init__(self, message: str, *, task_id: int | None = None,
                 traceback: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.traceback = traceback


class RolloutTimeoutError(RolloutKitError, TimeoutError):
    """Waiting for results ran out of time; the tasks keep running."""


class ControllerStateError(RolloutKitError):
    """The object cannot do this in its current state (closed, other loop, …)."""


class SyncInLoopError(RolloutKitError, RuntimeError):
    """A blocking call cannot re-enter the running event loop (e.g. under uvloop)."""


class SchedulerError(RolloutKitError):
    """Remote workers are unavailable, unreachable or died."""
