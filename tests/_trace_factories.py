"""Synthetic trace DataFrames for analysis/plotting/export tests, built from schema constants.

``make_traces(n)`` gives tasks/sessions/spans frames shaped like the tracer's: every task is
queued, then runs ``sessions`` sessions (sequential unless ``parallel``), each a ``generate``
span followed by a ``reward`` span, with a small idle gap between them. Tasks carry
``<phase>_s`` (wall time: union of the spans) and ``<phase>_session_s`` (sum), as the
tracer's frames do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rollout_kit.tracing import schema as S


@dataclass
class Frames:
    tasks: pd.DataFrame
    sessions: pd.DataFrame
    spans: pd.DataFrame


def make_traces(n: int = 20, *, sessions: int = 1, parallel: bool = False, seed: int = 0,
                servers: tuple[str, ...] = ("127.0.0.1:1", "127.0.0.1:2"),
                statuses: tuple[str, ...] = ("accepted",), workers: int = 1,
                extra_phase: str | None = None) -> Frames:
    """Random but valid frames for ``n`` tasks."""
    rng = np.random.default_rng(seed)
    task_id = np.arange(n, dtype=np.int64)
    submit = np.sort(rng.uniform(0.0, max(n, 1) * 0.05, n)) + 10.0
    queue = rng.exponential(0.2, n)
    dispatch = submit + queue
    start = dispatch + 0.01
    span_rows: list[dict[str, object]] = []
    sess_rows: list[dict[str, object]] = []
    end = np.empty(n)
    for i in range(n):
        t = start[i]
        ends = []
        for k in range(sessions):
            s0 = start[i] if parallel else t
            gen = float(rng.uniform(0.2, 1.0))
            rew = float(rng.uniform(0.05, 0.2))
            g0, g1 = s0, s0 + gen
            r0, r1 = g1 + 0.02, g1 + 0.02 + rew
            server = servers[(i + k) % len(servers)]
            phases = [("generate", g0, g1), ("reward", r0, r1)]
            if extra_phase is not None:
                phases.append((extra_phase, r1 + 0.01, r1 + 0.11))
            for ph, a, b in phases:
                span_rows.append({S.TASK_ID: i, S.SESSION_ID: k, S.PHASE: ph, S.START: a,
                                  S.END: b, S.DURATION: b - a, S.SERVER: server,
                                  S.STATUS: statuses[i % len(statuses)],
                                  S.CLOSED_AT_FINALIZE: False})
            s_end = phases[-1][2]
            sess_rows.append({S.TASK_ID: i, S.SESSION_ID: k,
                              S.STATUS: statuses[i % len(statuses)], S.START_TS: s0,
                              S.END_TS: s_end, S.TOTAL_S: s_end - s0, S.SERVER: server,
                              S.PROMPT_TOKENS: 10, S.COMPLETION_TOKENS: 20 + k,
                              S.STOP_REASON: "stop", S.TTFT_S: gen / 10, S.ITL_S: 0.01,
                              S.CONTINUATIONS: 0, S.RETRIES: k % 2,
                              "generate_s": gen, "reward_s": rew})
            ends.append(s_end)
            t = s_end + 0.01
        end[i] = max(ends) if ends else start[i]
    spans = pd.DataFrame(span_rows, columns=list(S.SPAN_COLUMNS))
    sess = pd.DataFrame(sess_rows).set_index([S.TASK_ID, S.SESSION_ID])
    status = pd.Categorical([statuses[i % len(statuses)] for i in range(n)],
                            categories=list(S.STATUSES))
    per_task = spans.groupby([S.TASK_ID, S.PHASE])[S.DURATION].sum().unstack(fill_value=0.0)
    wall = spans.groupby([S.TASK_ID, S.PHASE])[[S.START, S.END]].apply(
        lambda g: union_length(zip(g[S.START], g[S.END], strict=True))).unstack(fill_value=0.0)
    tasks = pd.DataFrame({
        S.STATUS: status, S.REASON: None, S.ERROR: None,
        S.WORKER: [f"w{i % workers}" for i in range(n)],
        S.SUBMIT_TS: submit, S.DISPATCH_TS: dispatch, S.START_TS: start, S.END_TS: end,
        S.CONSUME_TS: end + 0.001, S.QUEUE_S: dispatch - submit, S.RUN_S: end - start,
        S.TOTAL_S: end - submit, S.N_SESSIONS: sessions,
        S.PROMPT_TOKENS: pd.array([10 * sessions] * n, dtype="Int64"),
        S.COMPLETION_TOKENS: pd.array([sum(20 + k for k in range(sessions))] * n,
                                      dtype="Int64"),
    }, index=pd.Index(task_id, name=S.TASK_ID))
    for ph in wall.columns:
        tasks[S.phase_column(str(ph))] = wall[ph].reindex(tasks.index).to_numpy()
    for ph in per_task.columns:
        tasks[S.phase_session_column(str(ph))] = per_task[ph].reindex(tasks.index).to_numpy()
    return Frames(tasks, sess, spans)


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals, the slow obvious way."""
    total, cur_start, cur_end = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_end is None or a > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def hand_tasks() -> pd.DataFrame:
    """Four tasks with round numbers, for hand-computed checks."""
    return pd.DataFrame({
        S.STATUS: pd.Categorical(["accepted", "accepted", "rejected", "failed"],
                                 categories=list(S.STATUSES)),
        S.SUBMIT_TS: [0.0, 0.0, 1.0, 2.0],
        S.DISPATCH_TS: [0.0, 1.0, 1.0, 2.5],
        S.START_TS: [0.0, 1.0, 1.0, 2.5],
        S.END_TS: [1.0, 3.0, 2.0, 4.0],
        S.QUEUE_S: [0.0, 1.0, 0.0, 0.5],
        S.TOTAL_S: [1.0, 3.0, 1.0, 2.0],
        S.COMPLETION_TOKENS: pd.array([10, 20, 30, 40], dtype="Int64"),
        S.PROMPT_TOKENS: pd.array([1, 1, 1, 1], dtype="Int64"),
        "generate_s": [0.5, 1.5, 0.5, 1.0],
    }, index=pd.Index([0, 1, 2, 3], name=S.TASK_ID))


def record_with_tracer(n: int = 6, *, path: object = None, sessions: int = 2,
                       worker: str | None = "w0", first_id: int = 0) -> object:
    """Run ``n`` tiny tasks through the real :class:`~rollout_kit.tracing.Tracer`.

    Each task: dispatch, start, ``sessions`` sessions of generate + reward with a server and
    token counts, end, then finalize (every third task ``failed``). Returns the tracer
    (closed, so a ``path`` JSONL is complete). Task ids are ``first_id .. first_id + n - 1``.
    """
    from rollout_kit.tracing import Tracer

    tr = Tracer(path=path, worker=worker)  # type: ignore[arg-type]
    for i in range(first_id, first_id + n):
        tr.register_task(i)
        tr.mark(i, "dispatch")
        with tr.task_scope(i):
            tr.mark(i, "start")
            for k in range(sessions):
                with tr.session():
                    with tr.phase("generate"):
                        pass
                    tr.annotate(server=f"127.0.0.1:{8000 + k}", ttft_s=0.001)
                    tr.increment(prompt_tokens=3, completion_tokens=5)
                    with tr.phase("reward"):
                        pass
            tr.mark(i, "end")
        tr.finalize(i, "failed" if i % 3 == 0 else "accepted")
    tr.close()
    return tr


def reference_traces() -> object:
    """A one-task trace of the real tracer: the columns and dtypes an imported file's frames
    must match (generate with a server, TTFT, ITL and token counts)."""
    from rollout_kit.tracing import Tracer, trace_phase

    tr = Tracer(worker="w0")
    tr.register_task(0)
    with tr.task_scope(0):
        tr.mark(0, "dispatch")
        with tr.session():
            with trace_phase("generate"):
                pass
            tr.annotate(server="127.0.0.1:1", ttft_s=0.1, itl_s=0.01)
            tr.increment(prompt_tokens=3, completion_tokens=4)
    tr.finalize(0, "accepted")
    return tr.frames()
