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
    │   └── DatasetError                        a load dataset is empty, malformed (file:line) …
    ├── TraceError
    │   ├── TraceStateError                     phase ended but never started, finalized twice, …
    │   └── TraceSchemaError(ValueError)        a trace file / DataFrame lacks required columns
    ├── EngineError                             talking to an inference server failed
    │   ├── EngineConnectionError               no response (refused, reset, DNS)
    │   │   ├── EngineUnreachableError          the connection could not be opened
    │   │   └── EngineTimeoutError(TimeoutError)
    │   ├── EngineStatusError                   the server answered with an error status
    │   │   ├── EngineBadRequestError           4xx other than 408/429: never retried
    │   │   ├── EngineOverloadedError           429 / 503 (retried, honours Retry-After)
    │   │   └── EngineServerError               5xx and 408 (retried)
    │   ├── EngineResponseError                 2xx but the body is not what the API promises
    │   └── NoHealthyServerError                every address is down / out of rotation
    ├── WorkflowError                           a workflow raised; carries task_id and the cause
    ├── AgentError                              an agent's turn or tool ended its task
    │   ├── TurnTimeoutError(TimeoutError)      one chat call took longer than turn_timeout
    │   ├── ToolError                           a tool raised (with tool_errors="raise")
    │   └── AgentClosedError                    a call on a client whose task has ended
    ├── RolloutTimeoutError(TimeoutError)       wait()/wait_for() ran out of time
    ├── ControllerStateError                    used after close(), wrong loop, paused forever …
    ├── SyncInLoopError(RuntimeError)           a blocking call cannot run in this event loop
    └── SchedulerError                          remote workers (Ray) unavailable or died

Errors that concern a server carry ``server`` and ``endpoint``; status errors also carry
``status`` and a *truncated* ``body``. No message ever contains a whole prompt or an API key.

Failure reasons. A task whose workflow raised ends ``failed``; its ``reason`` (in
``RolloutResult.reason`` and the ``reason`` column of the tasks frame) says whose fault it
was. An engine error raised through the workflow gives the ``failure_reason`` of its class;
anything else is a bug or a deliberate raise in the workflow::

    reason               raised as                 what happened
    no_healthy_server    NoHealthyServerError      no server answered its health check
    connection_error     EngineConnectionError     refused, reset, DNS, body cut off
    timeout              EngineTimeoutError        no complete answer within the timeout
    server_error         EngineServerError         HTTP 5xx / 408 (after the retries)
    server_overloaded    EngineOverloadedError     HTTP 429 / 503 (after the retries)
    bad_request          EngineBadRequestError     HTTP 4xx: the server refused the request
    http_error           EngineStatusError         another error status
    bad_response         EngineResponseError       a 2xx body that breaks the API
    engine_error         EngineError               another engine failure
    turn_timeout         TurnTimeoutError          an agent's turn ran past its timeout
    tool_error           ToolError                 an agent's tool raised
    agent_closed         AgentClosedError          an agent called after its task ended
    workflow_exception   any other exception       the workflow itself raised

For an engine error the task's ``error`` text starts with :attr:`EngineError.brief`, a short
label naming the address(es), e.g. ``no healthy server (127.0.0.1:1)``, then `` — `` and the
full ``Type: message``; tasks that failed the same way share that label, so a summary can
say "12 failed: no healthy server (127.0.0.1:1)".
"""

from __future__ import annotations

from typing import ClassVar

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


class DatasetError(ConfigError):
    """A load-test dataset is unusable: empty, a malformed line, a missing key, a bad length.

    The message is one line and names the file and the 1-based line number where known
    (``"prompts.jsonl:3: not valid JSON (…)"``).

    Attributes:
        path: the dataset file, or ``None`` for a generated dataset.
        line: the 1-based line number (JSONL) or entry number (JSON list), or ``None``.
    """

    def __init__(self, message: str, *, path: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


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
        failure_reason: (class attribute) the ``reason`` of a task that failed with this
            error (see the module docstring).
        label: (class attribute) the start of :attr:`brief`.
    """

    failure_reason: ClassVar[str] = "engine_error"
    label: ClassVar[str] = "engine error"

    def __init__(self, message: str, *, server: str | None = None,
                 endpoint: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.endpoint = endpoint

    def __reduce__(self) -> tuple[object, ...]:
        # rebuilt without __init__ (its keyword-only arguments are not in ``args``), so every
        # engine error survives pickling (Ray ships a remote task's error back)
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def addresses(self) -> tuple[str, ...]:
        """The server address(es) this error concerns (empty when not known)."""
        return () if self.server is None else (self.server,)

    @property
    def brief(self) -> str:
        """A short label naming the address(es): ``"timeout (127.0.0.1:30000)"``.

        The same for every task that failed the same way (no ids, no timings), so it can
        be counted.
        """
        addrs = self.addresses()
        if not addrs:
            return self.label
        shown = ", ".join(addrs[:3]) + (f" +{len(addrs) - 3} more" if len(addrs) > 3 else "")
        return f"{self.label} ({shown})"


def _rebuild(cls: type[EngineError], args: tuple[object, ...],
             state: dict[str, object]) -> EngineError:
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class EngineConnectionError(EngineError):
    """No response: connection refused or reset, or the server went away."""

    failure_reason = "connection_error"
    label = "connection error"


class EngineUnreachableError(EngineConnectionError):
    """The connection could not be opened (refused, no route, DNS, TLS handshake): the
    server is down or the address is wrong. The engine takes such a server out of rotation
    at once."""


class EngineTimeoutError(EngineConnectionError, TimeoutError):
    """The request did not complete within its timeout."""

    failure_reason = "timeout"
    label = "timeout"


class EngineStatusError(EngineError):
    """The server answered with an error status.

    Attributes:
        status: the HTTP status code.
        body: the response body, truncated.
    """

    failure_reason = "http_error"
    label = "HTTP error"

    def __init__(self, message: str, *, status: int, body: str = "",
                 server: str | None = None, endpoint: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, server=server, endpoint=endpoint)
        self.status = status
        self.body = truncate(body)
        self.retry_after = retry_after

    @property
    def brief(self) -> str:
        """``"server error HTTP 500 (127.0.0.1:30000)"``."""
        base = f"{self.label} HTTP {self.status}"
        return f"{base} ({self.server})" if self.server else base


class EngineBadRequestError(EngineStatusError):
    """A 4xx answer (other than 408/429): the request itself is wrong; never retried."""

    failure_reason = "bad_request"
    label = "bad request"


class EngineOverloadedError(EngineStatusError):
    """429 or 503: the server is busy or paused; retried after a backoff."""

    failure_reason = "server_overloaded"
    label = "server overloaded"


class EngineServerError(EngineStatusError):
    """A 5xx (or 408) answer; retried."""

    failure_reason = "server_error"
    label = "server error"


class EngineResponseError(EngineError):
    """A 2xx answer whose body does not follow the API (not JSON, missing keys, …)."""

    failure_reason = "bad_response"
    label = "bad response"


class NoHealthyServerError(EngineError):
    """No server address is healthy.

    Attributes:
        servers: the addresses that were tried (all down), in order.
    """

    failure_reason = "no_healthy_server"
    label = "no healthy server"

    def __init__(self, message: str, *, servers: tuple[str, ...] | list[str] = (),
                 server: str | None = None, endpoint: str | None = None) -> None:
        super().__init__(message, server=server, endpoint=endpoint)
        self.servers = tuple(servers)

    def addresses(self) -> tuple[str, ...]:
        if self.servers:
            return self.servers
        return super().addresses()


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


class AgentError(RolloutKitError):
    """An agent's chat turn or tool ended its task; ``failure_reason`` names how (a
    timed-out turn is a failure with its own reason, never a low reward)."""

    failure_reason: ClassVar[str] = "agent_error"


class TurnTimeoutError(AgentError, TimeoutError):
    """One chat call of an agent took longer than its ``turn_timeout``."""

    failure_reason = "turn_timeout"


class ToolError(AgentError):
    """A tool raised while ``tool_errors="raise"``; ``__cause__`` is its exception."""

    failure_reason = "tool_error"


class AgentClosedError(AgentError):
    """A chat call on an agent client whose task has already ended."""

    failure_reason = "agent_closed"


class RolloutTimeoutError(RolloutKitError, TimeoutError):
    """Waiting for results ran out of time; the tasks keep running."""


class ControllerStateError(RolloutKitError):
    """The object cannot do this in its current state (closed, other loop, …)."""


class SyncInLoopError(RolloutKitError, RuntimeError):
    """A blocking call cannot re-enter the running event loop (e.g. under uvloop)."""


class SchedulerError(RolloutKitError):
    """Remote workers are unavailable, unreachable or died."""
