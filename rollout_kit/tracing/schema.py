"""Column names and dtypes of the trace DataFrames: the one place they are spelled.

Times in frames are float seconds relative to the tracer's epoch (``epoch_ns`` on the
``perf_counter_ns`` clock, anchored to wall time by ``wall_epoch``), so
``wall_epoch + submit_ts`` is a Unix timestamp.

Per-phase seconds come in two kinds (both ``float64``, 0.0 where the phase never ran):

* ``<phase>_s`` (tasks and sessions frames): **wall time** — the length of the union of the
  phase's spans within the task (or session). Four samples generating in parallel for
  1 s each give ``generate_s == 1.0``; it never exceeds the task's ``total_s``.
* ``<phase>_session_s`` (tasks frame only): **session-seconds** — the plain sum of the
  task's span durations of that phase, so parallel sessions add up (four parallel 1 s
  generations give ``generate_session_s == 4.0``), like CPU-seconds. It equals
  ``<phase>_s`` when the task's spans of that phase never overlap, and the sum of the
  sessions' ``<phase>_s`` unless spans of one phase overlap inside one session.

The server metrics frame (``Traces.server_metrics``, :data:`SERVER_METRIC_COLUMNS`) holds
the samples scraped from the servers' ``/metrics`` during a run, one row per sample: ``ts``
(seconds on the trace clock), ``server``, ``metric`` (the sample's name as exposed, e.g.
``vllm:num_requests_running`` or ``vllm:time_to_first_token_seconds_sum``), ``labels`` (a
compact ``k=v,k=v`` string, keys sorted) and ``value``.

The events frame (``Traces.events``, :data:`EVENT_COLUMNS`) holds timestamped events of a
session, one row each: ``continue`` when the engine resent a generation a server had aborted,
with the weight ``version`` it resumed under (the sessions frame's ``continuations`` counts
them).

The RL steps frame (``Traces.steps``, :data:`STEP_COLUMNS`, index ``step``) holds one row per
training step of :mod:`rollout_kit.rl`: the weight ``version`` it trained on, when it started
waiting, its batch was ready, training ran and the weight update ran (pause → update →
continue), how many results and output tokens it consumed. The step samples frame
(``Traces.step_samples``, :data:`STEP_SAMPLE_COLUMNS`, index ``task_id``) holds one row per
consumed result: its ``step``, its tokens' oldest and newest weight version, its staleness
and whether it is a partial rollout.
"""

from __future__ import annotations

#: the trace schema written; 2: trace files hold batch-of-columns records (``columns``)
SCHEMA_VERSION = 2
#: the oldest schema still read (1: one task record per line)
MIN_SCHEMA_VERSION = 1

# -- statuses -------------------------------------------------------------------------
STATUSES = ("pending", "accepted", "rejected", "failed", "cancelled")
TERMINAL_STATUSES = frozenset(STATUSES[1:])

# -- lifecycle marks of a task (in order) ------------------------------------------------
LIFECYCLE_EVENTS = ("submit", "dispatch", "start", "end", "consume")

BUILTIN_PHASES = ("generate", "reward", "toolcall")

# -- index / key columns ---------------------------------------------------------------
TASK_ID = "task_id"
SESSION_ID = "session_id"

# -- tasks frame (index: task_id) ------------------------------------------------------
STATUS = "status"
REASON = "reason"
ERROR = "error"
WORKER = "worker"
SUBMIT_TS = "submit_ts"
DISPATCH_TS = "dispatch_ts"
START_TS = "start_ts"
END_TS = "end_ts"
CONSUME_TS = "consume_ts"
QUEUE_S = "queue_s"  # dispatch - submit
RUN_S = "run_s"  # end - start
TOTAL_S = "total_s"  # end - submit
N_SESSIONS = "n_sessions"
PROMPT_TOKENS = "prompt_tokens"
COMPLETION_TOKENS = "completion_tokens"

TASK_COLUMNS = (
    STATUS, REASON, ERROR, WORKER,
    SUBMIT_TS, DISPATCH_TS, START_TS, END_TS, CONSUME_TS,
    QUEUE_S, RUN_S, TOTAL_S, N_SESSIONS, PROMPT_TOKENS, COMPLETION_TOKENS,
)  # followed by one ``<phase>_s`` (wall time) column per registered phase, then one
# ``<phase>_session_s`` (summed session-seconds) per registered phase, then task attributes

# -- sessions frame (index: task_id, session_id) ------------------------------------------
SERVER = "server"
STOP_REASON = "stop_reason"
TTFT_S = "ttft_s"
ITL_S = "itl_s"  # mean inter-token latency of the session's streamed generations
CONTINUATIONS = "continuations"
RETRIES = "retries"

SESSION_COLUMNS = (
    STATUS, START_TS, END_TS, TOTAL_S, SERVER, PROMPT_TOKENS, COMPLETION_TOKENS,
    STOP_REASON, TTFT_S, ITL_S, CONTINUATIONS, RETRIES,
)  # followed by ``<phase>_s`` (wall time within the session) columns, then any other
# session attribute

# -- spans frame (tidy, one row per phase span) ----------------------------------------
PHASE = "phase"
START = "start"
END = "end"
DURATION = "duration"
CLOSED_AT_FINALIZE = "closed_at_finalize"
RAISED = "raised"  # spans column after SPAN_COLUMNS: the phase body raised an exception

SPAN_COLUMNS = (TASK_ID, SESSION_ID, PHASE, START, END, DURATION, SERVER, STATUS,
                CLOSED_AT_FINALIZE)

# -- events frame (one row per timestamped event of a session) ---------------------------
EVENT = "event"
TS = "ts"
VERSION = "version"  # the weight version the engine held at the event
CONTINUE = "continue"  # the engine resent a generation a server had aborted
SESSION_EVENTS = (CONTINUE,)  # the kinds of session events, in code order

EVENT_COLUMNS = (TASK_ID, SESSION_ID, EVENT, TS, VERSION)

# -- server metrics frame (one row per scraped sample) -----------------------------------
METRIC = "metric"
LABELS = "labels"
VALUE = "value"

SERVER_METRIC_COLUMNS = (TS, SERVER, METRIC, LABELS, VALUE)

# -- RL steps frame (index: step; one row per training step of ``rollout_kit.rl``) ----------
STEP = "step"
BATCH_READY_TS = "batch_ready_ts"  # the step's batch of accepted results was complete
TRAIN_START_TS = "train_start_ts"
TRAIN_END_TS = "train_end_ts"
UPDATE_START_TS = "update_start_ts"  # pause_generation sent
UPDATE_END_TS = "update_end_ts"  # continue_generation answered
SAMPLES = "samples"  # results (tasks) the step consumed
TOKENS = "tokens"  # output tokens of those results
STEP_STATUS = "status"  # "ok", "train_failed", "update_failed", "cancelled"

#: times of a step (ns in records, seconds on the trace clock in the frame), in order
STEP_TIMES = (START_TS, BATCH_READY_TS, TRAIN_START_TS, TRAIN_END_TS, UPDATE_START_TS,
              UPDATE_END_TS)
STEP_COLUMNS = (VERSION, *STEP_TIMES, SAMPLES, TOKENS, STEP_STATUS, ERROR)

# -- RL step samples frame (one row per consumed result; index: task_id) -------------------
VERSION_MIN = "version_min"  # the oldest weight version among its output tokens
VERSION_MAX = "version_max"
STALENESS = "staleness"  # the consuming step's version − version_min
PARTIAL = "partial"  # its tokens carry two or more versions (interrupted by an update)

STEP_SAMPLE_COLUMNS = (STEP, VERSION_MIN, VERSION_MAX, STALENESS, PARTIAL, TOKENS)


PHASE_SESSION_SUFFIX = "_session_s"


def phase_column(phase: str) -> str:
    """The tasks/sessions column holding the wall seconds spent in ``phase``.

    The length of the union of the phase's spans within the task (or session): time
    during which at least one of its spans of ``phase`` was open.
    """
    return f"{phase}_s"


def phase_session_column(phase: str) -> str:
    """The tasks column holding the summed session-seconds of ``phase``.

    The sum of the task's span durations of ``phase``: parallel sessions add up, so it can
    exceed the task's ``total_s`` (see the module docstring).
    """
    return f"{phase}{PHASE_SESSION_SUFFIX}"


#: every name above: the column and value constants and the two column-name functions
__all__ = [name for name in dict(globals()) if name[0].isalpha() and name != "annotations"]
