"""A recorded run replayed as load: the same arrivals, prompts or lengths, and samples.

Yesterday's rollout against today's server settings is one call on the load runner::

    reqs = from_traces("run/traces.jsonl", prompts="lengths", time_scale=0.5)
    run = await run_load_async(ctl, reqs, LoadSpec(arrivals=Arrivals.schedule(
        r.timestamp for r in reqs)))

Each recorded **task** becomes one :class:`~.request.LoadRequest`:

* ``timestamp``: the task's arrival, seconds after the first replayed task's arrival, times
  ``time_scale`` (``0.5`` replays twice as fast); requests come sorted by it (ties by task
  id), so they fit :meth:`~rollout_kit.load.Arrivals.schedule` as they are;
* ``group``: the original task id;
* ``samples``: the task's sessions (the samples of its prompt), sent concurrently in one task,
  one traced session each; ``output_lens``: each sample's **exact** recorded completion
  tokens, in session order (``output_len`` is the longest; one sample: ``output_len`` only),
  asked for with ``ignore_eos`` (default) so the same lengths come back;
* the prompt, shared by the task's samples (as an RL task's ``n_samples`` share theirs):
  ``prompts="same"``: the recorded prompt of the task's first session (its first call), from a
  trajectory dump; ``prompts="lengths"``: seeded token ids of that prompt's recorded length,
  from the vocabulary :mod:`.synthetic` and :mod:`.traces` use (one prompt per task, so a
  prefix cache sees the same sharing as in the recorded run).

A session is replayed as one generate call: a multi-turn session (several calls) asks for its
total completion tokens after its first prompt (``"same"``) or its total prompt tokens
(``"lengths"``, the trace's per-session sums).

Two sources:

* :func:`from_traces`: this project's traces (a :class:`~rollout_kit.tracing.Traces` or trace
  files), with a trajectory dump frame for ``prompts="same"``. Tasks with no session (rejected
  or failed before generating) and sessions with no recorded completion (a failed call) are
  left out, with one :class:`SkippedTasksWarning` that counts them.
* :func:`read_areal_sessions`: AReaL's session trace (``sessions-r*.jsonl``, one
  ``SessionRecord`` a line; :func:`rollout_kit.tracing.read_areal_sessions_trace`
  reads the same file into trace frames); a task's arrival is its earliest session
  ``submit_ts`` (AReaL stamps it when a sample *starts*, so the recorded queueing delay is
  not in the schedule).
  Lengths and prompt text come from AReaL's trajectory dump (``rollout/{version}/
  {task_id}.jsonl``: ``prompt_len``, ``seqlen``, ``prompt``), else from ``output_len`` /
  ``input_len``.

Bad input raises :class:`~rollout_kit.DatasetError` (files: with the file and the
1-based line); a torn last line of an AReaL file (the writer died mid-write) is skipped with a
:class:`~rollout_kit.tracing.TornTraceWarning`, as rollout_kit's own trace reader does.
"""

from __future__ import annotations

import glob
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..._errors import ConfigError, TraceSchemaError, truncate
from ...tracing import AREAL_STATUSES, Traces, load_traces
from ...tracing import schema as S
from .._tokenize import TextTokenizer
from .common import (
    SPECIAL_IDS,
    VOCAB_SIZE,
    allowed_ids,
    as_int,
    check_length,
    check_time_scale,
    fail,
    jsonl_objects,
    positive,
)
from .request import LoadRequest

RecordedPrompts = Literal["same", "lengths"]

StrPath = str | os.PathLike[str]

_U64 = 0xFFFFFFFFFFFFFFFF


class SkippedTasksWarning(UserWarning):
    """Recorded tasks (or sessions) were left out of a replay: nothing to replay in them."""


# -- shared ------------------------------------------------------------------------------
class _Prompts:
    """Seeded token-id prompts of recorded lengths, one per task (the ``"lengths"`` mode)."""

    def __init__(self, seed: int, tokenizer: TextTokenizer | str | Path | object | None,
                 vocab_size: int, special_ids: Sequence[int]) -> None:
        if as_int(seed) is None or isinstance(seed, float) or seed < 0:
            raise fail(f"seed must be an int >= 0, got {seed!r}")
        self.seed = int(seed) & 0xFFFFFFFF
        self.allowed, _ = allowed_ids(tokenizer, vocab_size, special_ids)

    def ids(self, task_id: int, length: int) -> tuple[int, ...]:
        r = np.random.default_rng([self.seed, 0x2EC0, task_id & _U64])
        return tuple(self.allowed[r.integers(0, len(self.allowed), size=length)].tolist())


def _check_prompts(prompts: object) -> None:
    if prompts not in ("same", "lengths"):
        raise fail(f"prompts must be 'same' (the recorded prompts) or 'lengths' (synthetic "
                   f"prompts of the recorded lengths), got {prompts!r}")


def _statuses(statuses: str | Sequence[str] | None, known: Sequence[str]) -> set[str] | None:
    if statuses is None:
        return None
    wanted = {statuses} if isinstance(statuses, str) else set(statuses)
    bad = sorted(str(s) for s in wanted if s not in known)
    if bad or not wanted:
        raise fail(f"statuses must be some of {', '.join(known)}; got {statuses!r}")
    return wanted


def _request(task_id: int, ts: float, lens: Sequence[int], *, ids: tuple[int, ...] | None,
             text: str | None, prompt_len: int | None, ignore_eos: bool) -> LoadRequest:
    n = len(lens)
    return LoadRequest(prompt=text if ids is None else None, prompt_ids=ids,
                       prompt_len=prompt_len, output_len=max(lens),
                       output_lens=tuple(lens) if n > 1 else None, samples=n,
                       ignore_eos=ignore_eos, timestamp=ts, group=task_id)


# -- this project's traces ---------------------------------------------------------------
def _traces_of(traces: Traces | StrPath | Sequence[StrPath]) -> Traces:
    if isinstance(traces, Traces):
        return traces
    try:
        return load_traces(traces)
    except (ConfigError, TraceSchemaError) as exc:
        raise fail(str(exc)) from None


def _ints(frame: pd.DataFrame, column: str, what: str) -> np.ndarray:
    """A count column as int64, 0 where missing."""
    if column not in frame.columns:
        raise fail(f"the traces' {what} frame has no {column!r} column")
    values = pd.to_numeric(frame[column], errors="coerce")
    return np.asarray(values.fillna(0), dtype=np.int64)


def _dump_prompts(dump: pd.DataFrame) -> dict[tuple[int, int], tuple[Any, Any]]:
    """``(task_id, session_id) -> (prompt_ids, prompt_text)`` of each session's first call."""
    if not isinstance(dump, pd.DataFrame):
        raise fail(f"dump must be a DataFrame (a trajectory dump), got {type(dump).__name__}")
    if dump.index.nlevels != 3 or "prompt_ids" not in dump.columns:
        raise fail("dump must be indexed by (task_id, session_id, call) with a 'prompt_ids' "
                   f"column (and 'prompt_text'); got index {list(dump.index.names)} and "
                   f"columns {truncate(list(dump.columns), 80)}")
    first = dump.sort_index(level=[0, 1, 2])
    keys = first.index.to_frame(index=False)
    first = first[~keys.iloc[:, :2].duplicated().to_numpy()]
    texts = (first["prompt_text"] if "prompt_text" in first.columns
             else pd.Series([None] * len(first), index=first.index, dtype=object))
    out: dict[tuple[int, int], tuple[Any, Any]] = {}
    for (tid, sid, _), ids, text in zip(first.index, first["prompt_ids"], texts, strict=True):
        if pd.isna(tid) or pd.isna(sid):
            continue  # a call made outside a session
        out[int(tid), int(sid)] = (ids, text)
    return out


def _dump_prompt(found: tuple[Any, Any] | None, tid: int, sid: int
                 ) -> tuple[tuple[int, ...] | None, str | None]:
    where = f"dump: task {tid} session {sid}"
    if found is None:
        raise fail(f"{where} (the task's first sample) has no call in the dump; is it the "
                   "dump of this run?")
    ids, text = found
    if ids is not None and not (isinstance(ids, float) and math.isnan(ids)):
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise fail(f"{where}: prompt_ids must be a list of ints, got {truncate(ids, 40)}")
        if arr.size:
            return tuple(arr.tolist()), None
    if isinstance(text, str) and text:
        return None, text
    raise fail(f"{where}: the dump holds neither prompt_ids nor prompt_text (a text-free "
               "dump of a text prompt); use prompts='lengths'")


def from_traces(traces: Traces | StrPath | Sequence[StrPath], *,
                dump: pd.DataFrame | None = None, time_scale: float = 1.0,
                prompts: RecordedPrompts = "same",
                statuses: str | Sequence[str] | None = None, num: int | None = None,
                ignore_eos: bool = True, seed: int = 0, vocab_size: int = VOCAB_SIZE,
                special_ids: Sequence[int] = SPECIAL_IDS,
                tokenizer: TextTokenizer | str | Path | object | None = None,
                ) -> list[LoadRequest]:
    """A recorded run of this project as load: one request per task, at its arrival.

    Args:
        traces: a :class:`~rollout_kit.tracing.Traces` (``controller.tracer.frames()``), or
            trace files (a path, directory, glob or list, as
            :func:`~rollout_kit.tracing.load_traces` takes).
        dump: for ``prompts="same"``: the trajectory dump as a DataFrame indexed by
            ``(task_id, session_id, call)`` with ``prompt_ids`` (lists of ints) and
            ``prompt_text`` (str or None; used when a call has no ids).
        time_scale: multiply the arrival offsets (``submit_ts`` after the first replayed
            task's) by this.
        prompts: ``"same"`` (the recorded prompts, from ``dump``) or ``"lengths"``
            (seeded token ids of the recorded prompt lengths).
        statuses: replay only tasks that ended with these statuses (e.g. ``"accepted"``).
        num: replay at most the first ``num`` tasks (a recording is not oversampled).
        ignore_eos: ask for exactly the recorded output lengths (``False``: they are the
            ``max_new_tokens``, the model may stop sooner).
        seed, vocab_size, special_ids, tokenizer: the vocabulary and seed of the
            ``"lengths"`` prompts (see :mod:`.synthetic`).

    Returns:
        The requests, sorted by ``timestamp`` (ties by task id); see the module docstring.

    Warns:
        SkippedTasksWarning: tasks without a session or sessions without a recorded
            completion were left out (their counts).

    Raises:
        DatasetError: ``prompts="same"`` without a dump, a dump without the replayed
            sessions' prompts, unreadable trace files, a bad option, nothing to replay.
    """
    time_scale = check_time_scale(time_scale)
    _check_prompts(prompts)
    if prompts == "same" and dump is None:
        raise fail("prompts='same' replays the recorded prompts, which the traces do not "
                   "hold: pass dump= (the trajectory dump, indexed by (task_id, session_id, "
                   "call) with prompt_ids / prompt_text) or use prompts='lengths'")
    limit = positive(num, "num") if num is not None else None
    wanted = _statuses(statuses, S.STATUSES)
    by_session = _dump_prompts(dump) if prompts == "same" and dump is not None else {}
    synth = _Prompts(seed, tokenizer, vocab_size, special_ids) if prompts == "lengths" else None
    tr = _traces_of(traces)

    tasks = tr.tasks
    if S.SUBMIT_TS not in tasks.columns:
        raise fail(f"the traces' tasks frame has no {S.SUBMIT_TS!r} column")
    if wanted is not None:
        tasks = tasks[tasks[S.STATUS].isin(sorted(wanted))]
    submit = np.asarray(pd.to_numeric(tasks[S.SUBMIT_TS], errors="coerce"), dtype=float)
    task_ids = np.asarray(tasks.index, dtype=np.int64)
    timed = ~np.isnan(submit)
    order = np.lexsort((task_ids[timed], submit[timed]))
    task_ids, submit = task_ids[timed][order], submit[timed][order]
    untimed = int((~timed).sum())

    sessions = tr.sessions.sort_index()
    s_task = np.asarray(sessions.index.get_level_values(0), dtype=np.int64)
    s_id = np.asarray(sessions.index.get_level_values(1), dtype=np.int64)
    p_tok = _ints(sessions, S.PROMPT_TOKENS, "sessions")
    c_tok = _ints(sessions, S.COMPLETION_TOKENS, "sessions")
    lo = np.searchsorted(s_task, task_ids, "left")
    hi = np.searchsorted(s_task, task_ids, "right")

    out: list[LoadRequest] = []
    no_sessions = no_completion = dropped_sessions = 0
    t0 = math.nan
    for k in range(len(task_ids)):
        if limit is not None and len(out) >= limit:
            break
        a, b = int(lo[k]), int(hi[k])
        if a == b:
            no_sessions += 1
            continue
        rows = np.arange(a, b)
        rows = rows[c_tok[a:b] >= 1] if prompts == "same" else rows[
            (c_tok[a:b] >= 1) & (p_tok[a:b] >= 1)]
        dropped = (b - a) - len(rows)
        if not len(rows):
            no_completion += 1
            continue
        dropped_sessions += dropped
        tid, first = int(task_ids[k]), int(rows[0])
        ts = float(submit[k])
        if math.isnan(t0):
            t0 = ts
        lens = c_tok[rows].tolist()
        plen = int(p_tok[first]) if p_tok[first] >= 1 else None
        ids: tuple[int, ...] | None
        text: str | None
        if synth is not None:  # "lengths": every kept session has its prompt length
            ids, text = synth.ids(tid, int(p_tok[first])), None
        else:
            sid = int(s_id[first])
            ids, text = _dump_prompt(by_session.get((tid, sid)), tid, sid)
            if ids is not None:
                plen = len(ids)
        out.append(_request(tid, (ts - t0) * time_scale, lens, ids=ids, text=text,
                            prompt_len=plen, ignore_eos=ignore_eos))
    parts = [f"{count} {what}" for count, what in (
        (no_sessions, "task(s) without a session (rejected or failed before generating)"),
        (no_completion, "task(s) whose sessions recorded no completion tokens (failed "
                        "calls)"),
        (untimed, "task(s) without a submit time"),
        (dropped_sessions, "session(s) with no completion tokens, of tasks replayed"),
    ) if count]
    if parts:
        warnings.warn(f"from_traces: left out {'; '.join(parts)}", SkippedTasksWarning,
                      stacklevel=2)
    if not out:
        raise fail("no recorded task to replay (no task with a finished session"
                   + (f" and a status in {sorted(wanted)})" if wanted else ")"))
    return out


# -- AReaL ---------------------------------------------------------------------------------
def _session_files(path: StrPath | Sequence[StrPath]) -> list[Path]:
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike | Sequence):
        raise fail(f"path must be a path, a glob or a list of them, got {path!r}")
    items = [path] if isinstance(path, str | os.PathLike) else list(path)
    out: list[Path] = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise fail(f"path must be a path, a glob or a list of them, got {path!r}")
        s = os.fspath(item)
        if any(ch in s for ch in "*?["):
            out.extend(Path(p) for p in sorted(glob.glob(s, recursive=True)))
        elif os.path.isdir(s):
            out.extend(sorted(Path(s).rglob("sessions-r*.jsonl")))
        else:
            out.append(Path(s))
    if not out:
        raise fail(f"no AReaL session files (sessions-r*.jsonl) match {path!r}")
    return out


def _number(obj: dict[str, Any], key: str, name: str, no: int) -> float:
    v = obj[key]
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        raise fail(f"{key!r} must be a number (seconds), got {truncate(v, 40)}", name, no)
    return float(v)


def _id(obj: dict[str, Any], key: str, name: str, no: int) -> int:
    v = as_int(obj[key])
    if v is None or v < 0:
        raise fail(f"{key!r} must be an int >= 0, got {truncate(obj[key], 40)}", name, no)
    return v


def _areal_files(root: StrPath) -> tuple[str, dict[int, list[Path]]]:
    """AReaL's dump layout: ``{rollout}/{version}/{task_id}.jsonl``, by task id."""
    base = Path(root).expanduser()
    if (base / "rollout").is_dir():
        base = base / "rollout"
    if not base.is_dir():
        raise fail("no such AReaL dump directory", os.fspath(root))
    by_task: dict[int, list[Path]] = {}
    for p in sorted(base.glob("*/*.jsonl")):
        if p.parent.name.lstrip("-").isdigit() and p.stem.isdigit():
            by_task.setdefault(int(p.stem), []).append(p)
    if not by_task:
        raise fail("no AReaL trajectory files ({version}/{task_id}.jsonl) in it",
                   os.fspath(base))
    return os.fspath(base), by_task


_Sample = tuple[int, int, str | None]  # (prompt_len, output_len, prompt text)


def _areal_samples(files: list[Path], task_id: int, need_text: bool) -> list[_Sample]:
    """The samples of one task in AReaL's dump, by ``sample_idx``."""
    found: dict[int, _Sample] = {}
    for path in files:
        for name, no, obj in jsonl_objects(path, torn_ok=True):
            for key in ("task_id", "sample_idx", "prompt_len", "seqlen"):
                if key not in obj:
                    raise fail(f"missing key {key!r}", name, no)
            if need_text and "prompt" not in obj:
                raise fail("missing key 'prompt' (prompts='same' replays it)", name, no)
            if _id(obj, "task_id", name, no) != task_id:
                raise fail(f"task_id {obj['task_id']} in the file of task {task_id}", name, no)
            idx = _id(obj, "sample_idx", name, no)
            plen = check_length(obj["prompt_len"], "prompt_len", name, no)
            seqlen = check_length(obj["seqlen"], "seqlen", name, no)
            olen = check_length(seqlen - plen, "seqlen - prompt_len", name, no)
            text = obj.get("prompt")
            if need_text and (not isinstance(text, str) or not text):
                raise fail(f"'prompt' must be a non-empty string, got {truncate(text, 40)}",
                           name, no)
            if idx in found:
                raise fail(f"sample_idx {idx} of task {task_id} appears twice", name, no)
            found[idx] = (plen, olen, text if isinstance(text, str) else None)
    return [found[i] for i in sorted(found)]


def read_areal_sessions(path: StrPath | Sequence[StrPath], *,
                        areal_dump: StrPath | None = None, time_scale: float = 1.0,
                        prompts: RecordedPrompts = "lengths", output_len: int | None = None,
                        input_len: int | None = None,
                        statuses: str | Sequence[str] | None = None, num: int | None = None,
                        ignore_eos: bool = True, seed: int = 0,
                        vocab_size: int = VOCAB_SIZE, special_ids: Sequence[int] = SPECIAL_IDS,
                        tokenizer: TextTokenizer | str | Path | object | None = None,
                        ) -> list[LoadRequest]:
    """An AReaL run as load: its session trace, one request per task, at its arrival.

    Args:
        path: AReaL session files (``sessions-r*.jsonl``: a file, a glob, a directory
            searched recursively, or a list of them); one ``SessionRecord`` a line with
            ``task_id``, ``session_id``, ``status`` and ``submit_ts`` (wall seconds).
        areal_dump: AReaL's trajectory dump directory (``rollout/{version}/{task_id}.jsonl``,
            or the ``rollout`` directory itself): a sample's prompt length is its
            ``prompt_len``, its output length ``seqlen − prompt_len``, its prompt ``prompt``;
            its samples match the task's sessions in order (``sample_idx`` to ``submit_ts``,
            then ``session_id``).
        time_scale: multiply the arrival offsets by this.
        prompts: ``"lengths"`` (default: seeded token ids of the recorded prompt lengths,
            exact on the server) or ``"same"`` (the dump's prompt text of the task's first
            sample, re-tokenized by the server; needs ``areal_dump``).
        output_len, input_len: the lengths of every sample of a task the dump does not hold
            (or of all of them, without a dump: then both are needed).
        statuses: replay only sessions with these statuses (of ``AREAL_STATUSES``); a task
            with none left is left out.
        num: replay at most the first ``num`` tasks.
        ignore_eos, seed, vocab_size, special_ids, tokenizer: as :func:`from_traces`.

    Returns:
        The requests, sorted by ``timestamp`` (ties by task id).

    Raises:
        DatasetError: no lengths (neither a dump nor ``output_len``), a malformed line (file
            and line number), a missing key, a task the dump lacks or holds a different
            number of samples of, a bad option, nothing to replay.
    """
    time_scale = check_time_scale(time_scale)
    _check_prompts(prompts)
    limit = positive(num, "num") if num is not None else None
    wanted = _statuses(statuses, AREAL_STATUSES)
    fallback_out = positive(output_len, "output_len") if output_len is not None else None
    fallback_in = positive(input_len, "input_len") if input_len is not None else None
    if areal_dump is None:
        if prompts == "same":
            raise fail("prompts='same' replays AReaL's prompt text, which only its trajectory "
                       "dump holds: pass areal_dump= or use prompts='lengths'")
        if fallback_out is None or fallback_in is None:
            raise fail("AReaL's session trace holds no token counts: pass areal_dump= (its "
                       "rollout/{version}/{task_id}.jsonl dump) or output_len= and input_len=")
    synth = _Prompts(seed, tokenizer, vocab_size, special_ids) if prompts == "lengths" else None
    dump_at, dump_files = _areal_files(areal_dump) if areal_dump is not None else ("", {})

    sessions: dict[int, list[tuple[float, int]]] = {}
    for file in _session_files(path):
        for name, no, obj in jsonl_objects(file, torn_ok=True):
            for key in ("task_id", "session_id", "status", "submit_ts"):
                if key not in obj:
                    raise fail(f"missing key {key!r}", name, no)
            status = obj["status"]
            if status not in AREAL_STATUSES:
                raise fail(f"'status' must be one of {', '.join(AREAL_STATUSES)}, got "
                           f"{truncate(status, 40)}", name, no)
            tid = _id(obj, "task_id", name, no)
            sid = _id(obj, "session_id", name, no)
            ts = _number(obj, "submit_ts", name, no)
            if wanted is None or status in wanted:
                sessions.setdefault(tid, []).append((ts, sid))

    arrivals = sorted((min(sess)[0], tid) for tid, sess in sessions.items())
    if limit is not None:
        arrivals = arrivals[:limit]
    if not arrivals:
        raise fail("no AReaL session to replay" + (f" with a status in {sorted(wanted)}"
                                                    if wanted else ""))
    t0 = arrivals[0][0]
    out: list[LoadRequest] = []
    for ts, tid in arrivals:
        n = len(sessions[tid])
        files = dump_files.get(tid)
        if files:
            samples = _areal_samples(files, tid, prompts == "same")
            if len(samples) != n:
                raise fail(f"task {tid}: {n} session(s) in the session trace but "
                           f"{len(samples)} sample(s) in the dump", os.fspath(files[0]))
        elif fallback_out is not None and fallback_in is not None and synth is not None:
            samples = [(fallback_in, fallback_out, None)] * n
        else:
            raise fail(f"task {tid} has no samples in the AReaL dump {dump_at}"
                       + ("" if prompts == "same" else
                          "; pass output_len= and input_len= for tasks it lacks"))
        plen, _, text = samples[0]
        lens = [olen for _, olen, _ in samples]
        if synth is not None:
            out.append(_request(tid, (ts - t0) * time_scale, lens, ids=synth.ids(tid, plen),
                                text=None, prompt_len=plen, ignore_eos=ignore_eos))
        else:
            out.append(_request(tid, (ts - t0) * time_scale, lens, ids=None, text=text,
                                prompt_len=plen, ignore_eos=ignore_eos))
    return out
