"""Writing the Chrome trace JSON from its layout (:func:`to_chrome_trace`); see
:mod:`rollout_kit.tracing._frames.chrome` for the format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from ...._errors import ConfigError
from ... import schema as S
from .layout import CAT_CONTINUE, CAT_COUNTER, CAT_SESSION, ChromeLayout, chrome_layout


def _na(v: Any) -> Any:
    return None if v is None or v is pd.NA else v


def _metadata(layout: ChromeLayout) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid, name, sort in layout.processes[["pid", "name", "sort_index"]].itertuples(
            index=False):
        events.append({"ph": "M", "name": "process_name", "pid": int(pid), "tid": 0,
                       "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": int(pid), "tid": 0,
                       "args": {"sort_index": int(sort)}})
    for pid, tid, name, sort in layout.tracks[["pid", "tid", "name", "sort_index"]].itertuples(
            index=False):
        events.append({"ph": "M", "name": "thread_name", "pid": int(pid), "tid": int(tid),
                       "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": int(pid),
                       "tid": int(tid), "args": {"sort_index": int(sort)}})
    return events


def _slice_events(sl: pd.DataFrame) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, cat, ts, dur, pid, tid, task, sess, server, status, version, cont, bind, fin, \
            fout in zip(sl["name"].tolist(), sl["cat"].tolist(), sl["ts"].tolist(),
                        sl["dur"].tolist(), sl["pid"].tolist(), sl["tid"].tolist(),
                        sl["task"].tolist(), sl["session"].tolist(), sl["server"].tolist(),
                        sl["status"].tolist(), sl["version"].tolist(),
                        sl["continuations"].tolist(), sl["bind_id"].tolist(),
                        sl["flow_in"].tolist(), sl["flow_out"].tolist(), strict=True):
        args: dict[str, Any] = {"task_id": task, "session_id": _na(sess),
                                "server": _na(server), "status": _na(status)}
        if cat == CAT_CONTINUE:
            args["version"] = _na(version)
        elif cat == CAT_SESSION and _na(cont) is not None:
            args["continuations"] = cont
        e: dict[str, Any] = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur,
                             "pid": pid, "tid": tid, "args": args}
        if _na(bind) is not None:
            e["bind_id"] = bind
            if fin:
                e["flow_in"] = True
            if fout:
                e["flow_out"] = True
        out.append(e)
    return out


def _counter_events(counters: pd.DataFrame) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for pid, name, ts, queued, in_flight in counters[
            ["pid", "name", "ts", "queued", "in_flight"]].itertuples(index=False):
        args: dict[str, Any] = {}
        if queued == queued:  # not NaN: the series is drawn
            args["queued"] = int(queued)
        if in_flight == in_flight:
            args["in_flight"] = int(in_flight)
        out.append({"ph": "C", "name": name, "cat": CAT_COUNTER, "pid": int(pid), "ts": ts,
                    "args": args})
    return out


def to_chrome_trace(spans: pd.DataFrame, path: str | Path | None = None, *,
                    tasks: pd.DataFrame | None = None, sessions: pd.DataFrame | None = None,
                    events: pd.DataFrame | None = None) -> dict[str, Any]:
    """Build (and optionally write) a Chrome / Perfetto trace with one track per task.

    Args:
        spans: the spans frame (``task_id``, ``session_id``, ``phase``, ``start``, ``end``;
            ``server`` and ``status`` go into each event's ``args``). Spans still open
            (no ``end``) are left out and counted in ``otherData``.
        path: where to write the JSON (with orjson); its folder must exist.
        tasks: the tasks frame; adds the queue wait, the lifecycle marks, the flows, the
            worker counters and one process per worker.
        sessions: the sessions frame; adds one slice per session (a flow step) and, with
            ``ttft_s``, the servers' ``queued`` series.
        events: the events frame (``Traces.events``); adds the ``continue`` slices.

    Returns:
        The trace as a dict: ``traceEvents`` (metadata ``M`` events, then ``X`` events with
        µs ``ts``/``dur`` and their flows, then ``C`` counter events), ``displayTimeUnit``
        and ``otherData``.

    Raises:
        TraceSchemaError: a frame lacks required columns.
        ConfigError: ``path``'s folder does not exist.
    """
    if path is not None and not Path(path).parent.is_dir():
        raise ConfigError(f"cannot write the Chrome trace: folder {Path(path).parent} "
                          "does not exist")
    layout = chrome_layout(spans, tasks=tasks, sessions=sessions, events=events)
    trace: dict[str, Any] = {
        "traceEvents": (_metadata(layout) + _slice_events(layout.slices)
                        + _counter_events(layout.counters)),
        "displayTimeUnit": "ms",
        "otherData": {"generator": "rollout_kit", "schema_version": S.SCHEMA_VERSION,
                      "lane_tid_stride": layout.stride,
                      "open_spans_dropped": layout.open_spans_dropped},
    }
    if path is not None:
        Path(path).write_bytes(orjson.dumps(trace))
    return trace
