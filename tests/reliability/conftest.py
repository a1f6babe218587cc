"""Shared helpers of the reliability suite: sizes, the task ledger check, the results record.

Sizes: the CI sizes keep the whole suite within a few minutes on 2 cores; ``ROLLOUT_KIT_FULL=1``
(``scripts/reliability --full``) runs the sizes the issue names.

Every scenario calls :func:`check_ledger`: each submitted task id has exactly one result with a
terminal status, every non-accepted result carries a reason, and the trace has exactly the same
ids with the same statuses. Its numbers go to :func:`record` (one JSON line per scenario) so
``scripts/reliability`` can render the tables of ``docs/reliability-results.md`` from an
actual run.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from rollout_kit import RetryPolicy, RolloutResult, Timeouts
from rollout_kit.engines import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine
from rollout_kit.sim import ByteTokenizer
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import schema

__all__ = ["FULL", "TOK", "Ledger", "check_ledger", "make_engine", "pick", "record"]

FULL = os.environ.get("ROLLOUT_KIT_FULL", "").strip().lower() in {"1", "true", "yes"}
TOK = ByteTokenizer()
FAST_RETRY = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.1)
FAST_TIMEOUTS = Timeouts(request=5.0, total=20.0, setup=5.0, health=1.0)
RECORD_ENV = "ROLLOUT_KIT_RELIABILITY_JSON"


def pick(ci: Any, full: Any) -> Any:
    """``full`` under ``ROLLOUT_KIT_FULL=1``, else ``ci``."""
    return full if FULL else ci


def make_engine(flavour: str, addresses: Any, **config: Any) -> RemoteInfEngine:
    """An engine of ``flavour`` with fast retries/probes unless overridden."""
    config.setdefault("retry", FAST_RETRY)
    config.setdefault("timeouts", FAST_TIMEOUTS)
    cls = RemoteSGLangEngine if flavour == "sglang" else RemotevLLMEngine
    return cls(addresses, config=fast_engine_config(**config), name=flavour)


class Ledger:
    """What :func:`check_ledger` found: statuses and reasons per task."""

    def __init__(self, statuses: Counter[str], reasons: Counter[str], lost: int) -> None:
        self.statuses = statuses
        self.reasons = reasons
        self.lost = lost

    def __repr__(self) -> str:
        return f"Ledger(statuses={dict(self.statuses)}, lost={self.lost})"


def check_ledger(submitted: Sequence[int], results: Iterable[RolloutResult],
                 tasks: pd.DataFrame) -> Ledger:
    """Assert every submitted id reached exactly one terminal status and results == traces.

    Args:
        submitted: the ids ``submit``/``rollout_batch`` handed out.
        results: every result handed back for them.
        tasks: the tasks DataFrame (``controller.traces()`` or a loaded trace).

    Returns:
        The status and reason counts (``lost`` is always 0 when this returns).
    """
    results = list(results)
    ids = [r.task_id for r in results]
    counts = Counter(ids)
    dup = sorted(t for t, c in counts.items() if c > 1)
    assert not dup, f"task ids with more than one result: {dup[:10]}"
    missing = sorted(set(submitted) - set(ids))
    extra = sorted(set(ids) - set(submitted))
    assert not missing, f"{len(missing)} submitted task(s) have no result: {missing[:10]}"
    assert not extra, f"results for ids never submitted: {extra[:10]}"
    assert len(set(submitted)) == len(submitted), "submit handed out an id twice"
    reasons: Counter[str] = Counter()
    for r in results:
        assert r.status in schema.TERMINAL_STATUSES, (r.task_id, r.status)
        if r.status != "accepted":
            assert r.reason, f"task {r.task_id} is {r.status} without a reason"
            reasons[f"{r.status}:{r.reason}"] += 1
        if r.status == "failed":
            assert r.error is not None, f"failed task {r.task_id} has no error"
    assert tasks.index.is_unique, "the trace has a task id twice"
    assert sorted(tasks.index) == sorted(submitted), "trace ids differ from submitted ids"
    by_id = {r.task_id: r.status for r in results}
    trace_status = tasks[schema.STATUS].to_dict()
    differ = [t for t in submitted if trace_status[t] != by_id[t]]
    assert not differ, f"results and trace disagree on {differ[:10]}"
    for t, r in zip(tasks.index, tasks[schema.REASON], strict=True):
        if by_id[t] != "accepted":
            assert isinstance(r, str) and r, f"trace of task {t} has no reason"
    return Ledger(Counter(r.status for r in results), reasons, lost=0)


def record(scenario: str, *, load: str, faults: str, ledger: Ledger, wall_s: float,
           **extra: Any) -> None:
    """Append one row of the reliability table (JSON line) to ``$ROLLOUT_KIT_RELIABILITY_JSON``.

    Without that variable the row goes to the pytest temp folder's ``reliability.jsonl``.
    """
    path = Path(os.environ.get(RECORD_ENV) or _default_record_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"scenario": scenario, "load": load, "faults": faults,
           "submitted": sum(ledger.statuses.values()),
           "statuses": dict(sorted(ledger.statuses.items())),
           "reasons": dict(sorted(ledger.reasons.items())), "lost": ledger.lost,
           "wall_s": round(wall_s, 2), "full": FULL, "time": time.time(), **extra}
    with path.open("ab") as fh:
        fh.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")


_record_dir: list[Path] = []


def _default_record_path() -> Path:
    base = _record_dir[0] if _record_dir else Path(os.environ.get("TMPDIR", "/tmp"))
    return base / "reliability.jsonl"


@pytest.fixture(scope="session", autouse=True)
def _record_location(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    _record_dir.append(tmp_path_factory.getbasetemp())
    yield
    _record_dir.clear()

