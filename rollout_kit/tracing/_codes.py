"""The small integer codes a tracer stores: lifecycle marks, statuses, session events.

A task's marks are a list indexed by mark code (``marks[END]``), in the order of
:data:`~rollout_kit.tracing.schema.LIFECYCLE_EVENTS`; statuses are indices into
:data:`~rollout_kit.tracing.schema.STATUSES`; session event kinds into
:data:`~rollout_kit.tracing.schema.SESSION_EVENTS`. Use these names, never bare indices.
"""

from __future__ import annotations

from typing import Final

from .schema import LIFECYCLE_EVENTS, SESSION_EVENTS, STATUSES

# -- lifecycle marks: indices into a task's ``marks`` -------------------------------------
SUBMIT: Final = 0
DISPATCH: Final = 1
START: Final = 2
END: Final = 3
CONSUME: Final = 4
N_MARKS: Final = 5

# -- statuses: indices into ``schema.STATUSES`` -------------------------------------------
PENDING: Final = 0
ACCEPTED: Final = 1
REJECTED: Final = 2
FAILED: Final = 3
CANCELLED: Final = 4

# -- session event kinds: indices into ``schema.SESSION_EVENTS`` ------------------------
CONTINUE: Final = 0

EVENT_CODES: Final = {e: i for i, e in enumerate(LIFECYCLE_EVENTS)}
STATUS_CODES: Final = {s: i for i, s in enumerate(STATUSES)}
SESSION_EVENT_CODES: Final = {e: i for i, e in enumerate(SESSION_EVENTS)}

if (LIFECYCLE_EVENTS[SUBMIT], LIFECYCLE_EVENTS[DISPATCH], LIFECYCLE_EVENTS[START],
        LIFECYCLE_EVENTS[END], LIFECYCLE_EVENTS[CONSUME]) != (
        "submit", "dispatch", "start", "end", "consume") or len(LIFECYCLE_EVENTS) != N_MARKS:
    raise ImportError(f"mark codes do not match schema.LIFECYCLE_EVENTS {LIFECYCLE_EVENTS}")
if (STATUSES[PENDING], STATUSES[ACCEPTED], STATUSES[REJECTED], STATUSES[FAILED],
        STATUSES[CANCELLED]) != ("pending", "accepted", "rejected", "failed", "cancelled"):
    raise ImportError(f"status codes do not match schema.STATUSES {STATUSES}")
if SESSION_EVENTS[CONTINUE] != "continue":
    raise ImportError(f"session event codes do not match schema.SESSION_EVENTS {SESSION_EVENTS}")
