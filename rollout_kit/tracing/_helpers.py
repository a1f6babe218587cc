"""Module-level helpers acting on the current tracer/task/session (from ``contextvars``).

Each is a silent no-op when there is no current tracer (or no session/task where one is
needed), so workflow code can be instrumented unconditionally::

    @trace_phase("reward")
    async def compute_reward(...): ...

    async with trace_session():
        async with atrace_phase("generate"):
            resp = await engine.generate_async(req)
        annotate(server=resp.server, stop_reason=resp.stop_reason)
        increment(prompt_tokens=len(req.input_ids), completion_tokens=len(resp.output_tokens))
"""

from __future__ import annotations

from time import perf_counter_ns

from .._errors import ConfigError
from . import _context as ctx
from ._codes import SESSION_EVENT_CODES
from ._scopes import PhaseScope, SessionScope
from ._store import MISSING, AttrValue
from ._tracer import current_tracer
from .dumps import Coordinate, TrajectoryDump

#: the span id of a task's own span (the root of its trace): a session's span ids never
#: reach the top bit
TASK_SPAN_ID = 1 << 63


def trace_phase(name: str) -> PhaseScope:
    """A span of phase ``name`` in the current session (or task): context manager
    (``with``/``async with``) or decorator of sync and async functions."""
    return PhaseScope(None, name, None)


def atrace_phase(name: str) -> PhaseScope:
    """Alias of :func:`trace_phase` for ``async with`` (AReaL's ``atrace_session_phase``)."""
    return PhaseScope(None, name, None)


def trace_session() -> SessionScope:
    """A new session of the current task (context manager or decorator); no-op without one.

    Unlike AReaL's ``session_context``, the previous session is restored on exit.
    """
    return SessionScope(None, None, strict=False)


def annotate(**attrs: AttrValue) -> None:
    """Set attributes of the current session; no-op when there is none."""
    tr = current_tracer()
    sid = ctx.SESSION.get()
    if tr is not None and sid is not None:
        tr.annotate(sid, **attrs)


def annotate_first(**attrs: AttrValue) -> None:
    """Set the attributes the current session does not have yet (its first call's values
    stay, e.g. when its first request reached the server); no-op when there is none."""
    tr = current_tracer()
    sid = ctx.SESSION.get()
    if tr is None or sid is None or not tr.enabled or not attrs:
        return
    with tr.live.lock:
        have = tr.live.session(sid, "annotate").attrs or {}
        new = {k: v for k, v in attrs.items() if k not in have}
    if new:
        tr.annotate(sid, **new)


def increment(**counts: int | float) -> None:
    """Add to numeric attributes of the current session; no-op when there is none."""
    tr = current_tracer()
    sid = ctx.SESSION.get()
    if tr is not None and sid is not None:
        tr.increment(sid, **counts)


def session_event(event: str, *, version: int | None = None) -> None:
    """Record a timestamped ``event`` (one of ``schema.SESSION_EVENTS``, e.g. ``continue``)
    on the current session, with the weight ``version`` it happened under; no-op without a
    current session. The events frame (``Traces.events``) has one row per call.

    Raises:
        ConfigError: an unknown event or a version that is not an int.
    """
    kind = SESSION_EVENT_CODES.get(event)
    if kind is None:
        raise ConfigError(f"unknown session event {event!r}; use one of "
                          f"{tuple(SESSION_EVENT_CODES)}")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                or version == MISSING):
        raise ConfigError(f"session_event(version=...) needs an int, got {version!r}")
    tr = current_tracer()
    sid = ctx.SESSION.get()
    if tr is not None and sid is not None and tr.enabled:
        tr.live.add_event(sid, kind, perf_counter_ns(), MISSING if version is None else version)


def dump_call() -> tuple[TrajectoryDump, Coordinate] | None:
    """The current tracer's trajectory dump and the replay coordinate of one more engine
    call (counted now), or ``None`` — no tracer, no dump, or no live task; without a dump
    it costs one ``ContextVar`` read and an attribute check."""
    tr = ctx.TRACER.get()
    if tr is None:
        return None
    dump = tr.dump
    task = ctx.TASK.get()
    if dump is None or task is None:
        return None
    sid = ctx.SESSION.get()
    counted = tr.live.next_call(task, sid)
    if counted is None:
        return None
    sample, call = counted
    return dump, Coordinate(task, sid if sample >= 0 else None, sample, call)


def trace_id(prefix: str, task_id: int) -> str:
    """The W3C trace id (32 hex digits) of task ``task_id`` under a tracer's ``prefix``."""
    return f"{prefix}{task_id & 0xFFFFFFFFFFFFFFFF:016x}"


def session_span_id(session_id: int | None) -> int:
    """The span id of a session (``session_id + 1``: never 0), or the task's own span id."""
    return TASK_SPAN_ID if session_id is None else session_id + 1


def traceparent() -> str | None:
    """The W3C ``traceparent`` header value for an engine call made now, or ``None``.

    Its trace is the current task's (:func:`trace_id`), its parent span the current
    session's (:func:`session_span_id`; the task's own span outside a session), sampled. A
    server span that names it as parent is joined to the session
    (:func:`rollout_kit.otel.join_server_spans`).
    """
    tr = current_tracer()
    task = ctx.TASK.get()
    if tr is None or task is None:
        return None
    return (f"00-{trace_id(tr.trace_prefix, task)}-"
            f"{session_span_id(ctx.SESSION.get()):016x}-01")
