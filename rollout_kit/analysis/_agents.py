"""Per-turn views of agent rollouts: the turns frame (``turns``), retokenization drift per group
(``drift_table``), the wait for a GRPO group's last conversation (``group_tail``) and where
the slowest conversations spent their time (``slowest_split``).

Input is the sessions frame of an agent rollout: :class:`~rollout_kit.agents.AgentClient`
makes each chat call one session annotated with its ``conversation``, ``turn``,
``parent_turn``, ``tool_calls``, ``drift_at``, ``token_source``, ``token_mode`` (and
``template``, ``reward`` where given), and runs each tool as a ``tool.<name>`` phase of the
session of the turn that asked for it. Sessions without a ``turn`` (not a chat call of an
agent) are left out of every view here.

Times are on the trace clock (seconds, like ``start_ts`` / ``end_ts`` of the frames), so
they line up with the timeline of :mod:`rollout_kit.plotting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .._errors import ConfigError, TraceSchemaError
from ..tracing import schema as S
from ._common import floats, require_columns

CONVERSATION = "conversation"
TURN = "turn"
PARENT_TURN = "parent_turn"
TOOL_CALLS = "tool_calls"
DRIFT_AT = "drift_at"
TOKEN_SOURCE = "token_source"
TOKEN_MODE = "token_mode"
TEMPLATE = "template"
REWARD = "reward"
CACHED_TOKENS = "cached_tokens"
GENERATE_S = S.phase_column("generate")
REWARD_S = S.phase_column("reward")
TOOL_S = "tool_s"
#: the prefix of the phases a tool runs as (``AgentClient.tool(name)`` → ``tool.<name>``)
TOOL_PREFIX = "tool."
#: the server's own numbers, present after ``rollout_kit.otel.join_server_spans``
SERVER_QUEUE_S = "server_queue_s"
SERVER_PREFILL_S = "server_prefill_s"
SERVER_DECODE_S = "server_decode_s"

#: columns of :func:`turns` (index: task_id, conversation, turn)
TURN_COLUMNS = (S.SESSION_ID, PARENT_TURN, S.START_TS, S.END_TS, S.PROMPT_TOKENS,
                S.COMPLETION_TOKENS, CACHED_TOKENS, S.TTFT_S, GENERATE_S, TOOL_CALLS, TOOL_S,
                DRIFT_AT, TOKEN_SOURCE, TOKEN_MODE, TEMPLATE, S.STATUS, REWARD)
#: columns of :func:`group_tail` (index: task_id)
TAIL_COLUMNS = ("n", "ends", "first_end", "last_end", "tail_s", "slowest")
#: columns of :func:`slowest_split` (index: task_id, conversation)
SPLIT_COLUMNS = ("turns", "ttft_known", "wall_s", "queue_s", "prefill_s", "decode_s",
                 "tool_s", "reward_s", "other_s")

_F64 = np.ndarray[Any, np.dtype[np.float64]]
_INTS = (S.PROMPT_TOKENS, S.COMPLETION_TOKENS, CACHED_TOKENS, TOOL_CALLS, PARENT_TURN)
_STRINGS = (TOKEN_SOURCE, TOKEN_MODE, TEMPLATE, S.STATUS)


def _agent_rows(sessions: object) -> pd.DataFrame:
    """The chat-call sessions as a flat frame (``task_id`` and ``session_id`` columns), so that
    every view works on the same rows; a frame of no agent rollout is refused by name."""
    if not isinstance(sessions, pd.DataFrame):
        raise TraceSchemaError(
            f"sessions: expected a pandas DataFrame, got {type(sessions).__name__}")
    missing = [c for c in (CONVERSATION, TURN) if c not in sessions.columns]
    if missing:
        raise TraceSchemaError(
            f"sessions frame has no agent column(s) {missing}: not the sessions of an agent "
            "rollout (AgentWorkflow / AgentClient annotate each chat call's session with its "
            f"conversation and turn); has {list(sessions.columns)[:20]}")
    df = require_columns(sessions, (S.TASK_ID, S.SESSION_ID), "sessions")
    keep = df[TURN].notna().to_numpy(dtype=bool) & df[CONVERSATION].notna().to_numpy(dtype=bool)
    return df[keep].reset_index(drop=True)


def _ints(s: pd.Series[Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
    return pd.to_numeric(s).to_numpy(dtype=np.int64)


def _column(df: pd.DataFrame, col: str) -> _F64:
    """A float column, NaN where the frame lacks it (an optional column of the sessions)."""
    return floats(df[col]) if col in df.columns else np.full(len(df), np.nan)


def _span_keys(spans: pd.DataFrame) -> tuple[pd.DataFrame, _F64]:
    """Spans inside a session, with their durations (``end - start`` where the frame has no
    ``duration``; NaN for a span still open)."""
    sp = require_columns(spans, (S.TASK_ID, S.SESSION_ID, S.PHASE), "spans")
    sid = pd.to_numeric(sp[S.SESSION_ID], errors="coerce")
    sp = sp[sid.notna().to_numpy(dtype=bool)]
    if S.DURATION in sp.columns:
        dur = floats(sp[S.DURATION])
    else:
        sp = require_columns(sp, (S.START, S.END), "spans")
        dur = floats(sp[S.END]) - floats(sp[S.START])
    return sp, dur


def _session_index(df: pd.DataFrame) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([_ints(df[S.TASK_ID]), _ints(df[S.SESSION_ID])],
                                     names=[S.TASK_ID, S.SESSION_ID])


def _per_session(spans: pd.DataFrame, values: _F64, mask: np.ndarray[Any, np.dtype[np.bool_]],
                 rows: pd.DataFrame, how: str) -> _F64:
    """``values`` of the masked spans aggregated (``sum`` / ``max`` / ``min``) per session of
    ``rows``; NaN for a session without such a span."""
    idx = _session_index(spans[mask])
    per = pd.Series(values[mask], index=idx).groupby(level=[0, 1]).agg(how)
    return per.reindex(_session_index(rows)).to_numpy(dtype=np.float64, na_value=np.nan)


def _tool_mask(spans: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.bool_]]:
    phase = spans[S.PHASE].astype("string")
    return phase.str.startswith(TOOL_PREFIX).to_numpy(dtype=bool, na_value=False)


def _tool_seconds(rows: pd.DataFrame, spans: pd.DataFrame | None) -> _F64:
    """Tool seconds per session: the summed durations of its ``tool.*`` spans when the spans
    are given (parallel tool calls add up), else the sum of its ``tool.<name>_s`` columns
    (each the wall time of one tool's spans)."""
    if spans is not None:
        sp, dur = _span_keys(spans)
        total = _per_session(sp, np.nan_to_num(dur, nan=0.0), _tool_mask(sp), rows, "sum")
        return np.nan_to_num(total, nan=0.0)
    cols = [c for c in rows.columns if isinstance(c, str) and c.startswith(TOOL_PREFIX)
            and c.endswith("_s") and not c.endswith(S.PHASE_SESSION_SUFFIX)]
    if not cols:
        return np.zeros(len(rows))
    summed: _F64 = np.nansum(np.column_stack([floats(rows[c]) for c in cols]), axis=1)
    return summed


def _extent(rows: pd.DataFrame, spans: pd.DataFrame | None) -> tuple[_F64, _F64]:
    """Start and end of each session, widened to its spans: a tool or the reward runs as a
    phase of a turn's session after the chat call that made it has ended."""
    start, end = _column(rows, S.START_TS), _column(rows, S.END_TS)
    if spans is not None:
        sp = require_columns(spans, (S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END),
                             "spans")
        sp, _ = _span_keys(sp)
        every = np.ones(len(sp), dtype=bool)
        start = np.fmin(start, _per_session(sp, floats(sp[S.START]), every, rows, "min"))
        span_end = floats(sp[S.END])
        last = _per_session(sp, span_end, every, rows, "max")
        open_ = _per_session(sp, np.isnan(span_end).astype(np.float64), every, rows, "max")
        end = np.where(open_ > 0, np.nan, np.fmax(end, last))  # an open span: not ended
    return start, end


def turns(sessions: pd.DataFrame, spans: pd.DataFrame | None = None, *,
          discount: float | None = None) -> pd.DataFrame:
    """One row per chat call of an agent rollout.

    Args:
        sessions: the sessions frame (``ctl.sessions()``); needs ``conversation`` and
            ``turn``, the other agent columns are NA where absent.
        spans: the spans frame; when given, ``tool_s`` sums the session's ``tool.*`` span
            durations, else the session's ``tool.<name>_s`` columns.
        discount: recompute ``reward`` as the conversation's final reward (that of its last
            turn) times ``discount ** (last_turn - turn)``, to look at another discount
            without running again; ``None`` keeps the recorded (already discounted) rewards.

    Returns:
        A DataFrame indexed by (``task_id``, ``conversation``, ``turn``), sorted, with
        :data:`TURN_COLUMNS`: ``session_id``, ``parent_turn`` (-1 for a root turn),
        ``start_ts``, ``end_ts``, ``prompt_tokens``, ``completion_tokens``,
        ``cached_tokens``, ``ttft_s``, ``generate_s``, ``tool_calls``, ``tool_s``,
        ``drift_at`` (float: -1 when the parent's ids were a prefix of this prompt, else the
        first position they differ; NaN for a root turn or unknown ids), ``token_source``,
        ``token_mode``, ``template``, ``status`` and ``reward``.

    Raises:
        TraceSchemaError: the frame has no ``conversation`` / ``turn`` column (not an agent
            rollout) or lacks ``task_id`` / ``session_id``.
        ConfigError: ``discount`` is not in (0, 1].
    """
    if discount is not None and not (isinstance(discount, int | float)
                                     and not isinstance(discount, bool) and 0 < discount <= 1):
        raise ConfigError(f"discount must be in (0, 1] or None, got {discount!r}")
    rows = _agent_rows(sessions)
    index = pd.MultiIndex.from_arrays(
        [_ints(rows[S.TASK_ID]), _ints(rows[CONVERSATION]), _ints(rows[TURN])],
        names=[S.TASK_ID, CONVERSATION, TURN])
    data: dict[str, Any] = {}
    for col in TURN_COLUMNS:
        if col == S.SESSION_ID:
            data[col] = _ints(rows[col])
        elif col == TOOL_S:
            data[col] = _tool_seconds(rows, spans)
        elif col in _INTS:
            data[col] = (rows[col].astype("Int64").to_numpy() if col in rows.columns
                         else pd.Series(pd.NA, index=range(len(rows)), dtype="Int64").array)
        elif col in _STRINGS:
            data[col] = (rows[col].astype("string").array if col in rows.columns
                         else pd.Series(pd.NA, index=range(len(rows)), dtype="string").array)
        else:
            data[col] = _column(rows, col)
    out = pd.DataFrame(data, index=index).sort_index()
    if discount is not None and len(out):
        conv = pd.MultiIndex.from_arrays(  # sorted: a conversation's last row is its last turn
            [out.index.get_level_values(0), out.index.get_level_values(1)])
        is_last = ~conv.duplicated(keep="last")
        turn = out.index.get_level_values(2).to_numpy(dtype=np.float64)
        final = pd.Series(floats(out[REWARD])[is_last], index=conv[is_last]).reindex(conv)
        last = pd.Series(turn[is_last], index=conv[is_last]).reindex(conv)
        out[REWARD] = (final.to_numpy(dtype=np.float64)
                       * float(discount) ** (last.to_numpy(dtype=np.float64) - turn))
    return out


def drift_table(turns: pd.DataFrame, by: str | Sequence[str] = (S.TASK_ID,)) -> pd.DataFrame:
    """Retokenization drift per group of turns: how often a turn's prompt ids stopped
    starting with its parent's prompt + completion ids, and where.

    Args:
        turns: the :func:`turns` frame (or any frame with ``drift_at`` and the ``by`` columns
            or index levels).
        by: the column(s) to group by, e.g. ``"task_id"``, ``"template"`` or
            ``("template", "token_mode")``.

    Returns:
        A DataFrame indexed by ``by`` with columns ``turns``, ``checked`` (turns whose
        ``drift_at`` is known: not a root turn, ids returned), ``drifted`` (``drift_at >= 0``),
        ``share`` (drifted / checked; NaN when none was checked), ``first_drift_at`` and
        ``median_drift_at`` (the smallest and the median position among drifted turns, NaN
        when none drifted) and ``token_mode`` (the modes seen, comma-joined; ``""`` when the
        frame has no ``token_mode``).

    Raises:
        ConfigError: ``by`` is empty.
        TraceSchemaError: ``drift_at`` or a ``by`` column is missing.
    """
    keys = [by] if isinstance(by, str) else list(by)
    if not keys:
        raise ConfigError("by must name at least one column")
    df = require_columns(turns, (*keys, DRIFT_AT), "turns")
    d = floats(df[DRIFT_AT])
    checked = ~np.isnan(d)
    drifted = checked & (d >= 0)
    work = pd.DataFrame({f"_k{i}": df[k].to_numpy() for i, k in enumerate(keys)})
    work["_checked"] = checked.astype(np.int64)
    work["_drifted"] = drifted.astype(np.int64)
    work["_pos"] = np.where(drifted, d, np.nan)
    work["_mode"] = ([m if isinstance(m, str) else None for m in df[TOKEN_MODE]]
                     if TOKEN_MODE in df.columns else None)
    g = work.groupby([f"_k{i}" for i in range(len(keys))], dropna=False, sort=True)
    out = pd.DataFrame({"turns": g.size().astype("int64"),
                        "checked": g["_checked"].sum().astype("int64"),
                        "drifted": g["_drifted"].sum().astype("int64")})
    out["share"] = out["drifted"] / out["checked"].where(out["checked"] > 0)
    out["first_drift_at"] = g["_pos"].min()
    out["median_drift_at"] = g["_pos"].median()
    out["token_mode"] = g["_mode"].agg(
        lambda s: ",".join(sorted({m for m in s if isinstance(m, str)})))
    out.index = out.index.set_names(keys)
    return out


def group_tail(tasks: pd.DataFrame, sessions: pd.DataFrame,
               spans: pd.DataFrame | None = None) -> pd.DataFrame:
    """How long each task (a GRPO group of ``n`` conversations) waited for its last
    conversation after its first had ended, since the group's update needs them all.

    A conversation ends at the largest ``end_ts`` of its sessions, or of their spans when
    ``spans`` is given (a tool or the reward runs after the chat call's session ended); a
    conversation with an unfinished session has no end (NaN), and then neither has the group.

    Args:
        tasks: the tasks frame (``ctl.traces()``): one row per task of the result, its
            ``status`` kept when present.
        sessions: the sessions frame of the run.
        spans: the spans frame, to include the phases that run after a session's end.

    Returns:
        A DataFrame indexed by ``task_id`` (the tasks' order) with :data:`TAIL_COLUMNS`:
        ``n`` (conversations), ``ends`` (each conversation's end, by conversation number),
        ``first_end``, ``last_end``, ``tail_s`` (``last_end - first_end``; 0 for one
        conversation), ``slowest`` (the conversation that ended last), then ``status``.
        A task without agent sessions has ``n == 0`` and NA elsewhere.

    Raises:
        TraceSchemaError: a frame lacks required columns (see :func:`turns`).
    """
    tix = require_columns(tasks, (S.TASK_ID,), "tasks")
    task_ids = _ints(tix[S.TASK_ID])
    rows = _agent_rows(sessions)
    require_columns(rows, (S.END_TS,), "sessions")
    _, end = _extent(rows, spans)
    conv = pd.DataFrame({"task": _ints(rows[S.TASK_ID]), "conv": _ints(rows[CONVERSATION]),
                         "end": end, "open": np.isnan(end)})
    per = conv.groupby(["task", "conv"], sort=True).agg(end=("end", "max"), open=("open", "any"))
    per.loc[per["open"], "end"] = np.nan
    out: dict[str, list[Any]] = {c: [] for c in TAIL_COLUMNS}
    flat = per.reset_index()
    groups = {int(g["task"].iloc[0]): g.set_index("conv")["end"]
              for _, g in flat.groupby("task", sort=True)}
    for t in task_ids:
        g = groups.get(int(t))
        if g is None:
            for c, v in zip(TAIL_COLUMNS, (0, [], np.nan, np.nan, np.nan, pd.NA), strict=True):
                out[c].append(v)
            continue
        ends = g.to_numpy(dtype=np.float64)
        done = not np.isnan(ends).any()
        first, last = (float(ends.min()), float(ends.max())) if done else (np.nan, np.nan)
        out["n"].append(len(ends))
        out["ends"].append([float(e) for e in ends])
        out["first_end"].append(first)
        out["last_end"].append(last)
        out["tail_s"].append(last - first)
        out["slowest"].append(int(g.index[int(np.argmax(ends))]) if done else pd.NA)
    frame = pd.DataFrame({
        "n": np.asarray(out["n"], dtype=np.int64), "ends": out["ends"],
        "first_end": np.asarray(out["first_end"], dtype=np.float64),
        "last_end": np.asarray(out["last_end"], dtype=np.float64),
        "tail_s": np.asarray(out["tail_s"], dtype=np.float64),
        "slowest": pd.array(out["slowest"], dtype="Int64")},
        index=pd.Index(task_ids, name=S.TASK_ID))
    if S.STATUS in tix.columns:
        frame[S.STATUS] = tix[S.STATUS].astype("string").to_numpy()
    return frame


def slowest_split(sessions: pd.DataFrame, spans: pd.DataFrame | None = None,
                  k: int = 1) -> pd.DataFrame:
    """The ``k`` slowest conversations, their wall time split into where it went.

    A conversation's wall time runs from the start of its first session (chat call) to the
    end of its last session or span. What is measured and what is derived:

    - ``queue_s``: the server's queue, measured by the server (``server_queue_s`` after
      ``rollout_kit.otel.join_server_spans``); 0 without it, the queue then inside prefill.
    - ``prefill_s``: the server's ``server_prefill_s`` when joined, else derived from the
      client's measured TTFT (``ttft_s - queue``, streamed calls, ``EngineConfig(stream=
      True)``); 0 for a turn without either, its prefill then inside decode.
    - ``decode_s``: the server's ``server_decode_s`` when joined, else derived: the measured
      ``generate_s`` minus queue and prefill (so it holds the response's transfer and
      parsing too).
    - ``tool_s``: measured, the ``tool.*`` spans (the ``tool.<name>_s`` columns without
      ``spans``); ``reward_s``: measured, the ``reward`` phase.
    - ``other_s``: derived, the rest of the wall time: the agent's own code, the client's
      work around each call and the waits between turns (clipped at 0, so rounding or
      parallel tool calls never make it negative).

    Args:
        sessions: the sessions frame (with the server's columns when joined).
        spans: the spans frame; recommended, since tools and the reward run after a turn's
            session has ended and only the spans place them in time.
        k: how many conversations.

    Returns:
        A DataFrame indexed by (``task_id``, ``conversation``), slowest first, with
        :data:`SPLIT_COLUMNS`: ``turns``, ``ttft_known`` (turns whose prefill was split off),
        ``wall_s``, ``queue_s``, ``prefill_s``, ``decode_s``, ``tool_s``, ``reward_s`` and
        ``other_s``; the parts add up to ``wall_s`` unless ``other_s`` was clipped.

    Raises:
        ConfigError: ``k`` is not an int >= 1.
        TraceSchemaError: a frame lacks required columns (see :func:`turns`).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be an int >= 1, got {k!r}")
    rows = _agent_rows(sessions)
    require_columns(rows, (S.START_TS, S.END_TS), "sessions")
    start, end = _extent(rows, spans)
    gen = np.nan_to_num(_column(rows, GENERATE_S), nan=0.0)
    queue = np.nan_to_num(_column(rows, SERVER_QUEUE_S), nan=0.0)
    ttft = _column(rows, S.TTFT_S)
    server_prefill = _column(rows, SERVER_PREFILL_S)
    known = ~np.isnan(server_prefill) | ~np.isnan(ttft)
    prefill = np.where(~np.isnan(server_prefill), server_prefill,
                       np.where(np.isnan(ttft), 0.0, np.maximum(ttft - queue, 0.0)))
    server_decode = _column(rows, SERVER_DECODE_S)
    decode = np.where(~np.isnan(server_decode), server_decode,
                      np.maximum(gen - queue - prefill, 0.0))
    if spans is not None:
        sp, dur = _span_keys(spans)
        is_reward = (sp[S.PHASE].astype("string") == "reward").to_numpy(dtype=bool,
                                                                         na_value=False)
        reward = np.nan_to_num(_per_session(sp, np.nan_to_num(dur, nan=0.0), is_reward, rows,
                                            "sum"), nan=0.0)
    else:
        reward = np.nan_to_num(_column(rows, REWARD_S), nan=0.0)
    parts = pd.DataFrame({
        S.TASK_ID: _ints(rows[S.TASK_ID]), CONVERSATION: _ints(rows[CONVERSATION]),
        "turns": 1, "ttft_known": known.astype(np.int64), "start": start, "end": end,
        "queue_s": queue, "prefill_s": prefill, "decode_s": decode,
        "tool_s": _tool_seconds(rows, spans), "reward_s": reward})
    g = parts.groupby([S.TASK_ID, CONVERSATION], sort=True)
    out = g[["turns", "ttft_known", "queue_s", "prefill_s", "decode_s", "tool_s",
             "reward_s"]].sum()
    ended = g["end"].count() == g.size()
    wall = (g["end"].max() - g["start"].min()).where(ended)
    out.insert(2, "wall_s", wall)  # NaN for a conversation not ended
    busy = out[["queue_s", "prefill_s", "decode_s", "tool_s", "reward_s"]].sum(axis=1)
    out["other_s"] = (out["wall_s"] - busy).clip(lower=0.0)
    out = out.astype({"turns": "int64", "ttft_known": "int64"})[list(SPLIT_COLUMNS)]
    order = np.argsort(-floats(out["wall_s"]), kind="stable")  # NaN (not ended) last
    return out.iloc[order[:k]]
