"""Perfetto flows, counters and continuations in the Chrome export, checked against the
Trace Event Format rules (``tests/_chrome_format.py``) on a real run against the simulator:
an abort → continue, a failed and a cancelled task next to plain ones."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pandas as pd
import pytest

from rollout_kit import (
    GenerationConfig,
    ModelRequest,
    RolloutController,
    RolloutWorkflow,
    SingleTurnWorkflow,
)
from rollout_kit.engines import InferenceEngine
from rollout_kit.sim import serve
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import atrace_phase, load_traces, trace_session
from rollout_kit.tracing import schema as S
from rollout_kit.tracing._frames.chrome import (
    CONTINUE_EVENT,
    SERVER_COUNTER,
    TASK_COUNTER,
    chrome_layout,
    to_chrome_trace,
)
from tests._chrome_format import check_trace, flow_chains
from tests._trace_factories import make_traces

WAIT_S = 30  # a bound on every wait below, never a sleep


class Boom(RolloutWorkflow):
    """One session that generates, then fails."""

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> Any:
        async with trace_session():
            async with atrace_phase("generate"):
                await engine.generate_async(ModelRequest(
                    input_ids=[1, 2, 3], gconfig=GenerationConfig(max_new_tokens=4)))
            raise RuntimeError("boom")


class Hang(RolloutWorkflow):
    """One session that waits until it is cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> Any:
        async with trace_session():
            self.started.set()
            await asyncio.Event().wait()


def _kind(e: dict[str, Any]) -> str:
    return "session" if e["cat"] == "session" else e["name"]


def _x(trace: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"
            and all(e.get(k) == v or e["args"].get(k) == v for k, v in match.items())]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One recorded run: task ids by kind, the reloaded frames, the exported trace."""
    out = tmp_path_factory.mktemp("flows")

    async def record() -> dict[str, int]:
        wf = SingleTurnWorkflow(lambda *a, **k: 1.0, GenerationConfig(
            n_samples=2, max_new_tokens=24, ignore_eos=True))
        async with serve("sglang", n=2, zero_latency=True) as cluster:
            async with RolloutController(sglang=cluster.addresses, trace_path=out / "t.jsonl",
                                         engine_config=fast_engine_config(stream=True)) as ctl:
                ctl.set_version(3)
                for server in cluster.servers:  # round robin: one sample's first request each
                    server.faults.force("abort", 1)
                aborted = ctl.submit("2+2?", wf)
                res = await ctl.wait_for_async(aborted, timeout=WAIT_S)
                assert res.ok, res
                failed = ctl.submit("x", Boom())
                hang = Hang()
                cancelled = ctl.submit("y", hang)
                plain = [ctl.submit(f"{i}+1?", wf) for i in range(3)]
                await asyncio.wait_for(hang.started.wait(), WAIT_S)
                assert ctl.cancel(cancelled)
                for tid in (failed, cancelled, *plain):
                    await ctl.wait_for_async(tid, timeout=WAIT_S)
        return {"aborted": aborted, "failed": failed, "cancelled": cancelled,
                "plain": plain[0]}

    ids = asyncio.run(record())
    traces = load_traces(out / "t.jsonl")  # the events went through the JSONL
    path = out / "trace.json"
    to_chrome_trace(traces.spans, path, tasks=traces.tasks, sessions=traces.sessions,
                    events=traces.events)
    return {"ids": ids, "traces": traces, "trace": json.loads(path.read_bytes())}


def test_the_trace_follows_the_format(run: dict[str, Any]) -> None:
    assert check_trace(run["trace"]) == []


def test_continuations_are_recorded_with_their_version(run: dict[str, Any]) -> None:
    tid = run["ids"]["aborted"]
    traces = run["traces"]
    ev = traces.events[traces.events[S.TASK_ID] == tid]
    assert len(ev) == 2 and (ev[S.EVENT] == S.CONTINUE).all()
    assert ev[S.VERSION].tolist() == [3, 3]
    sess = traces.sessions.loc[tid]
    per_session = Counter(ev[S.SESSION_ID].tolist())
    assert per_session == {int(s): int(n) for s, n in sess[S.CONTINUATIONS].fillna(0).items()
                           if n}
    s_start = sess[S.START_TS].reindex(ev[S.SESSION_ID].to_numpy()).to_numpy()
    s_end = sess[S.END_TS].reindex(ev[S.SESSION_ID].to_numpy()).to_numpy()
    assert ((ev[S.TS].to_numpy() > s_start) & (ev[S.TS].to_numpy() < s_end)).all()
    # no continuation, no event
    assert set(traces.events[S.TASK_ID]) == {tid}


def test_each_task_is_one_flow_per_lane_in_lifecycle_order(run: dict[str, Any]) -> None:
    trace, ids = run["trace"], run["ids"]
    chains = flow_chains(trace)
    by_task: dict[int, list[list[dict[str, Any]]]] = {}
    for steps in chains.values():
        tasks = {e["args"]["task_id"] for e in steps}
        assert len(tasks) == 1  # a flow never crosses tasks
        by_task.setdefault(tasks.pop(), []).append(steps)
    tasks = run["traces"].tasks
    assert set(by_task) == set(tasks.index)
    for tid, flows in by_task.items():
        n_sessions = int(tasks.loc[tid, S.N_SESSIONS])
        lanes = {e["tid"] for e in _x(trace, task_id=tid, cat="session")}
        assert len(flows) == max(len(lanes), 1)  # samples that overlap: one lane each
        for steps in flows:
            names = [e["name"] for e in steps]
            assert names[:2] == ["submit", "dispatch"] and names[-1] == "consume", names
            assert len({e["tid"] for e in steps if e["cat"] != "lifecycle"}) <= 1
            ts = [e["ts"] for e in steps]
            assert ts == sorted(ts)
        sessions = [e for f in flows for e in f if e["cat"] == "session"]
        assert len(sessions) == n_sessions
        # each session's rewards and continuations come after it, on its chain
        for steps in flows:
            kinds = [e["cat"] if e["cat"] != "phase" else e["name"] for e in steps]
            if "session" in kinds:
                first = kinds.index("session")
                assert all(k in ("continue", "reward", "session") for k in kinds[first:-1])
    aborted = [e for f in by_task[ids["aborted"]] for e in f]
    cont = [e for e in aborted if e["name"] == CONTINUE_EVENT]
    assert len(cont) == 2 and all(e["args"]["version"] == 3 for e in cont)
    assert all(e["dur"] == 0 for e in cont)
    for steps in by_task[ids["plain"]]:
        assert [_kind(e) for e in steps][:5] == ["submit", "dispatch", "session", "reward",
                                                 "consume"][:len(steps)]


def test_failed_and_cancelled_tasks(run: dict[str, Any]) -> None:
    trace, ids = run["trace"], run["ids"]
    for kind in ("failed", "cancelled"):
        tid = ids[kind]
        [steps] = [c for c in flow_chains(trace).values() if c[0]["args"]["task_id"] == tid]
        assert [_kind(e) for e in steps] == ["submit", "dispatch", "session", "consume"]
        session = steps[2]
        assert session["cat"] == "session" and session["args"]["status"] == kind
        assert all(e["args"]["status"] == kind for e in steps if e["cat"] == "lifecycle")
    [generate] = _x(trace, task_id=ids["failed"], name="generate")
    assert generate["args"]["status"] == "failed"
    assert not _x(trace, task_id=ids["cancelled"], name="generate")


def test_one_track_per_task(run: dict[str, Any]) -> None:
    trace = run["trace"]
    stride = trace["otherData"]["lane_tid_stride"]
    for e in _x(trace):
        assert e["tid"] % stride == e["args"]["task_id"] + 1
    tracks = {(e["pid"], e["tid"]) for e in _x(trace)}
    tasks = run["traces"].tasks
    assert len({t for _, t in tracks if t < stride}) == len(tasks)  # lane 0: one per task


def test_counters_per_worker_and_per_server(run: dict[str, Any]) -> None:
    trace, traces = run["trace"], run["traces"]
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    tasks_c = [e for e in counters if e["name"] == TASK_COUNTER]
    assert {procs[e["pid"]] for e in tasks_c} == {
        "rollout_kit" if pd.isna(w) else f"worker {w}" for w in traces.tasks[S.WORKER]}
    assert max(e["args"]["in_flight"] for e in tasks_c) >= 2
    assert tasks_c[-1]["args"] == {"queued": 0, "in_flight": 0}
    servers = set(traces.sessions[S.SERVER].dropna())
    req = [e for e in counters if e["name"] == SERVER_COUNTER]
    assert {procs[e["pid"]] for e in req} == {f"server {s}" for s in servers}
    for pid in {e["pid"] for e in req}:
        mine = [e["args"] for e in req if e["pid"] == pid]
        assert mine[-1] == {"queued": 0, "in_flight": 0}
        assert max(a["in_flight"] for a in mine) >= 1
        # streamed: each request waits for its first token, then decodes
        assert all(0 <= a["queued"] <= a["in_flight"] for a in mine)
        assert max(a["queued"] for a in mine) >= 1


def test_layout_is_plain_frames_apart_from_the_json(run: dict[str, Any]) -> None:
    traces = run["traces"]
    layout = chrome_layout(traces.spans, tasks=traces.tasks, sessions=traces.sessions,
                           events=traces.events)
    assert len(layout.slices) == len(_x(run["trace"]))
    assert layout.slices["bind_id"].notna().sum() == sum(
        len(c) for c in flow_chains(run["trace"]).values())
    assert set(layout.counters["name"]) == {TASK_COUNTER, SERVER_COUNTER}
    assert list(layout.tracks.columns) == ["pid", "task", "lane", "tid", "name", "sort_index"]


# -- synthetic frames: the parts the simulated run does not reach ------------------------

def test_streamed_sessions_draw_the_server_queue() -> None:
    f = make_traces(4, sessions=2, parallel=True)  # ttft_s = a tenth of each generate
    layout = chrome_layout(f.spans, tasks=f.tasks, sessions=f.sessions)
    req = layout.counters[layout.counters["name"] == SERVER_COUNTER]
    assert req["queued"].notna().all()
    assert (req["queued"] <= req["in_flight"]).all() and req["queued"].max() >= 1
    # the queue of a request ends at its first token: a tenth into the generate span
    g = f.spans[f.spans[S.PHASE] == "generate"].iloc[0]
    first_token = round((g[S.START] + (g[S.END] - g[S.START]) / 10) * 1e6, 3)
    assert (req["ts"] - first_token).abs().min() < 1e-3


def test_no_first_token_times_no_server_queue() -> None:
    f = make_traces(3, sessions=2, parallel=True)
    sessions = f.sessions.assign(**{S.TTFT_S: float("nan")})
    req = chrome_layout(f.spans, tasks=f.tasks, sessions=sessions).counters
    req = req[req["name"] == SERVER_COUNTER]
    assert len(req) and req["queued"].isna().all()
    trace = to_chrome_trace(f.spans, tasks=f.tasks, sessions=sessions)
    assert all(set(e["args"]) == {"in_flight"} for e in trace["traceEvents"]
               if e["ph"] == "C" and e["name"] == SERVER_COUNTER)
    assert check_trace(trace) == []


def test_worker_counts_by_hand() -> None:
    tasks = pd.DataFrame({S.TASK_ID: [0, 1, 2], S.WORKER: "w",
                          S.SUBMIT_TS: [0.0, 0.0, 1.0], S.DISPATCH_TS: [0.0, 2.0, float("nan")],
                          S.END_TS: [3.0, 4.0, 1.5], S.CONSUME_TS: float("nan")})
    spans = pd.DataFrame(columns=list(S.SPAN_COLUMNS))
    c = chrome_layout(spans, tasks=tasks).counters
    got = list(zip((c["ts"] / 1e6).tolist(), c["queued"].tolist(), c["in_flight"].tolist(),
                   strict=True))
    # task 2 is cancelled in the queue (no dispatch): queued until it ends
    assert got == [(0.0, 1, 1), (1.0, 2, 1), (1.5, 1, 1), (2.0, 0, 2), (3.0, 0, 1),
                   (4.0, 0, 0)]


def test_a_continuation_outside_the_session_widens_its_slice() -> None:
    f = make_traces(1, sessions=1)
    s = f.sessions.iloc[0]
    late = float(s[S.END_TS]) + 0.5
    events = pd.DataFrame({S.TASK_ID: [0], S.SESSION_ID: pd.array([0], dtype="Int64"),
                           S.EVENT: [S.CONTINUE], S.TS: [late],
                           S.VERSION: pd.array([None], dtype="Int64")})
    trace = to_chrome_trace(f.spans, tasks=f.tasks, sessions=f.sessions, events=events)
    assert check_trace(trace) == []
    [sess] = _x(trace, cat="session")
    assert sess["ts"] + sess["dur"] == pytest.approx(late * 1e6, abs=1e-3)
    [cont] = _x(trace, cat="continue")
    assert cont["args"]["version"] is None and cont["tid"] == sess["tid"]


def test_checker_catches_broken_traces() -> None:
    f = make_traces(2, sessions=2, parallel=True)
    good = to_chrome_trace(f.spans, tasks=f.tasks, sessions=f.sessions)
    assert check_trace(good) == []

    def broken(fix: Any) -> list[str]:
        t = json.loads(json.dumps(good))
        fix(t["traceEvents"])
        return check_trace(t)

    flowing = [i for i, e in enumerate(good["traceEvents"]) if "bind_id" in e]
    first, last = flowing[0], flowing[-1]
    assert any("start" in m for m in broken(lambda ev: ev[first].pop("flow_out")))
    assert any("end(s)" in m for m in broken(lambda ev: ev.append(dict(ev[last]))))
    assert any("direction" in m for m in broken(
        lambda ev: ev[first].update(flow_out=False, flow_in=False)))
    assert any("id2" in m for m in broken(lambda ev: ev[first].update(id2={"local": "0x1"})))
    assert any("tid 0" in m for m in broken(lambda ev: ev[first].update(tid=0)))
    assert any("µs" in m for m in broken(lambda ev: ev[first].update(ts="12")))
    assert any("overlaps" in m for m in broken(lambda ev: ev.append(
        {**ev[first], "name": "x", "ts": ev[first]["ts"] + 1, "dur": 1e12})))
    assert any("holds tasks" in m for m in broken(lambda ev: ev.append(
        {**ev[first], "args": {**ev[first]["args"], "task_id": 99}})))
    counter = next(i for i, e in enumerate(good["traceEvents"]) if e["ph"] == "C")
    assert any("series differ" in m for m in broken(
        lambda ev: ev[counter]["args"].pop("queued")))
