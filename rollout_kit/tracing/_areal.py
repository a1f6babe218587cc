"""AReaL's ``perf_tracer`` calls, recorded as rollout_kit sessions and phases.

AReaL's workflows mark their samples with ``areal.utils.perf_tracer``: ``session_context()``
opens a session of the current task, ``atrace_session_phase("generate" | "reward" |
"toolcall")`` / ``trace_session(phase)`` time a phase of it. Unconfigured, every one of those
calls is a no-op. :func:`bridge_areal_perf_tracer` puts a stand-in in the slot AReaL's own
``configure()`` fills (``perf_tracer.GLOBAL_TRACER``), whose session tracer turns those calls
into sessions and phases of the running task on rollout_kit's tracer, and makes each task's
id current for AReaL (``perf_tracer.set_task_id``) when the task is dispatched. AReaL's code
is not changed; a tracer the user configured through AReaL is left alone.

The bridge is installed when a workflow is resolved while ``areal.utils.perf_tracer`` is
imported (it is, by any AReaL workflow module); in-process workers only.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any

from . import _context as ctx
from ._scopes import PhaseScope
from ._starts import TASK_CONTEXT_HOOKS

_MODULE = "areal.utils.perf_tracer"
_INSTALL_LOCK = threading.Lock()


class _SessionTracer:
    """Answers what AReaL's code asks of ``GLOBAL_TRACER.session_tracer``."""

    def __init__(self) -> None:
        # the phase scopes AReaL opened and has not closed yet, per session and phase
        self._open: dict[tuple[int, str], list[PhaseScope]] = {}

    def register_task(self, task_id: int) -> None:
        """AReaL registers tasks in its executor; rollout_kit's controller already has."""

    def register_session(self, task_id: int) -> int | None:
        """A new session of ``task_id`` on the current tracer, made current (as AReaL's
        ``session_context`` makes its own current: for the rest of the calling coroutine)."""
        tr = ctx.TRACER.get()
        if tr is None or not tr.enabled or ctx.TASK.get() != task_id:
            return None
        sid = tr.live.new_session(task_id).session_id
        ctx.SESSION.set(sid)
        return sid

    def get_session_ids(self, task_id: int) -> list[int]:  # noqa: ARG002 - AReaL's signature
        """Events addressed to a whole task are not forwarded (AReaL's executor sends them)."""
        return []

    def record_event(self, session_id: int, event: Any,
                     **payload: Any) -> None:  # noqa: ARG002 - AReaL's signature
        """``<phase>_start`` opens a phase span of the session, ``<phase>_end`` closes it."""
        name = str(getattr(event, "value", event))
        phase, _, edge = name.rpartition("_")
        if edge not in ("start", "end") or not phase:
            return  # "finalized": the task's own end closes its sessions
        key = (session_id, phase)
        if edge == "start":
            scope = PhaseScope(ctx.TRACER.get(), phase, session_id)
            scope.__enter__()
            self._open.setdefault(key, []).append(scope)
            return
        stack = self._open.get(key)
        if stack:
            stack.pop().__exit__(None, None, None)
            if not stack:
                del self._open[key]

    def increment_counter(self, session_id: int, name: str, value: int = 1) -> None:
        """AReaL's session counters have no rollout_kit column: ignored."""

    def flush(self, force: bool = False) -> None:
        """Nothing is buffered here."""

    def reset(self) -> None:
        """Forget phases left open (a task that ended while one was open closed it)."""
        self._open.clear()


class _PerfTracer:
    """The stand-in for AReaL's ``PerfTracer``: sessions only, no Chrome trace of its own
    (AReaL's ``trace_scope`` / ``instant`` calls stay no-ops)."""

    enabled = False

    def __init__(self) -> None:
        self.session_tracer = _SessionTracer()

    def trace_scope(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ARG002 - AReaL's
        return contextlib.nullcontext()

    atrace_scope = trace_scope

    def instant(self, *args: Any, **kwargs: Any) -> None:
        """No Chrome trace is kept."""

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to save: the sessions are rollout_kit's."""

    def reset(self) -> None:
        self.session_tracer.reset()


def bridge_areal_perf_tracer() -> bool:
    """Install the bridge if AReaL's ``perf_tracer`` is imported and not configured.

    Idempotent. Returns whether the bridge is in place.
    """
    mod = sys.modules.get(_MODULE)
    if mod is None:
        return False
    if isinstance(getattr(mod, "GLOBAL_TRACER", None), _PerfTracer):
        return True  # the common case, without the lock
    with _INSTALL_LOCK:
        current = getattr(mod, "GLOBAL_TRACER", None)
        if isinstance(current, _PerfTracer):
            return True
        if current is not None:
            return False  # the user configured AReaL's own tracer: theirs records
        mod.GLOBAL_TRACER = _PerfTracer()  # type: ignore[attr-defined]
        TASK_CONTEXT_HOOKS.append(mod.set_task_id)
    return True


def unbridge_areal_perf_tracer() -> None:
    """Remove the bridge (AReaL's calls are no-ops again)."""
    mod = sys.modules.get(_MODULE)
    if mod is None:
        return
    with _INSTALL_LOCK:
        if isinstance(getattr(mod, "GLOBAL_TRACER", None), _PerfTracer):
            mod.GLOBAL_TRACER = None  # type: ignore[attr-defined]
        if mod.set_task_id in TASK_CONTEXT_HOOKS:
            TASK_CONTEXT_HOOKS.remove(mod.set_task_id)
