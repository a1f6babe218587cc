"""Scenario 2: every fault kind of the simulator at 5 % and 50 %: right retry decisions.

Each run streams ``n`` single-sample tasks through a controller whose engine retries at most
``MAX_RETRIES`` times. Retryable faults are retried until they succeed or the budget is spent;
a failed task carries the server, the status (for HTTP errors) and the error class of the
fault; a 4xx is never retried. ``Retry-After`` on 429/503 is honoured.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from rollout_kit import (
    EngineBadRequestError,
    EngineConnectionError,
    EngineError,
    EngineOverloadedError,
    EngineResponseError,
    EngineServerError,
    EngineStatusError,
    EngineTimeoutError,
    ExecutorConfig,
    GenerationConfig,
    RetryPolicy,
    RolloutController,
    SingleTurnWorkflow,
    Timeouts,
)
from rollout_kit.sim import ApiName, FaultPlan, serve

from .conftest import TOK, check_ledger, make_engine, pick, record

pytestmark = pytest.mark.timeout(60)

MAX_RETRIES = 3
RETRY_AFTER_S = 0.2
#: The request timeout of the ``hang`` case: the fault it turns into an error.
HANG_TIMEOUT_S = 0.5
#: Every other kind fails by itself; its timeout only bounds the test. It must never fire
#: because the machine is slow: a busy 2-core machine can take seconds per request, and a
#: timeout would then pass for a fault of the wrong class (``EngineTimeoutError``).
NO_TIMEOUT_S = 60.0

# name -> (FaultPlan settings at rate r, expected error class, expected status or None)
FAULTS: dict[str, tuple[Any, type[EngineError], int | None]] = {
    "500": (lambda r: {"error_rate": r, "error_statuses": (500,)}, EngineServerError, 500),
    "502": (lambda r: {"error_rate": r, "error_statuses": (502,)}, EngineServerError, 502),
    "503": (lambda r: {"error_rate": r, "error_statuses": (503,),
                       "retry_after_s": RETRY_AFTER_S}, EngineOverloadedError, 503),
    "429+Retry-After": (lambda r: {"error_rate": r, "error_statuses": (429,),
                                   "retry_after_s": RETRY_AFTER_S},
                        EngineOverloadedError, 429),
    "hang": (lambda r: {"hang_rate": r}, EngineTimeoutError, None),
    "reset mid-stream": (lambda r: {"reset_rate": r}, EngineConnectionError, None),
    "malformed JSON": (lambda r: {"malformed_rate": r}, EngineResponseError, None),
    "truncated SSE": (lambda r: {"truncate_rate": r}, EngineResponseError, None),
}


def reward(prompt: str, completion: str, prompt_ids: list[int],
           completion_ids: list[int], **data: Any) -> float:
    return 1.0


def _cases() -> list[Any]:
    cases = []
    for name in FAULTS:
        for rate, flavour in ((0.05, "vllm"), (0.5, "sglang")):
            cases.append(pytest.param(name, rate, flavour, id=f"{name}-{rate:g}-{flavour}"))
            if pick(False, True):  # full runs: both flavours at both rates
                other = "sglang" if flavour == "vllm" else "vllm"
                cases.append(pytest.param(name, rate, other, id=f"{name}-{rate:g}-{other}"))
    return cases


@pytest.mark.parametrize(("kind", "rate", "flavour"), _cases())
async def test_fault_kind(kind: str, rate: float, flavour: ApiName) -> None:
    n_tasks = pick(60, 500)
    settings, err_cls, status = FAULTS[kind]
    plan = FaultPlan(seed=7, **settings(rate))
    retry = RetryPolicy(max_retries=MAX_RETRIES, initial_delay=0.01, max_delay=0.5, jitter=0.1)
    request_timeout = HANG_TIMEOUT_S if kind == "hang" else NO_TIMEOUT_S
    timeouts = Timeouts(request=request_timeout,
                        total=(MAX_RETRIES + 1) * (request_timeout + 1.0) + 5.0,
                        setup=5.0, health=1.0)
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=8), tokenizer=TOK)
    t0 = time.perf_counter()
    async with serve(flavour, 2, time_scale=0.01, faults=plan) as cluster, \
            make_engine(flavour, cluster.addresses, stream=True, retry=retry,
                        timeouts=timeouts) as engine, \
            RolloutController(engine,
                              executor_config=ExecutorConfig(max_concurrent_rollouts=32)) as ctl:
        results = await ctl.rollout_batch_async(
            [{"prompt": f"q{i}"} for i in range(n_tasks)], wf, timeout=45)
        wall = time.perf_counter() - t0
        ledger = check_ledger([r.task_id for r in results], results, ctl.traces())
        sessions = ctl.sessions().reset_index().set_index("task_id")
        tasks = ctl.traces()
    servers = set(cluster.addresses)
    assert set(ledger.statuses) <= {"accepted", "failed"}, ledger
    for r in results:
        row = sessions.loc[r.task_id]
        retries = int(str(row["retries"]))
        if r.status == "accepted":
            assert r.trajectory["stop_reasons"] == ["length"] or \
                r.trajectory["stop_reasons"] == ["stop"]
            if status in (429, 503) and retries:  # Retry-After honoured on every retry
                assert row["generate_s"] >= RETRY_AFTER_S * retries * 0.95, (retries, row)
            continue
        err = r.error
        assert isinstance(err, err_cls), f"task {r.task_id}: {type(err).__name__}: {err}"
        assert err.server in servers, err
        assert retries == MAX_RETRIES, f"task {r.task_id} gave up after {retries} retries"
        assert err.server in str(tasks.loc[r.task_id, "error"])
        if status is not None:
            assert isinstance(err, EngineStatusError) and err.status == status
            assert f"HTTP {status}" in str(err)
            assert row["http_status"] == status
            if status in (429, 503):
                assert err.retry_after == pytest.approx(RETRY_AFTER_S)
    retried = int((sessions["retries"] > 0).sum())
    if rate >= 0.5:
        assert retried > 0, "a 50 % fault rate caused no retry at all"
        assert ledger.statuses["accepted"] > 0
    if kind == "hang":
        # every failure costs MAX_RETRIES + 1 attempts, each ended by the request timeout
        for r in results:
            if r.status == "failed":
                spent = float(sessions.loc[r.task_id, "generate_s"])
                assert spent >= (MAX_RETRIES + 1) * HANG_TIMEOUT_S * 0.95, (r.task_id, spent)
    record(f"2. fault {kind} at {rate:.0%} ({flavour}, streamed)",
           load=f"{n_tasks} tasks, 2 servers, concurrency 32",
           faults=f"{kind} on {rate:.0%} of requests, max_retries={MAX_RETRIES}",
           ledger=ledger, wall_s=wall, retried_sessions=retried)


async def test_bad_request_is_never_retried() -> None:
    """A 4xx (over-long request, vLLM 0.10.2 policy) fails at once with its status."""
    n_tasks = 10
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=100), tokenizer=TOK)
    t0 = time.perf_counter()
    async with serve("vllm", 1, time_scale=0.01, context_length=64,
                     max_tokens_policy="reject") as cluster, \
            make_engine("vllm", cluster.addresses) as engine, \
            RolloutController(engine) as ctl:
        results = await ctl.rollout_batch_async(
            [{"prompt": "x" * 40 + str(i)} for i in range(n_tasks)], wf, timeout=30)
        wall = time.perf_counter() - t0
        ledger = check_ledger([r.task_id for r in results], results, ctl.traces())
        sessions = ctl.sessions()
    assert ledger.statuses == {"failed": n_tasks}
    for r in results:
        assert isinstance(r.error, EngineBadRequestError) and r.error.status == 400
        assert r.error.server == cluster.addresses[0]
    assert (sessions["retries"] == 0).all()
    assert (sessions["http_status"] == 400).all()
    record("2. HTTP 400 (not retried)", load=f"{n_tasks} tasks, 1 server",
           faults="request longer than the context (400)", ledger=ledger, wall_s=wall)
