""""Why was this task slow": a task's time, part by part, beside the server's state then.

:func:`why_slow` takes the traces of a run (``Traces``: tasks, sessions, spans and the
server metrics frame) and, for the tasks asked about (default: the ``k`` slowest), lines up

* the task's wall time split into where it went — the controller's queue, generation, tools,
  the reward and the rest;
* the split of its slowest generation (the session with the largest ``generate_s``): the
  client's TTFT and mean ITL and, where the server's own spans were joined
  (:func:`rollout_kit.otel.join_server_spans`, ``server_view=``, or SGLang's own per-request
  timings, which the SGLang engines record in the sessions frame), the server's queue,
  prefill and decode, the time outside the server's span (its front end and the network)
  and the client's own time;
* the state of the server that served that generation while it ran, from
  :func:`~._server.server_series`: the most requests waiting and running, the highest KV
  cache usage and preemption rate seen by the scrapes inside the session. When none fell
  inside, the state is left empty and the verdict says so, with the scrapes of that server
  that failed meanwhile (a saturated server answers ``/metrics`` late): another moment's
  state — an idle server before the queue built up — would explain nothing;

and names the largest part in a short ``verdict``, e.g. ``"server queue 1.84 s of 2.10 s:
8 waiting, 4 running, KV 97 %"``.

What is measured and what is derived:

===================== ======================================================================
column                how
===================== ======================================================================
``total_s``           measured by the client: submit → end (``tasks.total_s``)
``queue_s``           measured: submit → dispatch, the controller's queue (a rollout slot)
``generate_s``        measured: the wall time of the task's ``generate`` spans
``tool_s``            measured: the summed ``tool.*`` / ``toolcall`` spans (session-seconds)
``reward_s``          measured: the ``reward`` spans
``other_s``           derived: ``total_s`` minus the four above (clipped at 0): the
                      workflow's own code and what runs between phases
``session_s``         measured: the slowest generation's ``generate_s``
``ttft_s``            measured by the client on a streamed call (NaN otherwise)
``itl_s``             measured by the client: mean inter-token latency of a streamed call
``decode_s``          derived when the server's spans are not joined: ``session_s`` minus
                      ``ttft_s``; with them, the server's ``server_decode_s``
``server_queue_s``    measured by the server (vLLM: its span's ``time_in_queue``, joined
                      spans only; SGLang: ``meta_info.queue_time``)
``server_prefill_s``  measured by the server (joined spans; SGLang's ``meta_info``)
``server_decode_s``   measured by the server (joined spans; SGLang's ``meta_info``)
``server_frontend_s`` derived: the client's in-flight time minus the server's end-to-end
``client_own_s``      measured by the client: call → request written, last byte → return
``waiting`` …         measured by the server (its ``/metrics``), sampled every scrape
                      interval: a queue shorter than the interval can be missed
``state_samples``     the scrapes that saw the server while the session ran
``scrapes_failed``    the scrapes of that server that failed while it ran
===================== ======================================================================

Usage::

    from rollout_kit.analysis import why_slow
    why_slow(traces)                          # the 5 slowest tasks
    why_slow(traces, task_ids=[17], server_view=join_server_spans(traces.sessions, spans))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import pandas as pd

from .._errors import ConfigError
from ..tracing import schema as S
from ._common import floats, require_columns
from ._groups import slowest
from ._server import server_series

#: the server series looked up for each row (the most seen while the session ran)
STATE_SERIES = ("waiting", "running", "kv_cache_usage", "preemptions_per_s")

#: the columns of :func:`why_slow`'s table, in order
WHY_COLUMNS = (
    S.STATUS, S.TOTAL_S, S.QUEUE_S, "generate_s", "tool_s", "reward_s", "other_s",
    S.SESSION_ID, S.SERVER, "session_s", S.TTFT_S, S.ITL_S, "decode_s",
    "server_queue_s", "server_prefill_s", "server_decode_s", "server_frontend_s",
    "client_own_s", *STATE_SERIES, "state_samples", "scrapes_failed", "cause", "verdict",
)

#: the parts a verdict can name: ``cause`` value → the column holding its seconds and the
#: words of the verdict. The server's parts replace ``first token`` / ``decode`` where
#: the server's spans were joined.
CAUSES = {
    "controller_queue": (S.QUEUE_S, "controller queue"),
    "server_queue": ("server_queue_s", "server queue"),
    "server_prefill": ("server_prefill_s", "server prefill"),
    "server_decode": ("server_decode_s", "server decode"),
    "server_frontend": ("server_frontend_s", "server front end + network"),
    "client": ("client_own_s", "client"),
    "first_token": (S.TTFT_S, "time to first token"),
    "decode": ("decode_s", "decode"),
    "generate": ("session_s", "generate"),
    "tool": ("tool_s", "tools"),
    "reward": ("reward_s", "reward"),
    "other": ("other_s", "workflow / other"),
}
#: causes the server's state explains (the verdict then quotes it)
_SERVER_SIDE = frozenset({"server_queue", "server_prefill", "server_decode", "first_token",
                          "decode", "generate"})


def _is_tool(phase: str) -> bool:
    return phase == "toolcall" or phase.startswith("tool.")


def _phase_seconds(spans: pd.DataFrame | None, by: list[str]) -> pd.DataFrame:
    """Summed span seconds per ``by`` key of the tool phases and of ``reward``."""
    if spans is None or spans.empty:
        return pd.DataFrame(columns=["tool_s", "reward_s"])
    sp = require_columns(spans, (S.TASK_ID, S.PHASE, S.START, S.END), "spans")
    dur = np.nan_to_num(floats(sp[S.END]) - floats(sp[S.START]), nan=0.0)
    phase = sp[S.PHASE].astype("string").fillna("")
    tool = phase.map(_is_tool).to_numpy(dtype=bool)
    reward = (phase == "reward").to_numpy(dtype=bool, na_value=False)
    keys = {S.TASK_ID: sp[S.TASK_ID].to_numpy(dtype=np.int64)}
    if S.SESSION_ID in by:
        keys[S.SESSION_ID] = pd.to_numeric(sp[S.SESSION_ID], errors="coerce").fillna(-1) \
            .to_numpy(dtype=np.int64)
    df = pd.DataFrame({**keys, "tool_s": np.where(tool, dur, 0.0),
                       "reward_s": np.where(reward, dur, 0.0)})
    return df.groupby(by, sort=False)[["tool_s", "reward_s"]].sum()


def _state(sessions: pd.DataFrame, metrics: pd.DataFrame | None) -> pd.DataFrame:
    """Per session: the most of each :data:`STATE_SERIES` its server showed while it ran,
    from the scrapes that fell inside it (``state_samples``), and the scrapes of that server
    that failed meanwhile (``scrapes_failed``). With no scrape inside, the state stays NaN:
    another moment's state (an idle server before the queue built up) would mislead."""
    out = pd.DataFrame(np.nan, index=sessions.index, columns=list(STATE_SERIES))
    out["state_samples"] = 0
    out["scrapes_failed"] = 0
    if metrics is None or metrics.empty or not len(sessions):
        return out
    wide = server_series(metrics, wide=True)
    if wide.empty:
        return out
    start = floats(sessions[S.START_TS])
    end = floats(sessions[S.END_TS])
    server = sessions[S.SERVER].astype("string").fillna("").to_numpy(dtype=object)
    n_state = len(STATE_SERIES)
    for name, table in wide.groupby(level=0, sort=False):
        rows = np.flatnonzero(server == str(name))
        if not len(rows):
            continue
        ts = table.index.get_level_values(1).to_numpy(dtype=np.float64)
        cols = {c: table[c].to_numpy(dtype=np.float64) for c in STATE_SERIES
                if c in table.columns}
        failed = (np.nan_to_num(table["scrape_failed"].to_numpy(dtype=np.float64)) > 0
                  if "scrape_failed" in table.columns else np.zeros(len(ts), dtype=bool))
        seen = ~failed
        if cols:  # a scrape saw the state when one of its series has a value
            seen &= np.isfinite(np.column_stack(list(cols.values()))).any(axis=1)
        for r in rows.tolist():
            lo, hi = start[r], end[r]
            if np.isnan(lo):
                continue
            if np.isnan(hi):
                hi = lo
            a, b = np.searchsorted(ts, lo, "left"), np.searchsorted(ts, hi, "right")
            inside = np.flatnonzero(seen[a:b]) + a
            out.iat[r, n_state] = len(inside)
            out.iat[r, n_state + 1] = int(failed[a:b].sum())
            if not len(inside):
                continue
            for j, c in enumerate(STATE_SERIES):
                if c in cols:
                    v = cols[c][inside]
                    if np.isfinite(v).any():
                        out.iat[r, j] = float(np.nanmax(v))
    return out


def _session_rows(sessions: pd.DataFrame) -> pd.DataFrame:
    """The sessions frame's columns this view reads (NaN where missing)."""
    want = (S.STATUS, S.START_TS, S.END_TS, S.TOTAL_S, S.SERVER, "generate_s", S.TTFT_S,
            S.ITL_S, "server_queue_s", "server_prefill_s", "server_decode_s",
            "server_frontend_s", "client_own_s")
    out = pd.DataFrame(index=sessions.index)
    for c in want:
        if c in sessions.columns:
            out[c] = sessions[c] if c in (S.STATUS, S.SERVER) else floats(sessions[c])
        else:
            out[c] = pd.NA if c in (S.STATUS, S.SERVER) else np.nan
    return out


def _select(tasks: pd.DataFrame, task_ids: int | Iterable[int] | None, k: int) -> list[int]:
    if task_ids is None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"k must be an int >= 1, got {k!r}")
        return [int(i) for i in slowest(tasks, k).index]
    ids = [int(task_ids)] if isinstance(task_ids, int | np.integer) else \
        [int(i) for i in task_ids]
    missing = sorted(set(ids) - set(tasks.index.astype("int64")))
    if missing:
        raise ConfigError(f"no such task in the traces: {missing[:10]}")
    return ids


def _fmt_state(row: pd.Series[Any]) -> str:
    parts: list[str] = []
    if pd.notna(row["waiting"]):
        parts.append(f"{row['waiting']:.0f} waiting")
    if pd.notna(row["running"]):
        parts.append(f"{row['running']:.0f} running")
    if pd.notna(row["kv_cache_usage"]):
        parts.append(f"KV {row['kv_cache_usage'] * 100:.0f} %")
    if pd.notna(row["preemptions_per_s"]) and row["preemptions_per_s"] > 0:
        parts.append(f"{row['preemptions_per_s']:.2g} preemptions/s")
    return ", ".join(parts)


def _verdict(row: pd.Series[Any], scraped: bool = False) -> tuple[str, str]:
    """(cause, verdict) of one row: the largest of its parts (``scraped``: the run has
    server metrics, so a row without any says so)."""
    joined = pd.notna(row["server_queue_s"]) or pd.notna(row["server_decode_s"])
    if joined:
        skip = {"first_token", "decode", "generate"}
    elif pd.notna(row[S.TTFT_S]):
        skip = {"server_queue", "server_prefill", "server_decode", "server_frontend",
                "client", "generate"}
    else:
        skip = {"server_queue", "server_prefill", "server_decode", "server_frontend",
                "client", "first_token", "decode"}
    best, secs = "", 0.0
    for cause, (col, _) in CAUSES.items():
        v = row[col]
        if cause in skip or pd.isna(v):
            continue
        if float(v) > secs:
            best, secs = cause, float(v)
    if not best:
        return "", "nothing measured"
    total = row[S.TOTAL_S]
    of = f" of {total:.2f} s" if pd.notna(total) and total > 0 else ""
    text = f"{CAUSES[best][1]} {secs:.2f} s{of}"
    if best in _SERVER_SIDE:
        state = _fmt_state(row)
        failed = int(row["scrapes_failed"]) if pd.notna(row["scrapes_failed"]) else 0
        if state:
            text += f": {state}"
        elif failed:
            text += f": no scrape saw the server while it ran ({failed} failed)"
        elif scraped and row["state_samples"] == 0:
            text += ": no scrape fell while it ran"
    elif best == "controller_queue":
        text += ": waiting for a rollout slot"
    return best, text


def why_slow(traces: Any, task_ids: int | Iterable[int] | None = None, *, k: int = 5,
             server_view: Any = None, by: Literal["task", "session"] = "task"
             ) -> pd.DataFrame:
    """Why the slowest tasks (or ``task_ids``) were slow: their time part by part, the
    server's state then and a one-line ``verdict`` (see the module docstring).

    Args:
        traces: the run's traces (``Traces``, ``load_traces(...)``; anything with
            ``tasks``, ``sessions``, ``spans`` and, optionally, ``server_metrics``).
        task_ids: a task id or several; default: the ``k`` slowest by ``total_s``.
        k: how many slowest tasks when ``task_ids`` is omitted.
        server_view: what :func:`rollout_kit.otel.join_server_spans` returned (or its
            ``sessions`` frame): adds the server's own queue / prefill / decode.
        by: one row per ``"task"`` (its slowest generation split further) or per
            ``"session"`` of those tasks (each generation split; ``queue_s`` NaN: the
            controller's queue comes before any session).

    Returns:
        A DataFrame with :data:`WHY_COLUMNS`, indexed by ``task_id`` (``by="task"``, in the
        order asked, slowest first by default) or ``(task_id, session_id)``. ``cause`` is
        the key of the largest part in :data:`CAUSES`, ``verdict`` says it in words.

    Raises:
        ConfigError: ``k`` is not an int >= 1, ``by`` is unknown, or a task id is not in the
            traces.
        TraceSchemaError: a frame lacks required columns.
    """
    if by not in ("task", "session"):
        raise ConfigError(f"by must be 'task' or 'session', got {by!r}")
    tasks = require_columns(traces.tasks, (S.TOTAL_S,), "tasks")
    if S.TASK_ID in tasks.columns:
        tasks = tasks.set_index(S.TASK_ID)
    sessions = traces.sessions
    if server_view is not None:
        sessions = getattr(server_view, "sessions", server_view)
    spans = getattr(traces, "spans", None)
    metrics = getattr(traces, "server_metrics", None)
    ids = _select(tasks, task_ids, k)
    tix = tasks.loc[ids]

    # the sessions of those tasks, with the server's state while each ran
    if len(sessions) and isinstance(sessions.index, pd.MultiIndex):
        sess = sessions[sessions.index.get_level_values(0).isin(ids)]
    else:
        sess = sessions.iloc[:0]
    srow = _session_rows(sess)
    srow = srow.join(_state(srow, metrics))
    sphase = _phase_seconds(spans, [S.TASK_ID, S.SESSION_ID])

    def task_col(col: str) -> np.ndarray:
        return floats(tix[col]) if col in tix.columns else np.full(len(tix), np.nan)

    if by == "session":
        out = srow.copy()
        out[S.SESSION_ID] = out.index.get_level_values(1)
        out[S.QUEUE_S] = np.nan  # the controller's queue is the task's, before any session
        ph = sphase.reindex(out.index).fillna(0.0) if len(sphase) else None
        out["tool_s"] = ph["tool_s"].to_numpy() if ph is not None else 0.0
        out["reward_s"] = ph["reward_s"].to_numpy() if ph is not None else 0.0
        out["session_s"] = out["generate_s"]
        parts = np.nan_to_num(out["generate_s"].to_numpy(dtype=np.float64)) \
            + out["tool_s"].to_numpy(dtype=np.float64) \
            + out["reward_s"].to_numpy(dtype=np.float64)
        out["other_s"] = np.maximum(out[S.TOTAL_S].to_numpy(dtype=np.float64) - parts, 0.0)
    else:
        # the slowest generation of each task carries the split and the server's state
        if len(srow):
            order = srow.assign(_g=srow["generate_s"].fillna(-1.0)) \
                .sort_values("_g", ascending=False, kind="stable")
            key = order[~order.index.get_level_values(0).duplicated()]
            key = key.set_index(key.index.get_level_values(0)).drop(columns="_g")
            key[S.SESSION_ID] = order.index.get_level_values(1)[
                ~order.index.get_level_values(0).duplicated()]
        else:
            key = pd.DataFrame(columns=[*srow.columns, S.SESSION_ID])
        key = key.reindex(pd.Index(ids, name=S.TASK_ID))
        out = key.drop(columns=[S.START_TS, S.END_TS, S.STATUS, S.TOTAL_S])
        out["session_s"] = out.pop("generate_s")
        out[S.STATUS] = tix[S.STATUS].to_numpy() if S.STATUS in tix.columns else pd.NA
        out[S.TOTAL_S] = task_col(S.TOTAL_S)
        out[S.QUEUE_S] = np.nan_to_num(task_col(S.QUEUE_S), nan=0.0)
        gen = task_col("generate_s")
        out["generate_s"] = np.where(np.isnan(gen), out["session_s"].to_numpy(dtype=float),
                                     gen)
        tph = sphase.groupby(level=0).sum() if len(sphase) else None
        for col in ("tool_s", "reward_s"):
            if tph is not None:
                out[col] = tph[col].reindex(out.index).fillna(0.0).to_numpy()
            else:
                out[col] = np.nan_to_num(task_col(col), nan=0.0)
        parts = (out[S.QUEUE_S].to_numpy(dtype=np.float64)
                 + np.nan_to_num(out["generate_s"].to_numpy(dtype=np.float64))
                 + out["tool_s"].to_numpy(dtype=np.float64)
                 + out["reward_s"].to_numpy(dtype=np.float64))
        out["other_s"] = np.maximum(out[S.TOTAL_S].to_numpy(dtype=np.float64) - parts, 0.0)
        out["state_samples"] = out["state_samples"].fillna(0)
        out["scrapes_failed"] = out["scrapes_failed"].fillna(0)
    session_s = out["session_s"].to_numpy(dtype=np.float64)
    ttft = out[S.TTFT_S].to_numpy(dtype=np.float64)
    sdec = out["server_decode_s"].to_numpy(dtype=np.float64)
    out["decode_s"] = np.where(~np.isnan(sdec), sdec, session_s - ttft)
    out["state_samples"] = out["state_samples"].astype("int64")
    out["scrapes_failed"] = out["scrapes_failed"].astype("int64")
    scraped = metrics is not None and not metrics.empty
    verdicts = [_verdict(r, scraped) for _, r in out.iterrows()]
    out["cause"] = [c for c, _ in verdicts]
    out["verdict"] = [v for _, v in verdicts]
    out = out[list(WHY_COLUMNS)]
    return out.astype({S.SESSION_ID: "Int64"})
