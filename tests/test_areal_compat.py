"""AReaL's request, response and calling style, without AReaL installed.

AReaL's types are duck-typed: these stand-ins have the field names and defaults of
``areal.api.io_struct.ModelRequest`` and ``areal.api.cli_args.GenerationHyperparameters``
(1.0.4). The same calls against AReaL's own classes and workflows run in
``tests/areal_own/`` (in a venv with ``areal==1.0.4``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

import rollout_kit as rk
from rollout_kit import ConfigError, GenerationConfig, ModelRequest, ModelResponse, WorkflowError
from rollout_kit.areal import AReaLEngine, concat_padded_tensors
from rollout_kit.engines import SGLangBackend, VLLMBackend

from ._local_engine import LocalEngine


@dataclass
class Hyper:  # AReaL's GenerationHyperparameters: names and defaults
    n_samples: int = 1
    max_new_tokens: int = 16384
    min_new_tokens: int = 0
    max_tokens: int = 32768
    greedy: bool = False
    top_p: float = 1.0
    top_k: float = 1e8
    temperature: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    stop: list[str] | None = None
    frequency_penalty: float = 0.0
    lora_name: str = "default_lora"
    use_beam_search: bool = False


@dataclass
class AReaLRequest:  # AReaL's ModelRequest
    rid: str = field(default_factory=lambda: str(uuid.uuid4()))
    input_ids: list[int] = field(default_factory=list)
    gconfig: Any = field(default_factory=Hyper)
    metadata: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = None
    image_data: list[str] | None = field(default_factory=list)
    processor: Any = None
    vision_msg_vllm: list[Any] | None = None


@dataclass
class Tok:
    eos_token_id: int | None = 1
    pad_token_id: int | None = 2


def _body(backend: Any, g: GenerationConfig) -> dict[str, Any]:
    return backend.build_request(input_ids=[5, 6], text=None, gconfig=g,
                                 max_new_tokens=g.max_new_tokens, stream=False, model="m")


def test_every_hyperparameter_reaches_the_body() -> None:
    from rollout_kit.engines._areal_io import gconfig_of

    g = gconfig_of(Hyper(max_new_tokens=32, min_new_tokens=4, max_tokens=100, greedy=True,
                         top_p=0.9, top_k=20, temperature=0.7, stop_token_ids=[1, 2],
                         ignore_eos=True, skip_special_tokens=False, stop=["\n\n"],
                         frequency_penalty=0.5))
    sp = _body(SGLangBackend(), g)["sampling_params"]
    assert sp == {"max_new_tokens": 32, "min_new_tokens": 4, "temperature": 0.0, "top_p": 0.9,
                  "top_k": 20, "ignore_eos": True, "skip_special_tokens": False,
                  "frequency_penalty": 0.5, "stop": ["\n\n"], "stop_token_ids": [1, 2]}
    body = _body(VLLMBackend(), g)
    assert {k: body[k] for k in ("max_tokens", "min_tokens", "temperature", "top_p", "top_k",
                                 "ignore_eos", "skip_special_tokens", "frequency_penalty",
                                 "stop", "stop_token_ids")} == {
        "max_tokens": 32, "min_tokens": 4, "temperature": 0.0, "top_p": 0.9, "top_k": 20,
        "ignore_eos": True, "skip_special_tokens": False, "frequency_penalty": 0.5,
        "stop": ["\n\n"], "stop_token_ids": [1, 2]}
    assert g.max_tokens == 100


def test_areal_defaults_map_to_no_top_k_and_no_lora() -> None:
    from rollout_kit.engines._areal_io import gconfig_of

    g = gconfig_of(Hyper())
    assert (g.top_k, g.max_new_tokens, g.max_tokens, g.min_new_tokens) == (-1, 16384, 32768, 0)
    assert "min_new_tokens" not in _body(SGLangBackend(), g)["sampling_params"]


@pytest.mark.parametrize(("changes", "named"), [
    ({"use_beam_search": True}, "use_beam_search"),
    ({"top_k": 0.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"min_new_tokens": 20, "max_new_tokens": 10}, "min_new_tokens"),
])
def test_a_hyperparameter_that_cannot_be_sent_is_named(changes: dict[str, Any],
                                                       named: str) -> None:
    from rollout_kit.engines._areal_io import gconfig_of

    with pytest.raises(ConfigError, match=named):
        gconfig_of(Hyper(**changes))


def test_an_unknown_field_set_is_refused_and_one_left_off_is_not() -> None:
    from rollout_kit.engines._areal_io import gconfig_of

    @dataclass
    class Newer(Hyper):
        presence_penalty: float = 0.0

    assert gconfig_of(Newer()).top_k == -1
    with pytest.raises(ConfigError, match="presence_penalty"):
        gconfig_of(Newer(presence_penalty=0.3))


@pytest.mark.parametrize(("changes", "named"), [
    ({"image_data": ["data:image/png;base64,AAAA"]}, "image_data"),
    ({"vision_msg_vllm": [{"role": "user"}]}, "vision_msg_vllm"),
    ({"metadata": {"return_routed_experts": True}}, "return_routed_experts"),
    ({"input_ids": "1 2 3"}, "input_ids"),
])
def test_a_request_rollout_kit_cannot_serve_is_refused(changes: dict[str, Any],
                                                       named: str) -> None:
    from rollout_kit.engines._areal_io import request_of

    with pytest.raises(ConfigError, match=named):
        request_of(AReaLRequest(input_ids=[1, 2], **changes) if "input_ids" not in changes
                   else AReaLRequest(**changes))


def test_not_a_request_says_what_agenerate_takes() -> None:
    engine = LocalEngine()
    with pytest.raises(ConfigError, match="agenerate takes a ModelRequest"):
        asyncio.run(engine.agenerate({"input_ids": [1, 2]}))


def test_the_rid_metadata_and_tokenizer_are_kept() -> None:
    from rollout_kit.engines._areal_io import request_of

    tok = Tok()
    req, t = request_of(AReaLRequest(rid="abc", input_ids=[3, 4], metadata={"k": 1},
                                     tokenizer=tok))
    assert (req.rid, req.input_ids, req.metadata, t) == ("abc", [3, 4], {"k": 1}, tok)
    ours = ModelRequest(input_ids=[1])
    assert request_of(ours) == (ours, None)


def _resp(out: list[int], stop: str = "stop", tok: Any = None) -> ModelResponse:
    return ModelResponse(input_tokens=[9], output_tokens=out, stop_reason=stop,  # type: ignore[arg-type]
                         tokenizer=tok)


def test_response_has_areals_stop_properties() -> None:
    tok = Tok()
    assert _resp([5, 6, 1], tok=tok).end_with_stop
    assert _resp([5, 6, 1, 2], tok=tok).output_tokens_without_stop == [5, 6]
    assert _resp([5, 6], "length", tok).output_tokens_without_stop == [5, 6]
    assert not _resp([], tok=tok).end_with_stop
    with pytest.raises(ValueError, match="does not end with eos"):
        _ = _resp([5, 6], tok=tok).output_tokens_without_stop
    with pytest.raises(ValueError, match="All output_tokens are EOS"):
        _ = _resp([1, 2], tok=tok).output_tokens_without_stop
    with pytest.raises(ValueError, match="tokenizer is None"):
        _ = _resp([1]).end_with_stop
    r = _resp([5])
    assert (r.input_len, r.output_len, r.input_images, r.processor, r.routed_experts) == (
        1, 1, [], None, None)


class AReaLStyle:
    """An AReaL-style workflow: builds AReaL's request, reads AReaL's response fields."""

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        resp = await engine.agenerate(AReaLRequest(
            input_ids=[104, 105], gconfig=Hyper(max_new_tokens=8), tokenizer=Tok()))
        assert engine.get_version() == 0
        if data.get("reject"):
            return None
        if data.get("raise"):
            raise RuntimeError("reward model down")
        return {"seq": resp.input_tokens + resp.output_tokens, "v": resp.output_versions,
                "stop": resp.end_with_stop, "tok": resp.tokenizer is not None}


async def test_one_session_per_agenerate_in_a_task_through_the_controller(
        rollout_controller: Any) -> None:
    ctl = rollout_controller()
    res = await ctl.rollout_batch_async([{"i": i} for i in range(4)], AReaLStyle())
    assert [r.task_id for r in res] == [0, 1, 2, 3] and all(r.ok for r in res)
    assert res[0].trajectory["tok"] and res[0].trajectory["seq"][:2] == [104, 105]
    sessions = ctl.sessions()
    assert sessions.groupby(level="task_id").size().to_dict() == {0: 1, 1: 1, 2: 1, 3: 1}
    spans = ctl.spans()
    assert set(spans["phase"]) == {"generate"} and len(spans) == 4


async def test_agenerate_inside_an_open_session_adds_no_other() -> None:
    class Traced:
        async def arun_episode(self, engine: Any, data: Any) -> Any:
            with rk.tracing.trace_session(), rk.tracing.trace_phase("generate"):
                return await engine.agenerate(AReaLRequest(input_ids=[1, 2], tokenizer=Tok()))

    ctl = rk.RolloutController(LocalEngine())
    [r] = await ctl.rollout_batch_async([{}], Traced())
    assert r.ok and len(ctl.sessions()) == 1 and len(ctl.spans()) == 1
    await ctl.close_async()


def test_areal_engine_returns_trajectories_as_areal_does() -> None:
    eng = AReaLEngine(LocalEngine())
    tid = eng.submit({"i": 0}, AReaLStyle())
    assert tid == 0
    [traj] = eng.wait(1)
    assert traj["seq"][:2] == [104, 105]
    eng.submit({"reject": True}, AReaLStyle())
    assert eng.wait(1) == [None]
    batch = eng.rollout_batch([{"i": 1}, {"reject": True}, {"i": 2}], AReaLStyle())
    assert len(batch) == 2  # accepted only, input order
    with pytest.raises(WorkflowError, match="reward model down"):
        eng.rollout_batch([{"raise": True}], AReaLStyle())
    assert eng.controller.traces().loc[5, "status"] == "failed"  # nothing lost
    eng.destroy()


def test_areal_engine_group_size_and_prepare_batch() -> None:
    eng = AReaLEngine(LocalEngine())
    [group] = eng.rollout_batch([{"i": 0}], AReaLStyle(), group_size=3)
    assert isinstance(group, list) and len(group) == 3  # plain dicts: one per run

    class Loader:
        batch_size = 2

        def __iter__(self) -> Any:
            return iter([[{"i": 0}, {"reject": True}], [{"i": 1}]])

    loader = Loader()
    assert len(eng.prepare_batch(loader, AReaLStyle())) == 2
    assert len(eng.prepare_batch(loader, AReaLStyle())) == 2  # cycles the loader
    with pytest.raises(ConfigError, match="group_size"):
        eng.submit({}, AReaLStyle(), group_size=0)
    with pytest.raises(ConfigError, match="dynamic_bs"):
        eng.prepare_batch(loader, AReaLStyle(), dynamic_bs=True)
    eng.destroy()


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="torch is installed: the error is for machines without it")
async def test_tensor_trajectories_without_torch_say_what_to_install() -> None:
    from rollout_kit.agents import AgentEndpoint
    from rollout_kit.areal import AReaLAgentWorkflow

    class Agent:
        async def run(self, data: Any, **kw: Any) -> float:
            return 1.0

    async with AgentEndpoint() as ep:
        with pytest.raises(ConfigError, match="pip install torch"):
            AReaLAgentWorkflow(Agent(), endpoint=ep, trajectory="tensors")
    assert concat_padded_tensors([{"x": [1], "y": "a"}, {"x": [2], "y": "b"}]) == {
        "x": [1, 2], "y": "a"}  # no tensors: no torch needed


def test_concatenating_trajectories_with_other_keys_is_refused() -> None:
    with pytest.raises(ConfigError, match="keys"):
        concat_padded_tensors([{"a": [1]}, {"b": [2]}])


async def test_the_panel_shows_the_mean_of_tensor_like_rewards() -> None:
    import numpy as np

    from rollout_kit.notebook import SubmitPanel

    class ArrayRewards:  # AReaL's trajectories hold their rewards in a tensor: [B]
        async def arun_episode(self, engine: Any, data: Any) -> Any:
            return {"rewards": np.array([1.0, 0.0, 0.5, 0.5])}

    ctl = rk.RolloutController(LocalEngine())
    panel = SubmitPanel(ctl, ArrayRewards(), prompts=["a", "b"], refresh_interval=0.05)
    panel.submit.click()
    await panel.wait_async(timeout=30)
    assert panel.table()["reward"].tolist() == [0.5, 0.5]
    await ctl.close_async()
