"""A checker of Chrome Trace Event Format JSON, as Perfetto's JSON importer reads it.

The rules, with where they come from:

* ``traceEvents`` is a list; ``displayTimeUnit`` is ``"ms"`` or ``"ns"`` (the format spec).
* ``ts``/``dur`` are numbers in microseconds (not strings, not bools); Perfetto turns a
  double into ns with ``llround(ts * 1000)`` (``json_trace_tokenizer.cc``, ``CoerceToTs``),
  so three decimals carry everything (nanosecond resolution).
* ``pid``/``tid`` are ints below 2**32 (``CoerceToUint32`` maps anything else to 0); a
  slice's ``tid`` is never 0: the tokenizer reads ``tid`` 0 as unset and uses the pid
  ("Make the tid equal to the pid if tid is not set").
* Complete events of one track nest or are disjoint, never partly overlap (Perfetto's
  ``other-formats.md``: "Perfetto's data model requires duration events … to nest").
* Flows, version 2: ``bind_id`` (an int, or a hex string) sits on a slice event (``X``),
  with ``flow_out`` and/or ``flow_in`` booleans — neither is dropped as
  ``flow_without_direction`` (``json_trace_parser_impl.cc``, ``MaybeAddFlow``). One flow id
  is one chain: exactly one start (``flow_out`` only: ``FlowTracker::Begin`` counts a second
  one as ``flow_duplicate_id``), exactly one end (``flow_in`` only), steps with both; the
  importer links the chain's slices in time order, so the start is the earliest and the end
  the latest.
* Flows, version 1 (``"ph": "s"/"t"/"f"``): an ``id`` plus ``cat`` and ``name`` — together
  they name the flow (``FlowTracker::GetFlowIdForV1Event``) — one ``s`` first, one ``f``
  last, ``t`` between.
* ``id2`` (``{"local": …}`` / ``{"global": …}``) is for async events (``b``/``e``/``n``)
  only: the importer never reads it for flows, so it must not appear on anything else.
* Counters (``"ph": "C"``): ``args`` maps series names to numbers; per ``(pid, name)`` the
  same series in every sample (chrome://tracing takes the series from the first sample and
  reads a missing one as 0) and times that do not go back.
* Metadata (``"ph": "M"``): ``process_name`` / ``thread_name`` with ``args.name``,
  ``*_sort_index`` with ``args.sort_index``; every track and process used is named.

And this project's own rule, one track per task: every ``(pid, tid)`` holding slices holds
one task's (``args.task_id``), named ``task N`` or ``task N · lane k``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

_PHASES = {"X", "M", "C", "s", "t", "f"}
_META = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
         "thread_sort_index": "sort_index"}
_U32 = 2**32
_EPS = 1e-6  # µs


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_flow_id(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return 0 <= v < 2**64
    if isinstance(v, str):
        try:
            int(v, 16)
        except ValueError:
            return False
        return True
    return False


def check_trace(trace: dict[str, Any]) -> list[str]:
    """Every rule broken by ``trace``, one line each (empty: well formed)."""
    errors: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is not a list"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        errors.append(f"displayTimeUnit {trace.get('displayTimeUnit')!r}")
    names: dict[tuple[int, int], str] = {}
    procs: set[int] = set()
    slices: dict[tuple[int, int], list[tuple[float, float, int]]] = defaultdict(list)
    task_of: dict[tuple[int, int], set[object]] = defaultdict(set)
    flows: dict[str, list[tuple[float, bool, bool, int]]] = defaultdict(list)
    v1: dict[tuple[str, str, str], list[tuple[float, str, int]]] = defaultdict(list)
    counters: dict[tuple[int, str], list[tuple[float, frozenset[str]]]] = defaultdict(list)
    used_pids: set[int] = set()
    for i, e in enumerate(events):
        where = f"event {i} ({e.get('ph')!r} {e.get('name')!r})"
        ph = e.get("ph")
        if ph not in _PHASES:
            errors.append(f"{where}: phase not written by this exporter")
            continue
        pid = e.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < _U32:
            errors.append(f"{where}: pid {pid!r} is not a uint32")
            continue
        if not isinstance(e.get("name"), str) or not e["name"]:
            errors.append(f"{where}: no name")
        if "id2" in e:
            errors.append(f"{where}: id2 on a non-async event (Perfetto ignores it)")
        if ph == "M":
            key = _META.get(e["name"])
            if key is None or key not in (e.get("args") or {}):
                errors.append(f"{where}: unknown metadata or no args.{key}")
            elif e["name"] == "thread_name":
                names[(pid, e.get("tid", -1))] = e["args"]["name"]
            elif e["name"] == "process_name":
                procs.add(pid)
            continue
        ts = e.get("ts")
        if not _number(ts) or ts < 0:
            errors.append(f"{where}: ts {ts!r} is not a number of µs")
            continue
        if abs(round(ts, 3) - ts) > 1e-9:
            errors.append(f"{where}: ts {ts!r} finer than a nanosecond")
        used_pids.add(pid)
        if ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(map(_number, args.values())):
                errors.append(f"{where}: counter args {args!r} are not numbers")
                continue
            counters[(pid, e["name"])].append((ts, frozenset(args)))
            continue
        tid = e.get("tid")
        if not isinstance(tid, int) or isinstance(tid, bool) or not 0 < tid < _U32:
            errors.append(f"{where}: tid {tid!r} (0 merges into the pid's thread)")
            continue
        if ph in ("s", "t", "f"):
            if not _is_flow_id(e.get("id")) or not isinstance(e.get("cat"), str):
                errors.append(f"{where}: a v1 flow event needs id and cat")
                continue
            v1[(str(e["id"]), e["cat"], e["name"])].append((ts, ph, i))
            continue
        # ph == "X"
        dur = e.get("dur")
        if not _number(dur) or dur < 0:
            errors.append(f"{where}: dur {dur!r} is not a non-negative number of µs")
            continue
        if not isinstance(e.get("cat"), str):
            errors.append(f"{where}: no cat")
        args = e.get("args") or {}
        if not {"task_id", "session_id"} <= set(args):
            errors.append(f"{where}: args lack task_id/session_id")
        slices[(pid, tid)].append((ts, ts + dur, i))
        task_of[(pid, tid)].add(args.get("task_id"))
        fin, fout = e.get("flow_in", False), e.get("flow_out", False)
        if "bind_id" in e:
            if not _is_flow_id(e["bind_id"]):
                errors.append(f"{where}: bind_id {e['bind_id']!r} is not an int or hex string")
            elif not isinstance(fin, bool) or not isinstance(fout, bool) or not (fin or fout):
                errors.append(f"{where}: bind_id without flow_in/flow_out (no direction)")
            else:
                flows[str(e["bind_id"])].append((ts, fin, fout, i))
        elif "flow_in" in e or "flow_out" in e:
            errors.append(f"{where}: flow_in/flow_out without bind_id")
    errors += _check_nesting(slices)
    errors += _check_tracks(task_of, names, procs, used_pids)
    errors += _check_flows(flows, v1)
    for (pid, name), samples in counters.items():
        if len({keys for _, keys in samples}) != 1:
            errors.append(f"counter {name!r} of pid {pid}: series differ between samples")
        times = [t for t, _ in samples]
        if times != sorted(times):
            errors.append(f"counter {name!r} of pid {pid}: times go back")
    return errors


def _check_nesting(slices: dict[tuple[int, int], list[tuple[float, float, int]]]) -> list[str]:
    errors = []
    for track, iv in slices.items():
        stack: list[float] = []
        for a, b, i in sorted(iv, key=lambda x: (x[0], -(x[1] - x[0]))):
            while stack and stack[-1] <= a + _EPS:
                stack.pop()
            if stack and b > stack[-1] + _EPS:
                errors.append(f"track {track}: event {i} [{a}, {b}] overlaps its parent "
                              f"ending at {stack[-1]}")
            stack.append(b)
    return errors


def _check_tracks(task_of: dict[tuple[int, int], set[object]],
                  names: dict[tuple[int, int], str], procs: set[int],
                  used_pids: set[int]) -> list[str]:
    errors = []
    for track, tasks in task_of.items():
        if len(tasks) != 1:
            errors.append(f"track {track} holds tasks {sorted(map(str, tasks))}")
            continue
        (task,) = tasks
        name = names.get(track)
        if name is None:
            errors.append(f"track {track} has no thread_name")
        elif name != f"task {task}" and not name.startswith(f"task {task} · lane "):
            errors.append(f"track {track} of task {task} is named {name!r}")
    errors += [f"pid {pid} has no process_name" for pid in sorted(used_pids - procs)]
    return errors


def _check_flows(flows: dict[str, list[tuple[float, bool, bool, int]]],
                 v1: dict[tuple[str, str, str], list[tuple[float, str, int]]]) -> list[str]:
    errors = []
    for fid, steps in flows.items():
        starts = [s for s in steps if s[2] and not s[1]]
        ends = [s for s in steps if s[1] and not s[2]]
        if len(starts) != 1 or len(ends) != 1:
            errors.append(f"flow {fid}: {len(starts)} start(s), {len(ends)} end(s)")
            continue
        times = [s[0] for s in steps]
        if starts[0][0] > min(times) or ends[0][0] < max(times):
            errors.append(f"flow {fid}: the start is not the earliest or the end the latest")
    for key, steps in v1.items():
        steps.sort()
        phs = [ph for _, ph, _ in steps]
        if phs.count("s") != 1 or phs.count("f") != 1 or phs[0] != "s" or phs[-1] != "f":
            errors.append(f"v1 flow {key}: phases in time order {phs}")
    return errors


def flow_chains(trace: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The slices of each v2 flow, in the order Perfetto links them (by time)."""
    chains: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and "bind_id" in e:
            chains[str(e["bind_id"])].append(e)
    rank = {(True, False): 0, (True, True): 1, (False, True): 2}  # start, step, end
    for steps in chains.values():
        steps.sort(key=lambda e: (e["ts"], rank[(bool(e.get("flow_out")),
                                                 bool(e.get("flow_in")))]))
    return dict(chains)
