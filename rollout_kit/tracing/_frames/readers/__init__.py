"""Other tools' result files as :class:`~rollout_kit.tracing.Traces`: the same frames, the
same column names where the meaning is the same, so :mod:`rollout_kit.analysis` and every
plot of :mod:`rollout_kit.plotting` work on them as on this project's own traces.

Four readers, each taking a file or a list of files (``load_traces`` takes globs and
directories too, and picks the reader by each file's content, not its name):

* :func:`read_vllm_bench`: ``vllm bench serve --save-result --save-detailed`` JSON (one
  result object; several, one a line, with ``--append-result``; also what
  ``rollout-kit load --save-result --save-detailed`` writes). One task per request, with one
  session and one ``generate`` span from the request's send to its last token.
* :func:`read_aiperf`: aiperf's per-request export (``profile_export.jsonl``: one
  ``{metadata, metrics, error}`` record a line). One session per request; one task per
  aiperf *user session* (``metadata.session_num``: the request of a single-turn benchmark,
  the turns of a multi-turn conversation).
* :func:`read_guidellm`: guidellm's JSON result (``guidellm run --output kind=json``:
  ``benchmarks.json``, one document: ``metadata``, ``config``, ``benchmarks[]`` with the
  per-request records of each benchmark). One session per request, one task per
  conversation (``info.conversation_id``: the request of a single-turn run).
* :func:`read_areal_sessions_trace`: AReaL's session trace (``sessions-r*.jsonl``, one
  ``SessionRecord`` a line). One session per record, one task per ``(rank, task_id)``, its
  ``phases`` as spans.

Column mapping, where the meaning is the same (tasks frame ``T``, sessions frame ``S``):

* vllm bench serve (request ``i``): T ``submit_ts`` = ``start_times − queue_times`` (its
  arrival; ``queue_s`` is vllm's client queue time), ``dispatch_ts`` = ``start_ts`` =
  ``start_times`` (sent), ``end_ts`` = ``start + latencies``; ``status`` accepted, or failed
  when ``errors[i]`` is set (``error`` = that text, ``reason`` = ``request_error``).
  S ``prompt_tokens`` / ``completion_tokens`` = ``input_lens`` / ``output_lens``,
  ``ttft_s`` = ``ttfts``, ``itl_s`` = the mean of ``itls[i]`` (the chunk gaps), ``tpot_s``
  = ``(latency − ttft) / (output − 1)``.
* aiperf (one record): S ``start_ts`` / ``end_ts`` = ``request_start_ns`` /
  ``request_end_ns``, ``prompt_tokens`` / ``completion_tokens`` = ``input_sequence_length``
  / ``output_sequence_length``, ``ttft_s`` = ``time_to_first_token``, ``itl_s`` = the mean
  of ``inter_chunk_latency``, ``tpot_s`` = ``inter_token_latency`` (aiperf's ITL is a
  TPOT). T ``start_ts`` / ``end_ts``: the first start / last end of the task's requests;
  ``submit_ts`` = ``credit_issued_ns`` when the record has it (then ``dispatch_ts`` = the
  start and ``queue_s`` the credit's wait), else the start (``dispatch_ts`` NaN);
  ``status`` accepted, failed (``error``: ``"<type>: <message>"``, ``reason``
  ``request_error``) or cancelled (``was_cancelled``); ``worker`` = ``worker_id``.
* guidellm (one request record; ``info.timings`` in epoch seconds): T ``submit_ts`` =
  ``targeted_start`` (when its profile meant to send it), ``dispatch_ts`` = ``start_ts`` =
  ``request_start`` (so ``queue_s`` is guidellm's ``request_dispatch_delay``), ``end_ts`` =
  ``request_end`` (``resolve_end`` for a request that never ended); ``status`` accepted
  (``requests.successful``), failed (``errored``: ``error`` = ``info.error``, ``reason``
  ``request_error``) or cancelled (``incomplete``); ``worker`` = ``process <n>``
  (``scheduler_process_id``). S ``prompt_tokens`` / ``completion_tokens`` =
  ``input_metrics`` / ``output_metrics`` ``.total_tokens`` (``token_iterations`` when the
  server sent no usage, as guidellm does), ``ttft_s`` = ``first_token_iteration −
  request_start``, ``itl_s`` = ``(last_token_iteration − first_token_iteration) / (output −
  1)`` (guidellm's ITL), ``tpot_s`` = ``(request_end − first_token_iteration) / (output −
  1)``; guidellm's own TPOT, ``(last_token_iteration − request_start) / output`` (the first
  token included), is ``time_per_output_token_s``. guidellm's summary weights ITL and TPOT
  by tokens (each request counts ``output − 1`` / ``output`` times) and takes the lower
  median (the first value whose cumulative weight reaches ½).
* AReaL (one SessionRecord): S ``start_ts`` = ``submit_ts`` (when the sample *started*:
  AReaL's queueing delay is not in the file), ``end_ts`` = ``finalized_ts``, ``status``
  (``dropped`` → cancelled). T ``submit_ts`` = ``start_ts`` = the first session's
  ``submit_ts``, ``end_ts`` = ``finalized_ts``, ``dispatch_ts`` NaN, ``reason``,
  ``worker`` = ``rank<r>`` (``<role>/rank<r>``). Spans: every phase of ``phases``.
* Spans and ``generate_s``: vllm, aiperf and guidellm requests are one ``generate`` span from the
  request's start to its end.

Extras: every task has ``source`` (the file); vllm adds ``model_id`` (and ``run``, the
result's index, when a file holds several) and ``generated_text``; aiperf adds
``request_id``, ``correlation_id``, ``conversation_id``, ``turn_index``, ``benchmark_phase``,
``error_type`` / ``error_code`` and every other scalar metric (time metrics in seconds as
``<name>_s``, the rest as ``<name>``); guidellm adds ``request_id``, ``turn_index``,
``token_iterations`` and ``cached_tokens`` (sessions), ``strategy`` / ``strategy_rate``
(the benchmark's profile) and ``run`` (the benchmark's index, when a file holds several);
AReaL adds ``rank`` (and ``role``), its ``counters`` and any other scalar key (a tool's
name that would shadow one of this project's columns gets an ``x_`` prefix). A failed
aiperf or guidellm request's span has ``raised=True`` (a guidellm one ends at its
``resolve_end``); a failed vllm request has no span (the file does not say when it ended),
and no tool's failures have token counts or a TTFT (vllm writes 0 for them). AReaL's
``<phase>_s`` keys are recomputed from ``phases`` (a span left open, ``end_ts: null``, is
closed at ``finalized_ts`` and
flagged ``closed_at_finalize``; AReaL's own sums leave it out).

Times are rebased as :func:`~rollout_kit.tracing.load_traces` does: seconds since the
earliest time in the files, which becomes ``Traces.wall_epoch`` where the file has wall
times (aiperf's epoch nanoseconds, guidellm's and AReaL's ``time.time()``).
``vllm bench serve`` records ``time.perf_counter()`` only: its ``wall_epoch`` is NaN, and
the files of one call are on that clock as written (comparable when recorded on one machine
since one boot).

Bad input raises :class:`~rollout_kit.TraceSchemaError` naming the file (and the
1-based line): a result of an unknown version or saved without ``--save-detailed`` names the
keys it lacks; a torn last line of a JSONL export is skipped with a
:class:`~rollout_kit.tracing.TornTraceWarning`, as for this project's own traces. A guidellm
benchmark that lists only a sample of its requests (``--metrics sample_size=N``) is read
with a :class:`GuidellmSampleWarning`. guidellm's file and aiperf's per-request records both
have a top-level ``metadata`` object: a guidellm file is known by its ``benchmarks`` list
(and ``metadata.guidellm_version``), an aiperf record by the lack of one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...._errors import ConfigError, TraceSchemaError, truncate
from ..._store import FORMAT
from ..build import Traces
from .aiperf import read_aiperf
from .areal import AREAL_STATUSES, read_areal_sessions_trace
from .common import KINDS, SOURCE, TPOT_S, Kind, StrPath, json_or_none
from .guidellm import GUIDELLM_TPOT_S, GuidellmSampleWarning, is_guidellm, read_guidellm
from .vllm_bench import VLLM_ARRAYS, read_vllm_bench

__all__ = [
    "AREAL_STATUSES",
    "GUIDELLM_TPOT_S",
    "KINDS",
    "SOURCE",
    "TPOT_S",
    "VLLM_ARRAYS",
    "GuidellmSampleWarning",
    "Kind",
    "file_kind",
    "foreign_kind",
    "read_aiperf",
    "read_areal_sessions_trace",
    "read_files",
    "read_guidellm",
    "read_vllm_bench",
]


# -- recognising files ---------------------------------------------------------------------
_VLLM_KEYS = frozenset({"backend", "endpoint_type", "model_id", "num_prompts", "completed",
                        "duration", "latencies", "start_times", "ttfts",
                        "request_throughput"})
_SNIFF_LIMIT = 64 << 20  # the most read of a file (its first line or JSON) to tell its kind
_GUIDELLM_HEAD = b'"guidellm_version"'  # in guidellm's first line: {"metadata": {...


def _classify(obj: object) -> Kind | None:
    if not isinstance(obj, dict):
        return None
    if obj.get("format") == FORMAT or obj.get("kind") in ("header", "task", "mark", "columns"):
        return "rollout_kit"
    if is_guidellm(obj):  # before aiperf: both have a top-level "metadata" object
        return "guidellm"
    if isinstance(obj.get("metadata"), dict):
        return "aiperf"
    if "task_id" in obj and "session_id" in obj:
        return "areal_sessions"
    if len(_VLLM_KEYS & obj.keys()) >= 2:
        return "vllm_bench"
    return None


def file_kind(path: StrPath) -> Kind | None:
    """What a file holds, from its content: its first JSON line (or, for a JSON document
    spread over lines, the whole document); None when it is none of :data:`KINDS`."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
        if not head.lstrip().startswith(b"{"):  # not JSON (Parquet, text): no line
            return None
        fh.seek(0)
        line = fh.readline(_SNIFF_LIMIT)
        while line and not line.strip():
            line = fh.readline(_SNIFF_LIMIT)
        obj = json_or_none(line)
        if obj is None:  # a JSON document over several lines (pretty-printed)
            rest = fh.read(_SNIFF_LIMIT)
            obj = json_or_none(line + rest)
            if obj is None and len(rest) == _SNIFF_LIMIT and _GUIDELLM_HEAD in head:
                return "guidellm"  # one document larger than the sniff: known by its head
    return _classify(obj)


def foreign_kind(files: Sequence[StrPath]) -> Kind | None:
    """The kind of another tool's files ``load_traces`` was given, or None for this project's
    traces (and for files of no known kind, which the trace reader reports).

    Raises:
        TraceSchemaError: files of several kinds (one ``load_traces`` call reads one kind:
            load each and put them side by side with ``analysis.compare``).
    """
    kinds = {os.fspath(p): file_kind(p) for p in files}
    found = set(kinds.values())
    if found <= {"rollout_kit", None}:
        return None
    if len(found) == 1:
        return next(iter(found))
    by_kind: dict[str, list[str]] = {}
    for name, kind in kinds.items():
        by_kind.setdefault(KINDS[kind] if kind else "a file of no known kind", []).append(name)
    raise TraceSchemaError(
        "load_traces reads files of one kind at a time, got "
        + "; ".join(f"{what}: {truncate(', '.join(names), 200)}"
                    for what, names in by_kind.items())
        + ". Load each kind on its own and compare them with analysis.compare({name: "
          "traces.tasks, ...})")


def read_files(kind: Kind, files: Sequence[StrPath]) -> Traces:
    """Read ``files`` of another tool's ``kind`` (:func:`foreign_kind`)."""
    if kind == "vllm_bench":
        return read_vllm_bench(files)
    if kind == "aiperf":
        return read_aiperf(files)
    if kind == "guidellm":
        return read_guidellm(files)
    if kind == "areal_sessions":
        return read_areal_sessions_trace(files)
    raise ConfigError(f"not another tool's kind of file: {kind!r}")
