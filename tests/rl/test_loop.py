"""The RL loop over simulated servers: admission, steps, partial rollouts, faults, cancel."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from rollout_kit import (
    ConfigError,
    EngineError,
    GenerationConfig,
    SingleTurnWorkflow,
    WorkflowError,
)
from rollout_kit.rl import (
    RLConfig,
    SimulatedTrain,
    SimulatedUpdate,
    WeightsFromDisk,
    run_rl,
    run_rl_async,
    token_versions,
)

# a long tail: lognormal lengths, mean 120 tokens; 2 ms per token at 1 running sequence
LONG_TAIL = {"time_scale": 0.1, "output_length": "lognormal", "output_length_sigma": 1.0,
             "mean_output_tokens": 120, "context_length": 100_000, "itl_s": 0.02,
             "prefill_overhead_s": 0.01, "jitter_cv": 0.0}
PROMPTS = itertools.cycle(["Explain the proof.", "What is 17+25?", "Sort these numbers."])


def reward(prompt, completion, prompt_ids, completion_ids, **_):
    return float(len(completion_ids) % 2)


def workflow() -> SingleTurnWorkflow:
    return SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=2000))


def terminal(ctl) -> None:
    """Every task of the controller ended with a terminal status and none is tracked."""
    tasks = ctl.traces()
    assert set(tasks["status"]) <= {"accepted", "rejected", "failed", "cancelled"}
    assert not ctl.results.unfinished()


@pytest.mark.rollout_kit_sim(n=2, **LONG_TAIL)
async def test_synchronous_rl_never_overlaps_generation_and_training(rollout_controller,
                                                                     sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    run = await run_rl_async(ctl, PROMPTS, workflow(), RLConfig(steps=3, batch_size=6),
                             train=SimulatedTrain(fixed_s=0.02),
                             update=SimulatedUpdate(seconds=0.01))
    steps, samples = run.steps, run.step_samples
    assert list(steps.index) == [0, 1, 2] and list(steps["version"]) == [0, 1, 2]
    assert (steps["status"] == "ok").all() and (steps["samples"] == 6).all()
    assert ctl.get_version() == 3
    tasks = ctl.traces()
    assert len(tasks) == 18 and (tasks["status"] == "accepted").all()
    assert tasks["consume_ts"].notna().all()
    for step in (1, 2):  # each batch was generated after the previous update ended
        ids = samples.index[samples["step"] == step]
        assert (tasks.loc[ids, "dispatch_ts"] >= steps.loc[step - 1, "update_end_ts"]).all()
    assert (samples["staleness"] == 0).all() and not samples["partial"].any()
    assert steps["tokens"].sum() == samples["tokens"].sum() == tasks["completion_tokens"].sum()
    # times are in order within each step
    cols = ["start_ts", "batch_ready_ts", "train_start_ts", "train_end_ts",
            "update_start_ts", "update_end_ts"]
    assert (steps[cols].diff(axis=1).iloc[:, 1:] >= 0).all().all()
    terminal(ctl)


@pytest.mark.rollout_kit_sim(n=2, **LONG_TAIL)
async def test_async_rl_admits_under_the_staleness_bound_and_makes_partial_rollouts(
        rollout_controller, sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    cfg = RLConfig(steps=6, batch_size=6, max_staleness=2)
    run = await run_rl_async(ctl, PROMPTS, workflow(), cfg,
                             train=SimulatedTrain(fixed_s=0.03),
                             update=SimulatedUpdate(seconds=0.02))
    steps, samples = run.steps, run.step_samples
    tasks = ctl.traces()
    assert (steps["status"] == "ok").all() and len(samples) == 36
    # AReaL's formula: before version v+1 existed, at most (η + v + 1)·B rollouts started
    for v in steps.index:
        started = (tasks["dispatch_ts"] < steps.loc[v, "update_end_ts"]).sum()
        assert started <= (cfg.max_staleness + v + 1) * cfg.batch_size
    # generation ran during training: some batches were ready as soon as asked
    assert (samples["staleness"] > 0).any()
    partial = samples[samples["partial"]]
    assert len(partial) > 0  # an update cut them: their tokens carry two versions
    assert (partial["version_max"] > partial["version_min"]).all()
    assert tasks.loc[partial.index, "status"].eq("accepted").all()
    events = ctl.tracer.frames().events
    assert set(partial.index) <= set(events["task_id"])  # each resumed after the pause
    assert (samples["staleness"] == samples["step"] - samples["version_min"]).all()
    terminal(ctl)


@pytest.mark.rollout_kit_sim(n=1, **LONG_TAIL)
async def test_the_group_filter_rejects_and_batches_hold_accepted_results(
        rollout_controller, sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    seen = []

    async def train(batch, step):
        seen.append([r.status for r in batch])
        return step * 10

    run = await run_rl_async(ctl, PROMPTS, workflow(), RLConfig(steps=2, batch_size=4,
                                                                max_staleness=1),
                             train=train, should_accept_fn=lambda t: t["rewards"][0] > 0)
    assert run.outputs == [0, 10]
    assert seen == [["accepted"] * 4] * 2
    tasks = ctl.traces()
    assert (tasks["status"] == "rejected").sum() > 0
    assert set(run.step_samples.index) <= set(tasks.index[tasks["status"] == "accepted"])
    terminal(ctl)


def test_bad_settings_are_config_errors() -> None:
    for kwargs, match in [({"batch_size": 0}, "batch_size"), ({"batch_size": -3}, "batch_size"),
                          ({"max_staleness": -1}, "max_staleness"), ({"steps": 0}, "steps"),
                          ({"max_concurrent_rollouts": 0}, "max_concurrent")]:
        with pytest.raises(ConfigError, match=match):
            RLConfig(**{"steps": 1, "batch_size": 1, **kwargs})
    with pytest.raises(ConfigError, match=r"SimulatedTrain\.per_token_s"):
        SimulatedTrain(per_token_s=-1.0)
    with pytest.raises(ConfigError, match=r"SimulatedUpdate\.seconds"):
        SimulatedUpdate(seconds=float("nan"))
    with pytest.raises(ConfigError, match="path"):
        WeightsFromDisk("")


def test_bad_data_and_a_running_out_of_data_keep_the_steps(rollout_controller) -> None:
    ctl = rollout_controller()
    with pytest.raises(ConfigError, match="item 2 of the RL data"):
        run_rl(ctl, ["a", "b", ""], workflow(), RLConfig(steps=3, batch_size=1),
               train=SimulatedTrain())
    with pytest.raises(ConfigError, match="data ran out after 3 item"):
        run_rl(ctl, ["a", "b", "c"], workflow(), RLConfig(steps=2, batch_size=2),
               train=SimulatedTrain())
    steps = ctl.tracer.steps_df()[0]
    assert (steps["status"] == "ok").all() and len(steps) >= 1
    terminal(ctl)


@pytest.mark.rollout_kit_sim(n=2, **LONG_TAIL)
async def test_a_trainer_step_that_raises_stops_the_loop_keeping_steps_and_tasks(
        rollout_controller, sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)

    async def train(batch, step):
        if step == 2:
            raise RuntimeError("loss is NaN")

    with pytest.raises(RuntimeError, match="loss is NaN"):
        await run_rl_async(ctl, PROMPTS, workflow(), RLConfig(steps=5, batch_size=4,
                                                              max_staleness=2), train=train)
    steps = ctl.tracer.steps_df()[0]
    assert list(steps["status"]) == ["ok", "ok", "train_failed"]
    assert steps.loc[2, "error"] == "RuntimeError: loss is NaN"
    assert ctl.get_version() == 2
    terminal(ctl)
    assert not any(s.state()["paused"] for s in sim_sglang)
    stats = ctl.stats()
    assert stats["accepted"] + stats["cancelled"] + stats["rejected"] == stats["submitted"]


@pytest.mark.rollout_kit_sim(n=2, **LONG_TAIL)
async def test_an_update_failing_on_one_server_fails_the_step_and_resumes_the_others(
        rollout_controller, sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    down = sim_sglang[1]

    async def update(controller, version):
        if version == 2:
            await asyncio.to_thread(down.stop_threadsafe)  # a server dies mid-update
        await WeightsFromDisk(lambda v: f"/ckpt/{v}")(controller, version)

    with pytest.raises(EngineError) as info:
        await run_rl_async(ctl, PROMPTS, workflow(), RLConfig(steps=4, batch_size=4,
                                                              max_staleness=1),
                           train=SimulatedTrain(), update=update)
    assert info.value.server == down.address
    steps = ctl.tracer.steps_df()[0]
    assert list(steps["status"]) == ["ok", "update_failed"]
    assert ctl.get_version() == 1  # not advanced: the servers would disagree
    assert sim_sglang[0].weight_version == 2  # the healthy one loaded it…
    assert not sim_sglang[0].state()["paused"]  # …and generates again
    terminal(ctl)


@pytest.mark.rollout_kit_sim(n=2, **LONG_TAIL)
async def test_a_loop_cancelled_mid_update_leaves_servers_generating(rollout_controller,
                                                                    sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    in_update = asyncio.Event()

    async def update(controller, version):
        if version == 2:
            in_update.set()
            await asyncio.Event().wait()  # until cancelled

    run = asyncio.ensure_future(run_rl_async(
        ctl, PROMPTS, workflow(), RLConfig(steps=5, batch_size=4, max_staleness=2),
        train=SimulatedTrain(), update=update))
    await in_update.wait()
    assert all(s.state()["paused"] for s in sim_sglang)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not any(s.state()["paused"] for s in sim_sglang)
    steps = ctl.tracer.steps_df()[0]
    assert list(steps["status"]) == ["ok", "cancelled"]
    terminal(ctl)
    after = await ctl.rollout_batch_async(["What is 1+1?"], workflow())  # still generating
    assert after[0].ok


@pytest.mark.rollout_kit_sim(n=1, **LONG_TAIL)
async def test_a_failed_rollout_raises_workflow_error(rollout_controller, sim_sglang) -> None:
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    sim_sglang.set_faults(force={"kind": "error", "count": 200, "status": 500})
    with pytest.raises(WorkflowError):
        await run_rl_async(ctl, PROMPTS, workflow(), RLConfig(steps=2, batch_size=2),
                           train=SimulatedTrain())
    terminal(ctl)


def test_token_versions_reads_lists_and_arrays() -> None:
    import numpy as np

    assert token_versions({"versions": [[-1, -1, 0, 1], [-1, 2]]}) == [0, 1, 2]
    assert token_versions({"versions": np.array([-1, 3, 3])}) == [3, 3]
    assert token_versions({"no": 1}) == [] and token_versions(None) == []
