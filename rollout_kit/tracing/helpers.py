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

from . import context as ctx
from .phases import phase_code
from .scopes import PhaseScope, SessionScope
from .store import AttrValue
from .tracer import current_tracer

__all__ = ["annotate", "atrace_phase", "increment", "trace_phase", "trace_session"]


def trace_phase(name: str) -> PhaseScope:
    """A span of phase ``name`` in the current session (or task): context manager
    (``with``/``async with``) or decorator of sync and async functions."""
    return PhaseScope(None, name, phase_code(name), None)


def atrace_phase(name: str) -> PhaseScope:
    """Alias of :func:`trace_phase` for ``async with`` (AReaL's ``atrace_session_phase``)."""
    return PhaseScope(None, name, phase_code(name), None)


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


def increment(**counts: int | float) -> None:
    """Add to numeric attributes of the current session; no-op when there is none."""
    tr = current_tracer()
    sid = ctx.SESSION.get()
    if tr is not None and sid is not None:
        tr.increment(sid, **counts)
