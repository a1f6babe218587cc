# The public names of rollout_kit.tracing, written once: type checkers read them here
# (``name as name`` is a stub's re-export), and ``__init__.py`` loads each on first use
# from this list (lazy_loader.attach_stub). A public name costs one line here.
from . import (
    dumps as dumps,
    schema as schema,
    server_metrics as server_metrics,
)
from ._areal import (
    bridge_areal_perf_tracer as bridge_areal_perf_tracer,
    unbridge_areal_perf_tracer as unbridge_areal_perf_tracer,
)
from ._context import (
    current_session_id as current_session_id,
    current_task_id as current_task_id,
)
from ._frames.build import Traces as Traces
from ._frames.chrome import to_chrome_trace as to_chrome_trace
from ._frames.dumps import (
    load_dump as load_dump,
    read_areal_dump as read_areal_dump,
)
from ._frames.files import (
    StaleParquetWarning as StaleParquetWarning,
    compact_trace as compact_trace,
    compact_traces as compact_traces,
    load_traces as load_traces,
)
from ._frames.readers import (
    AREAL_STATUSES as AREAL_STATUSES,
    read_aiperf as read_aiperf,
    read_areal_sessions_trace as read_areal_sessions_trace,
    read_guidellm as read_guidellm,
    read_vllm_bench as read_vllm_bench,
)
from ._helpers import (
    TASK_SPAN_ID as TASK_SPAN_ID,
    annotate as annotate,
    annotate_first as annotate_first,
    atrace_phase as atrace_phase,
    dump_call as dump_call,
    increment as increment,
    session_event as session_event,
    session_span_id as session_span_id,
    trace_phase as trace_phase,
    trace_session as trace_session,
    traceparent as traceparent,
)
from ._jsonl import TornTraceWarning as TornTraceWarning
from ._phases import (
    PALETTE as PALETTE,
    phase_color as phase_color,
    register_phase as register_phase,
    registered_phases as registered_phases,
)
from ._remote import (
    controller_record as controller_record,
    reanchor as reanchor,
)
from ._tracer import (
    Tracer as Tracer,
    current_tracer as current_tracer,
)
from .dumps import TrajectoryDump as TrajectoryDump
