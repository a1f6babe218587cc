"""The outcome of a conversation load run: :class:`ConversationRun`, its turns and metrics.

Two frames:

* :attr:`ConversationRun.frame` — one row per conversation, the runner's
  (:mod:`._results`): ``scheduled_s`` is its arrival, ``sent_s`` its first turn's send,
  ``ttft_s`` the first turn's, ``e2el_s`` first send → last token (think times included),
  ``samples`` the turns sent, token counts summed over turns; plus ``turns`` (planned),
  ``turns_done`` and ``conversation_s`` (arrival → last answer: the user's wait, think
  times included).
* :attr:`ConversationRun.turns` — one row per turn sent, indexed by ``(task_id, turn)``
  (times in seconds from the run's start): ``request_index`` (the conversation's position
  in the dataset), ``role``, ``think_s``, ``scheduled_s`` (turn 0: the conversation's
  arrival; later: the previous answer + ``think_s``), ``sent_s``, ``queue_wait_s`` (turn 0:
  the conversation's wait for a ``max_concurrency`` slot), ``send_lag_s``, ``done_s``,
  ``status``, ``reason``, ``error`` (a failed turn's message: the server's error text),
  ``warmup``, ``prompt_tokens``, ``output_tokens``,
  ``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``; 0 when the server does not
  report it), ``cache_hit_ratio`` (cached / prompt tokens; NaN when not reported — vLLM
  without ``--enable-prompt-tokens-details`` — never a 0 that reads as "no hits"),
  ``ttft_s``, ``tpot_s``, ``e2el_s``, ``itl_s``, ``retries``, ``session_id`` (the traced
  session). Its columns are the request frame's, so :func:`~._metrics.compute_metrics` and
  the result JSON read it.

:meth:`ConversationRun.metrics` is ``compute_metrics`` over the turns (``vllm bench serve``'s
keys, each turn a request: what its multi-turn benchmark reports) plus the conversation keys:
``conversations``, ``completed_conversations``, ``failed_conversations``,
``offered_rate`` / ``achieved_rate`` (conversation arrivals per second, offered and as sent),
``conversation_throughput``, ``conversation_goodput`` (conversations whose *every* turn met
the SLOs, per second: goodput per conversation), ``{mean,median,std,p<P>}_conversation_ms``
(completion time), ``turns_per_conversation``, ``cache_hit_ratio`` (turns after the first:
cached / prompt tokens), ``median_ttft_first_turn_ms`` / ``median_ttft_later_turns_ms``.
:meth:`ConversationRun.by_turn` (:func:`turn_table`) groups the turns by index.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .._errors import ConfigError
from ._metrics import COMPLETED_STATUSES, compute_metrics, parse_goodput, percentile_key, tpot_of
from ._results import LoadRun
from ._workflow import call_times

if TYPE_CHECKING:
    from .._io import ModelResponse
    from ._datasets.conversation import Conversation

TURN_COLUMNS = (
    "request_index", "role", "think_s", "scheduled_s", "sent_s", "queue_wait_s",
    "send_lag_s", "done_s", "status", "reason", "error", "warmup", "prompt_tokens",
    "output_tokens", "cached_tokens", "cache_hit_ratio", "ttft_s", "tpot_s", "e2el_s", "itl_s",
    "retries", "session_id",
)
_MS = 1000.0


@dataclass(slots=True)
class TurnRecord:
    """What one turn did (``perf_counter()`` instants; NaN: not reached)."""

    turn: int
    role: str
    think_s: float
    due: float = math.nan
    sent: float = math.nan
    first_token: float = math.nan
    end: float = math.nan
    answered: float = math.nan
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cached_reported: bool = False  # the server reported cached tokens (else: not known)
    retries: int = 0
    itl: list[float] = field(default_factory=list)
    status: str = "pending"
    reason: str | None = None
    error: str | None = None  # the failure's message (a server's error text)
    session_id: int | None = None

    def add(self, t0: float, resp: ModelResponse) -> None:
        """File the engine's answer to the call made at ``t0`` (as ``TaskRecord.add``)."""
        ft, self.end = call_times(t0, resp)
        if not math.isnan(ft):
            self.first_token = ft
        self.prompt_tokens = resp.input_len
        self.output_tokens = resp.output_len
        self.cached_tokens = resp.cached_tokens
        self.cached_reported = resp.cached_tokens_reported
        self.retries = resp.retries
        self.itl = list(resp.itl)


@dataclass(slots=True)
class ConversationRecord:
    """The turns of one conversation's task, as far as they got."""

    turns: list[TurnRecord] = field(default_factory=list)
    num_turns: int = 0

    def begin_call(self, t0: float) -> TurnRecord:
        """A call of the current turn is sent at ``t0`` (its first one's instant is the turn's
        ``sent``): the turn files the answer."""
        turn = self.turns[-1]
        if math.isnan(turn.sent):
            turn.sent = t0
        return turn


@dataclass(slots=True, kw_only=True)
class ConversationRun:
    """A conversation load run: the runner's per-conversation run and the turns frame.

    Attributes:
        load: the runner's :class:`~._results.LoadRun` (one row per conversation).
        turns: one row per turn sent (see the module docstring).
    """

    load: LoadRun
    turns: pd.DataFrame

    @property
    def frame(self) -> pd.DataFrame:
        """One row per conversation (the runner's frame plus ``turns``, ``turns_done``,
        ``conversation_s``)."""
        return self.load.frame

    @property
    def offered_rate(self) -> float:
        """Conversation arrivals per second, as scheduled."""
        return self.load.offered_rate

    @property
    def achieved_rate(self) -> float:
        """Conversation arrivals per second, as their first turns were sent."""
        return self.load.achieved_rate

    @property
    def interrupted(self) -> bool:
        """The run was cancelled or its controller closed mid-run."""
        return self.load.interrupted

    @property
    def duration_s(self) -> float:
        """The measured window (the throughputs' denominator)."""
        return self.load.duration_s

    def metrics(self, goodput: str | Mapping[str, float] | None = None,
                percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
        """Per-turn metrics (``compute_metrics`` of :attr:`turns`) plus the conversation keys
        (see the module docstring)."""
        m = compute_metrics(self.turns, duration_s=self.load.duration_s, goodput=goodput,
                            percentiles=percentiles)
        m.update(conversation_metrics(self.frame, self.turns, duration_s=self.load.duration_s,
                                      goodput=goodput, percentiles=percentiles))
        m.update(offered_rate=self.load.offered_rate, achieved_rate=self.load.achieved_rate,
                 interrupted=self.load.interrupted, unsent=self.load.unsent)
        return m

    def by_turn(self, percentiles: Sequence[float] = (50, 99)) -> pd.DataFrame:
        """:func:`turn_table` of :attr:`turns`: TTFT and cache hits by turn index."""
        return turn_table(self.turns, percentiles=percentiles)

    def __repr__(self) -> str:
        return (f"ConversationRun(conversations={len(self.frame)}, turns={len(self.turns)}, "
                f"offered_rate={self.offered_rate:.4g}, achieved_rate={self.achieved_rate:.4g},"
                f" interrupted={self.interrupted})")


def _good_turns(turns: pd.DataFrame, slos: dict[str, float]) -> np.ndarray:
    """Per turn: completed and within every SLO."""
    status = turns["status"].astype(str).to_numpy()
    good = np.isin(status, COMPLETED_STATUSES)
    ttft = turns["ttft_s"].to_numpy(dtype=float)
    e2el = turns["e2el_s"].to_numpy(dtype=float)
    out = turns["output_tokens"].to_numpy(dtype=float)
    if "ttft" in slos:
        good &= ttft <= slos["ttft"] / _MS
    if "tpot" in slos:
        good &= np.where(out > 1, tpot_of(e2el, ttft, out), 0.0) <= slos["tpot"] / _MS
    if "e2el" in slos:
        good &= e2el <= slos["e2el"] / _MS
    return good


def _stats(name: str, values_s: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    v = values_s[np.isfinite(values_s)] * _MS
    keys = [f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms"] + [
        f"{percentile_key(p)}_{name}_ms" for p in percentiles]
    if not len(v):
        return dict.fromkeys(keys, math.nan)
    vals = [float(np.mean(v)), float(np.median(v)), float(np.std(v))] + [
        float(np.percentile(v, p)) for p in percentiles]
    return dict(zip(keys, vals, strict=True))


def conversation_metrics(frame: pd.DataFrame, turns: pd.DataFrame, *, duration_s: float,
                         goodput: str | Mapping[str, float] | None = None,
                         percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
    """The conversation keys of :meth:`ConversationRun.metrics` (measured rows only)."""
    slos = parse_goodput(goodput)
    conv = frame[~frame["warmup"].astype(bool)] if "warmup" in frame.columns else frame
    t = turns[~turns["warmup"].astype(bool)] if "warmup" in turns.columns else turns
    status = conv["status"].astype(str).to_numpy()
    planned = conv["turns"].to_numpy(dtype=np.int64)
    finished = conv["turns_done"].to_numpy(dtype=np.int64)
    complete = np.isin(status, COMPLETED_STATUSES) & (finished == planned)
    n_done = int(complete.sum())
    dur = float(duration_s)

    def per_s(x: float) -> float:
        return x / dur if dur > 0 else math.nan

    out: dict[str, Any] = {
        "conversations": len(conv),
        "completed_conversations": n_done,
        "failed_conversations": int((status == "failed").sum()),
        "conversation_throughput": per_s(n_done),
        "turns_per_conversation": float(finished[complete].mean()) if n_done else math.nan,
    }
    if slos:
        good = _good_turns(t, slos)
        task_ids = t.index.get_level_values("task_id").to_numpy()
        bad_tasks = set(task_ids[~good].tolist())
        ok = complete & ~np.isin(conv.index.to_numpy(), list(bad_tasks))
        out["conversation_goodput"] = per_s(int(ok.sum()))
    else:
        out["conversation_goodput"] = math.nan
    out.update(_stats("conversation", conv["conversation_s"].to_numpy(dtype=float)[complete],
                      percentiles))
    done = t[np.isin(t["status"].astype(str).to_numpy(), COMPLETED_STATUSES)]
    turn_no = done.index.get_level_values("turn").to_numpy()
    later = done[turn_no > 0]
    known = _reported(later)
    prompt = float(known["prompt_tokens"].sum())
    out["cache_hit_ratio"] = (float(known["cached_tokens"].sum()) / prompt if prompt > 0
                              else math.nan)  # NaN: the server reported no cached tokens
    for name, part in (("first_turn", done[turn_no == 0]), ("later_turns", later)):
        ttft = part["ttft_s"].to_numpy(dtype=float)
        ttft = ttft[np.isfinite(ttft)]
        out[f"median_ttft_{name}_ms"] = float(np.median(ttft)) * _MS if len(ttft) else math.nan
    return out


def turn_table(turns: pd.DataFrame, *, percentiles: Sequence[float] = (50, 99),
               include_warmup: bool = False) -> pd.DataFrame:
    """The turns grouped by turn index: does the prefix cache work across turns?

    One row per turn index (index ``turn``): ``turns`` (completed), ``failed``,
    ``mean_prompt_tokens``, ``mean_cached_tokens``, ``cache_hit_ratio`` (cached / prompt
    tokens of the group), ``mean_ttft_ms``, ``p<P>_ttft_ms`` (``median_ttft_ms`` for 50),
    ``median_e2el_ms``, ``mean_think_s``, ``p99_send_lag_ms``.

    Raises:
        ConfigError: a frame without the turns frame's columns.
    """
    need = ("status", "prompt_tokens", "cached_tokens", "ttft_s", "e2el_s", "think_s")
    missing = [c for c in need if c not in turns.columns]
    if missing or "turn" not in (turns.index.names or ()):
        raise ConfigError(f"turn_table needs a turns frame (ConversationRun.turns); missing: "
                          f"{', '.join(missing) or 'the turn index level'}")
    t = turns
    if not include_warmup and "warmup" in t.columns:
        t = t[~t["warmup"].astype(bool)]
    rows = []
    idx = t.index.get_level_values("turn").to_numpy()
    status = t["status"].astype(str).to_numpy()
    for k in sorted(set(idx.tolist())):
        g = t[idx == k]
        ok = np.isin(status[idx == k], COMPLETED_STATUSES)
        d = g[ok]
        known = _reported(d)
        prompt = float(known["prompt_tokens"].sum())
        ttft = d["ttft_s"].to_numpy(dtype=float)
        ttft = ttft[np.isfinite(ttft)] * _MS
        e2el = d["e2el_s"].to_numpy(dtype=float)
        e2el = e2el[np.isfinite(e2el)] * _MS
        row: dict[str, Any] = {
            "turn": k, "turns": int(ok.sum()), "failed": int((status[idx == k] == "failed").sum()),
            "mean_prompt_tokens": float(d["prompt_tokens"].mean()) if len(d) else math.nan,
            "mean_cached_tokens": (float(known["cached_tokens"].mean()) if len(known)
                                   else math.nan),
            "cache_hit_ratio": (float(known["cached_tokens"].sum()) / prompt if prompt
                                else math.nan),
            "mean_ttft_ms": float(ttft.mean()) if len(ttft) else math.nan,
        }
        for p in percentiles:
            key = "median_ttft_ms" if float(p) == 50 else f"{percentile_key(p)}_ttft_ms"
            row[key] = float(np.percentile(ttft, p)) if len(ttft) else math.nan
        row["median_e2el_ms"] = float(np.median(e2el)) if len(e2el) else math.nan
        row["mean_think_s"] = float(g["think_s"].mean()) if len(g) else math.nan
        if "send_lag_s" in g.columns:
            lag = g["send_lag_s"].to_numpy(dtype=float)
            lag = lag[np.isfinite(lag)]
            row["p99_send_lag_ms"] = float(np.percentile(lag, 99)) * _MS if len(lag) \
                else math.nan
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["turns"]).rename_axis("turn")
    return pd.DataFrame(rows).set_index("turn")


def build_conversation_run(run: LoadRun, records: Mapping[int, ConversationRecord],
                           items: Sequence[Conversation]) -> ConversationRun:
    """The :class:`ConversationRun` of the runner's run and the workflow's turn records."""
    origin = run.clock_origin
    frame = run.frame.copy()
    n_items = len(items)
    n_rows = len(frame)
    planned = np.zeros(n_rows, dtype=np.int64)
    done_turns = np.zeros(n_rows, dtype=np.int64)
    conv_s = np.full(n_rows, np.nan)
    cols: dict[str, list[Any]] = {c: [] for c in TURN_COLUMNS}
    keys: list[tuple[int, int]] = []
    sched = frame["scheduled_s"].to_numpy(dtype=float)
    qwait = frame["queue_wait_s"].to_numpy(dtype=float)
    warm = frame["warmup"].to_numpy(dtype=bool)
    req = frame["request_index"].to_numpy(dtype=np.int64)
    status = frame["status"].astype(str).to_numpy()
    for j, tid in enumerate(frame.index.to_numpy()):
        planned[j] = items[int(req[j]) % n_items].num_turns
        rec = records.get(int(tid))
        if rec is None:
            continue
        last_answer = math.nan
        for tr in rec.turns:
            if tr.status == "pending":  # the conversation ended before this turn was sent
                tr.status = "cancelled" if status[j] == "cancelled" else "failed"
            if tr.status == "accepted":
                done_turns[j] += 1
                last_answer = tr.end if math.isfinite(tr.end) else tr.answered
            scheduled = float(sched[j]) if tr.turn == 0 else tr.due - origin
            wait = qwait[j] if tr.turn == 0 else 0.0
            sent = tr.sent - origin
            first = tr.first_token - tr.sent
            e2el = tr.end - tr.sent
            ok = tr.status == "accepted"
            keys.append((int(tid), tr.turn))
            cols["request_index"].append(int(req[j]))
            cols["role"].append(tr.role)
            cols["think_s"].append(tr.think_s)
            cols["scheduled_s"].append(scheduled)
            cols["sent_s"].append(sent)
            cols["queue_wait_s"].append(wait)
            cols["send_lag_s"].append(sent - scheduled - wait)
            cols["done_s"].append((tr.answered if ok else tr.end) - origin)
            cols["status"].append(tr.status)
            cols["reason"].append(tr.reason)
            cols["error"].append(tr.error)
            cols["warmup"].append(bool(warm[j]))
            cols["prompt_tokens"].append(tr.prompt_tokens if ok else 0)
            cols["output_tokens"].append(tr.output_tokens if ok else 0)
            cols["cached_tokens"].append(tr.cached_tokens if ok else 0)
            cols["cache_hit_ratio"].append(tr.cached_tokens / tr.prompt_tokens  # NaN: not
                                           if ok and tr.prompt_tokens and tr.cached_reported
                                           else math.nan)                 # reported
            cols["ttft_s"].append(first if ok else math.nan)
            cols["tpot_s"].append(math.nan)
            cols["e2el_s"].append(e2el if ok else math.nan)
            cols["itl_s"].append(tr.itl if ok else [])
            cols["retries"].append(tr.retries)
            cols["session_id"].append(tr.session_id if tr.session_id is not None else -1)
        if done_turns[j] == planned[j] and math.isfinite(last_answer):
            conv_s[j] = last_answer - origin - sched[j]
    frame["turns"] = planned
    frame["turns_done"] = done_turns
    frame["conversation_s"] = conv_s
    index = pd.MultiIndex.from_tuples(keys, names=["task_id", "turn"]) if keys else \
        pd.MultiIndex.from_arrays([np.zeros(0, dtype=np.int64)] * 2, names=["task_id", "turn"])
    turns = pd.DataFrame({c: _column(c, v) for c, v in cols.items()}, index=index)
    turns["tpot_s"] = tpot_of(turns["e2el_s"].to_numpy(dtype=float),
                              turns["ttft_s"].to_numpy(dtype=float),
                              turns["output_tokens"].to_numpy(dtype=float))
    load = LoadRun(frame=frame, offered_rate=run.offered_rate, achieved_rate=run.achieved_rate,
                   duration_s=run.duration_s, interrupted=run.interrupted, start_s=run.start_s,
                   unsent=run.unsent, scheduled=run.scheduled, spec=run.spec,
                   clock_origin=origin)
    return ConversationRun(load=load, turns=turns)


def _reported(turns: pd.DataFrame) -> pd.DataFrame:
    """The turns whose server reported cached tokens (a frame without ``cache_hit_ratio``:
    all of them)."""
    if "cache_hit_ratio" not in turns.columns:
        return turns
    return turns[turns["cache_hit_ratio"].notna().to_numpy()]


def _column(name: str, values: list[Any]) -> Any:
    if name in ("status", "reason", "error", "role", "itl_s"):
        out = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):
            out[i] = v
        return out
    if name in ("prompt_tokens", "output_tokens", "cached_tokens", "retries", "session_id",
                "request_index"):
        return np.asarray(values, dtype=np.int64)
    if name == "warmup":
        return np.asarray(values, dtype=bool)
    return np.asarray(values, dtype=float)
