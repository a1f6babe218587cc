"""The pytest plugin (``rollout_kit.testing._plugin``) as a user's project sees it: a test file of
their own, run by pytest with only rollout-kit installed (the plugin loads from its entry point).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(120)

USER_TESTS = '''
import pytest

from rollout_kit import GenerationConfig, SingleTurnWorkflow


def reward(prompt, completion, prompt_ids, completion_ids, answer="", **_):
    return 1.0 if completion.rstrip(".").split()[-1] == answer else 0.0


WORKFLOW = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=16))
DATA = [{"prompt": "What is 2+3?", "answer": "5"}, {"prompt": "What is 7*6?", "answer": "42"}]
LEFT_OPEN = []


@pytest.mark.rollout_kit_sim(accuracy=1.0)
def test_sync_workflow_on_sim_sglang(sim_sglang, rollout_controller):
    assert len(sim_sglang.addresses) == 1 and sim_sglang.url.startswith("http://127.0.0.1:")
    ctl = rollout_controller(sglang=sim_sglang.addresses)
    results = ctl.rollout_batch(DATA * 2, WORKFLOW)
    assert [r.status for r in results] == ["accepted"] * 4
    assert all(r.trajectory["rewards"] == [1.0] for r in results)
    assert sorted(ctl.traces().index) == [r.task_id for r in results]


@pytest.mark.rollout_kit_sim(n=2)
def test_marker_sets_the_cluster(sim_vllm):
    assert len(sim_vllm.addresses) == 2


@pytest.mark.asyncio
async def test_async_controller_left_open(rollout_controller):
    ctl = rollout_controller()  # a simulated SGLang server of its own
    results = await ctl.rollout_batch_async(DATA, WORKFLOW)
    assert all(r.ok for r in results)
    LEFT_OPEN.append(ctl)  # not closed here: the fixture closes it in this loop


def test_the_controller_was_closed():
    assert LEFT_OPEN and LEFT_OPEN[0].closed


def test_two_flavours(sim_servers, rollout_controller):
    sg, vl = sim_servers("sglang"), sim_servers("vllm", time_scale=0.001)
    ctl = rollout_controller(sglang=sg.addresses, vllm=vl.addresses)
    results = ctl.rollout_batch(DATA * 2, WORKFLOW)
    assert {r.status for r in results} == {"accepted"}
    assert set(ctl.traces()["worker"]) == {"sglang", "vllm"}


def test_real_server(vllm_cpu_server):
    raise AssertionError("skipped by ROLLOUT_KIT_SKIP_VLLM_CPU")


def test_real_sglang(sglang_cpu_server):
    raise AssertionError("skipped by ROLLOUT_KIT_SKIP_SGLANG_CPU")
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """An empty project with pytest-asyncio's loop scope set (as a user's would have)."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


@pytest.fixture
def user_project(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("ROLLOUT_KIT_SKIP_VLLM_CPU", "1")
    monkeypatch.setenv("ROLLOUT_KIT_SKIP_SGLANG_CPU", "1")
    project.makepyfile(test_user=USER_TESTS)
    return project


def test_user_tests_pass_with_the_plugin_fixtures(user_project: pytest.Pytester) -> None:
    result = user_project.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=5, skipped=2)
    result.stdout.fnmatch_lines(["*disabled by ROLLOUT_KIT_SKIP_VLLM_CPU*"])
    result.stdout.fnmatch_lines(["*disabled by ROLLOUT_KIT_SKIP_SGLANG_CPU*"])


def test_vllm_cpu_tests_are_marked(user_project: pytest.Pytester) -> None:
    result = user_project.runpytest("-p", "no:cacheprovider", "-m", "vllm_cpu",
                                    "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_user.py::test_real_server", "*1/7 tests collected*"])


def test_sglang_cpu_tests_are_marked(user_project: pytest.Pytester) -> None:
    result = user_project.runpytest("-p", "no:cacheprovider", "-m", "sglang_cpu",
                                    "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_user.py::test_real_sglang", "*1/7 tests collected*"])


def test_fixtures_are_listed(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:cacheprovider", "--fixtures")
    listed = result.stdout.str()
    for name in ("sim_sglang", "sim_vllm", "sim_servers", "rollout_controller",
                 "vllm_cpu_server", "sglang_cpu_server"):
        assert f"{name} " in listed or f"{name}\n" in listed, name
    assert "rollout_kit/testing/_plugin.py" in listed or "rollout_kit.testing._plugin" in listed


def test_plugin_can_be_turned_off(project: pytest.Pytester) -> None:
    project.makepyfile("def test_x(sim_sglang):\n    pass\n")
    result = project.runpytest("-p", "no:cacheprovider", "-p", "no:rollout_kit")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'sim_sglang' not found*"])
