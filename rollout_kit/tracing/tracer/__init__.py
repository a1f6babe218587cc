"""The tracer: task lifecycle marks, sessions, phase spans and attributes, kept cheaply.

Usage::

    tr = Tracer(path="traces.jsonl")
    tr.register_task(0)                      # the caller owns the id; submit mark now
    with tr.task_scope(0):                   # the executor runs a workflow in task_context(0)
        tr.mark(0, "start")
        async with tr.session() as sid:      # one generated sample
            async with tr.phase("generate"):
                ...
            tr.increment(prompt_tokens=12, completion_tokens=30)
    tr.finalize(0, "accepted")
    tr.tasks_df()

Live state (tasks not yet finalized, their sessions, open phases) lives in the tracer's
:class:`~rollout_kit.tracing.live.LiveTable` (``tracer.live``), which the scopes use too;
``finalize`` moves a task with its sessions and spans into the columnar
:class:`~rollout_kit.tracing.store.Store` and drops the live objects, so memory per finished
session is a few hundred bytes and nothing grows per finished task except the records and a
one-bit-per-id "seen" bitmap.

Error behaviour (all from :mod:`rollout_kit.errors`):

- invalid task id → ``InvalidTaskIdError``; registering a live or already finalized id
  → ``DuplicateTaskIdError``; an id never registered → ``UnknownTaskIdError``;
- unknown status or lifecycle event, non-scalar or reserved attribute → ``ConfigError``
  (raised at the call, so nothing invalid is ever stored);
- finalizing twice, a phase or annotation for an unknown/finished session, ending a phase
  that was never started or already ended → ``TraceStateError``;
- a mark (e.g. ``consume``) for an already finalized task is recorded, not an error.

The package: :mod:`.core` (the :class:`Tracer`: its epoch and store, the task lifecycle
that commits into it, the frames, the trace file) over :mod:`.live_calls` (the calls that
work on the live table alone: annotations, sessions, phases and their scopes).
"""

from .core import MAX_ERROR_CHARS, Tracer, current_tracer

__all__ = ["MAX_ERROR_CHARS", "Tracer", "current_tracer"]
