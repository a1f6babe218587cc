"""Export the trace frames to the Chrome Trace Event Format (Perfetto, chrome://tracing).

Tracks. Each task gets its own track (named ``task N``), inside one process per worker
(``pid``, named by ``process_name`` metadata), so tasks that run at the same time render
side by side instead of piling onto one thread as in AReaL. A track never holds partially
overlapping events: when sessions of one task overlap (n samples in parallel), the extra
sessions go to sub-tracks ``task N · lane k`` right under the task's track. A track's
``tid`` is ``k * stride + task_id + 1`` (``stride``, in ``otherData.lane_tid_stride``, a
power of ten above every ``task_id + 1``): never 0, because Perfetto's JSON tokenizer takes
``tid`` 0 for "not set" and uses the pid instead (``json_trace_tokenizer.cc``: "Make the tid
equal to the pid if tid is not set"), which would merge task 0 into the track of the task
numbered like the worker's pid.

Slices are complete (``"X"``) events with microsecond ``ts``/``dur`` (numbers, 3 decimals:
nanosecond resolution), in ``args`` always ``task_id`` and ``session_id``:

* each phase span (``cat: phase``: ``generate``, ``reward``, …);
* with ``tasks``: the queue wait ``queued`` (submit → dispatch, ``cat: queue``) and
  zero-length marks ``submit``, ``dispatch``, ``consume`` (``cat: lifecycle``);
* with ``sessions``: one ``session N`` slice per session (``cat: session``), its phase spans
  nested inside (it covers its spans and events should they stick out);
* with ``events``: a zero-length ``continue`` slice (``cat: continue``) where the engine
  resent a generation a server had aborted, ``args.version`` the weight version it resumed
  under.

Flows link a task's steps in time: submit → dispatch → each session → each continuation →
each ``reward`` span → consume. They are flow events of the format's second version: a
``bind_id`` on the slice itself, with ``flow_out`` (first step), ``flow_in`` and
``flow_out`` (later steps) or ``flow_in`` (last step). What Perfetto honours, from its
importer (google/perfetto, ``src/trace_processor/importers/json/json_trace_parser_impl.cc``
and ``importers/common/flow_tracker.cc``): a v2 flow is bound right after its own slice is
pushed, so to that slice ("bind_enclosing_slice is always true for v2 flow events"); a v1
flow event (``"ph": "s"/"t"/"f"`` with ``id``, ``cat``, ``name``, ``"bp": "e"``) binds to
whatever slice is on top of its track when it is read — ambiguous for zero-length slices and
equal timestamps ("if we report a flow event earlier that a corresponding slice then flow
event would not be added") — and the args of v1 flow events are not kept, so the weight
version sits on the ``continue`` slice. Flows are matched on ``id`` with ``cat`` and
``name`` (v1) or on ``bind_id`` alone (v2, an int or a hex string;
``MaybeExtractFlowIdentifier``); ``id2`` (``{"local"|"global": …}``) is read only for async
``b``/``e``/``n`` events, so it is never written. A slice holds one ``bind_id``, so a flow is
one chain (a second start with the same id counts as ``flow_duplicate_id``): one per task
and lane — sessions that run in parallel sit on different lanes, and each lane's chain
starts at its own copy of the submit and dispatch marks and ends at its own consume mark
(lane 0 has the originals).

Counters (``"ph": "C"``, process-scoped): each worker process has ``tasks`` with series
``queued`` (submitted, not dispatched) and ``in_flight`` (dispatched, not finished); each
server has a process ``server ADDR`` with ``requests``: ``in_flight`` (its open
``generate`` spans) and, for streamed runs, ``queued`` (of these, the ones still waiting
for their first token: a session's ``ttft_s`` is its last call's, so only a session's last
``generate`` span can be split). Perfetto names the tracks ``tasks in_flight`` etc.

The layout (:func:`chrome_layout`: which slice goes on which track, the flow chains, the
counter series — plain DataFrames) is computed apart from the JSON writing
(:func:`to_chrome_trace`), as HolisticTraceAnalysis keeps ``prepare_timeline_events`` apart
from its drawing.

Usage::

    from . import to_chrome_trace
    to_chrome_trace(traces.spans, "trace.json", tasks=traces.tasks, sessions=traces.sessions,
                    events=traces.events)  # open in ui.perfetto.dev
"""

from .counters import SERVER_COUNTER, TASK_COUNTER
from .layout import (
    CONSUME_EVENT,
    CONTINUE_EVENT,
    DISPATCH_EVENT,
    QUEUED_EVENT,
    SUBMIT_EVENT,
    ChromeLayout,
    chrome_layout,
)
from .write import to_chrome_trace

__all__ = [
    "CONSUME_EVENT",
    "CONTINUE_EVENT",
    "DISPATCH_EVENT",
    "QUEUED_EVENT",
    "SERVER_COUNTER",
    "SUBMIT_EVENT",
    "TASK_COUNTER",
    "ChromeLayout",
    "chrome_layout",
    "to_chrome_trace",
]
