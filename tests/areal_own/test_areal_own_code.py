"""AReaL 1.0.4's own ``RLVRWorkflow``, ``MultiTurnWorkflow`` and ``MathAgent`` /
``MultiTurnMathAgent``, unmodified, through rollout_kit (the tests are in ``inside/``)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import AReaLEnv


def test_areal_workflows_and_agents_on_the_simulator(areal_env: AReaLEnv) -> None:
    areal_env.run("test_areal_on_sim.py")


@pytest.mark.timeout(900)
def test_areal_workflows_and_agent_on_real_vllm(areal_env: AReaLEnv,
                                                vllm_cpu_server: Any) -> None:
    areal_env.run_real("vllm", vllm_cpu_server)


@pytest.mark.timeout(900)
def test_areal_workflows_and_agent_on_real_sglang(areal_env: AReaLEnv,
                                                  sglang_cpu_server: Any) -> None:
    areal_env.run_real("sglang", sglang_cpu_server)


def test_areal_workflows_notebook(areal_env: AReaLEnv) -> None:
    areal_env.run_notebook("areal_workflows.ipynb")
