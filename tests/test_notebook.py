"""Headless tests of the notebook front-end (``SubmitPanel``, ``LiveMonitor``) against a real
controller and simulated servers: clicks are ``button.click()``, frontend edits
``widget.set_state(...)`` — the same code paths a browser triggers."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pandas as pd
import pytest

import rollout_kit as rk
from rollout_kit.notebook import LiveMonitor, ProgressSnapshot, SubmitPanel
from rollout_kit.notebook._progress import Refresher
from rollout_kit.sim import serve
from rollout_kit.tracing import schema as S
from tests.sim.helpers import until

pytestmark = pytest.mark.timeout(60)

PROMPTS = ["What is 1+2?", "What is 3+4?", "What is 5+6?"]


def add_answer(prompt: str) -> str:
    a, b = re.findall(r"\d+", prompt)[:2]
    return f"The answer is {int(a) + int(b)}."


def reward(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any,
           **_: Any) -> float:
    a, b = re.findall(r"\d+", prompt)[:2]
    return float(completion.rstrip(".").endswith(str(int(a) + int(b))))


@pytest.fixture
async def ctl() -> AsyncIterator[rk.RolloutController]:
    async with serve("sglang", n=2, time_scale=0.01, answer_fn=add_answer) as servers:
        controller = rk.RolloutController(
            sglang=servers.addresses,
            engine_config=rk.EngineConfig(retry=rk.RetryPolicy(max_retries=1,
                                                               initial_delay=0.01)))
        controller.servers = servers  # type: ignore[attr-defined]
        yield controller
        await controller.close_async()


def workflow() -> rk.SingleTurnWorkflow:
    return rk.SingleTurnWorkflow(reward, rk.GenerationConfig(max_new_tokens=24))


async def test_submit_click_runs_every_prompt_and_shows_results(ctl: Any) -> None:
    panel = SubmitPanel(ctl, workflow(), prompts=PROMPTS, refresh_interval=0.05)
    panel.n_samples.set_state({"value": 2})  # as the frontend would
    panel.submit.click()
    assert panel.task_ids == [0, 1, 2]
    assert "task ids: 0, 1, 2" in panel.ids.value
    snap = await panel.wait_async(timeout=30)
    assert (snap.submitted, snap.done, snap.accepted) == (3, 3, 3)
    table = panel.table()
    assert table.index.tolist() == [0, 1, 2]
    assert table["reward"].tolist() == [1.0, 1.0, 1.0]
    assert table[S.SERVER].str.fullmatch(r"127\.0\.0\.1:\d+").all()
    assert ctl.sessions().groupby(level=S.TASK_ID).size().tolist() == [2, 2, 2]
    assert panel.view.bar.value == panel.view.bar.max == 3
    assert panel.view.bar.bar_style == "success"
    assert panel.state()["error"] is None
    assert "accepted 3" in panel.view.counts.value
    assert len(panel.view.table.outputs) == 1  # replaced, never stacked
    assert "SubmitPanel(submitted=3" in repr(panel)
    panel.close()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("prompt", "  \n ", "enter at least one prompt"),
    ("temperature", -1.0, "temperature must be"),
    ("top_p", 0.0, "top_p must be in (0, 1]"),
])
async def test_bad_input_shows_an_error_and_submits_nothing(ctl: Any, field: str, value: Any,
                                                            message: str) -> None:
    panel = SubmitPanel(ctl, workflow(), prompts=PROMPTS)
    getattr(panel, field).value = value
    panel.submit.click()
    assert message in panel.error.value
    assert panel.task_ids == [] and len(ctl.traces()) == 0
    # the panel stays usable: fix the input and submit
    panel.load(PROMPTS[:1])
    panel.temperature.value, panel.top_p.value = 1.0, 1.0
    panel.submit.click()
    assert panel.error.value == "" and panel.task_ids == [0]
    await panel.wait_async(timeout=30)
    panel.close()


async def test_double_click_submits_twice_and_loses_nothing(ctl: Any) -> None:
    panel = SubmitPanel(ctl, workflow(), prompts=PROMPTS)
    panel.submit.click()
    panel.submit.click()
    snap = await panel.wait_async(timeout=30)
    assert panel.task_ids == list(range(6))
    assert (snap.submitted, snap.done) == (6, 6)
    panel.close()


async def test_cancel_during_pause_ends_tasks_cancelled(ctl: Any) -> None:
    panel = SubmitPanel(ctl, workflow(), prompts=PROMPTS)
    panel.pause.click()
    panel.submit.click()
    panel.cancel.click()
    panel.resume.click()
    snap = await panel.wait_async(timeout=30)
    assert snap.cancelled == 3 and snap.done == 3
    assert set(ctl.traces()[S.STATUS].astype(str)) == {"cancelled"}
    panel.close()


async def test_server_going_down_shows_failures_and_panel_stays_usable(ctl: Any) -> None:
    panel = SubmitPanel(ctl, workflow(), prompts=PROMPTS[:2])
    panel.submit.click()
    assert (await panel.wait_async(timeout=30)).accepted == 2
    for server in ctl.servers:  # the servers go away while the panel runs
        await server.stop()
    panel.submit.click()
    snap = await panel.wait_async(timeout=30)
    assert (snap.accepted, snap.failed) == (2, 2)
    assert "2 failed" in panel.error.value and panel.view.bar.bar_style == "danger"
    for server in ctl.servers:
        await server.start()
    # the health probe puts the servers back in rotation
    await until(lambda: not any(e.router.down for e in ctl.engines), "servers back up")
    panel.submit.click()
    snap = await panel.wait_async(timeout=30)
    assert (snap.accepted, snap.failed) == (4, 2)
    panel.close()


async def test_server_choice_routes_to_that_worker() -> None:
    async with serve("sglang", n=1, time_scale=0.01, answer_fn=add_answer) as sg, \
            serve("vllm", n=1, time_scale=0.01, answer_fn=add_answer) as vl:
        async with rk.RolloutController(sglang=sg.addresses, vllm=vl.addresses) as ctl:
            panel = SubmitPanel(ctl, workflow(), prompts=PROMPTS)
            assert list(panel.server.options) == ["any", "sglang", "vllm"]
            panel.server.set_state({"index": 2})
            panel.submit.click()
            await panel.wait_async(timeout=30)
            assert set(ctl.traces()[S.WORKER].astype(str)) == {"vllm"}
            panel.close()


async def test_live_monitor_follows_work_submitted_from_code(ctl: Any) -> None:
    monitor = LiveMonitor(ctl, refresh_interval=0.05)
    assert monitor.refresher.running
    ids = [ctl.submit({"prompt": p}, workflow()) for p in PROMPTS]
    await ctl.wait_async(len(ids))
    snap = monitor.refresh()
    assert (snap.submitted, snap.accepted) == (3, 3)
    assert "accepted 3" in monitor.view.counts.value
    # the refresher keeps running and draws the timeline
    await until(lambda: len(monitor.view.timeline.outputs) == 1, "a timeline drawn")
    # a PNG whatever the matplotlib backend (a bare Figure would show as text)
    assert "image/png" in monitor.view.timeline.outputs[0]["data"]
    monitor.stop()
    assert not monitor.refresher.running


def test_snapshot_counts_queued_running_and_terminal() -> None:
    tasks = pd.DataFrame({
        S.STATUS: pd.Categorical(["pending", "pending", "accepted", "failed", "cancelled"],
                                 categories=list(S.STATUSES)),
        S.DISPATCH_TS: [float("nan"), 0.5, 0.5, 0.6, float("nan")],
    }, index=pd.Index([0, 1, 2, 3, 4], name=S.TASK_ID))
    snap = ProgressSnapshot.from_frames(tasks)
    assert (snap.queued, snap.running, snap.accepted, snap.failed, snap.cancelled) == \
        (1, 1, 1, 1, 1)
    assert snap.done == 3
    only = ProgressSnapshot.from_frames(tasks, [2, 3, 9])  # 9: not traced yet → queued
    assert (only.submitted, only.done, only.queued) == (3, 2, 1)


async def test_refresher_reports_errors_and_keeps_going() -> None:
    calls: list[int] = []
    errors: list[BaseException] = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("boom")

    r = Refresher(tick, 0.01, errors.append)
    r.start()
    await until(lambda: len(calls) >= 3, "three ticks")  # it goes on after the error
    r.stop()
    assert [str(e) for e in errors] == ["boom"]


def test_refresher_without_a_running_loop_is_a_no_op() -> None:
    r = Refresher(lambda: None, 0.01, lambda e: None)
    r.start()
    assert not r.running
