"""``RemoteSGLangEngine`` and ``RolloutController`` against the REAL SGLang server on CPU.

The checks of the vLLM CPU suite (``engine_checks.py``, shared with the GPU suite), here
against SGLang 0.5.23 (tiny seeded random-weight Llama, the ``sgl_kernel`` stand-in): token
ids and logprobs, text prompts, streaming TTFT/ITL, the abort → continue loop across a server
pause with per-token versions, error mapping, traced sessions, a weight update from disk —
and SGLang's own per-request timings (``meta_info``) joined into the sessions frame with no
OTLP. The server is shared by the whole session: every check leaves it resumed and on its
first weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import aiohttp
import pytest

from rollout_kit import (
    EngineConfig,
    GenerationConfig,
    ModelRequest,
    RolloutController,
    SingleTurnWorkflow,
    analysis,
)
from rollout_kit.testing import SGLangCPUServer
from rollout_kit.testing._sglang_cpu import sglang_model_dir
from rollout_kit.tracing import Tracer
from tests.realserver.engine_checks import (
    RealServer,
    check_abort_continue,
    check_controller_single_turn,
    check_error_shapes,
    check_streaming,
    check_text_prompt,
    check_token_ids_and_logprobs,
    check_tracer_sessions,
    check_weight_update,
    check_without_logprobs,
    engine_for,
)

pytestmark = pytest.mark.sglang_cpu

SERVER_COLUMNS = ("server_queue_s", "server_prefill_s", "server_decode_s", "server_e2e_s",
                  "server_frontend_s", "server_ttft_s", "server_start_ts")


@pytest.fixture
def real(sglang_cpu_server: SGLangCPUServer) -> RealServer:
    """The shared CPU server as the checks see it."""
    return RealServer("sglang", sglang_cpu_server.address, sglang_cpu_server.vocab_size,
                      sglang_cpu_server.context_length)


async def _raw_generate(server: RealServer, body: dict[str, object]) -> dict[str, object]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"http://{server.address}/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        out = await resp.json()
    assert isinstance(out, dict)
    return out


async def test_token_ids_and_logprobs(real: RealServer) -> None:
    await check_token_ids_and_logprobs(real)


async def test_greedy_tokens_and_logprobs_equal_a_raw_generate(real: RealServer) -> None:
    """Greedy, ids and text prompts: the engine's tokens and logprobs are the server's own."""
    greedy = GenerationConfig(max_new_tokens=8, ignore_eos=True, temperature=0.0)
    sp = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    async with engine_for(real) as engine:
        by_ids = await engine.generate_async(ModelRequest(input_ids=real.ids(), gconfig=greedy))
        by_text = await engine.generate_async(ModelRequest(text=real.text, gconfig=greedy))
    raw = await _raw_generate(real, {"input_ids": real.ids(), "return_logprob": True,
                                     "sampling_params": sp})
    assert by_ids.output_tokens == raw["output_ids"]
    meta = raw["meta_info"]
    assert isinstance(meta, dict)
    assert by_ids.output_logprobs == pytest.approx(
        [e[0] for e in meta["output_token_logprobs"]], abs=1e-3)
    raw_text = await _raw_generate(real, {"text": real.text, "sampling_params": sp})
    assert by_text.output_tokens == raw_text["output_ids"] and by_text.text == raw_text["text"]


async def test_without_logprobs_ids_still_come_back(real: RealServer) -> None:
    await check_without_logprobs(real)


async def test_text_prompt(real: RealServer) -> None:
    resp = await check_text_prompt(real)
    assert resp.text is not None


async def test_streaming_measures_ttft_and_itl(real: RealServer) -> None:
    await check_streaming(real)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_abort_continue_across_pause_and_version_bump(real: RealServer,
                                                            stream: bool) -> None:
    resp = await check_abort_continue(real, stream=stream, budget=200)
    assert set(resp.output_versions) == {0, 1}


async def test_error_shapes_map_to_rollout_kit_errors(real: RealServer) -> None:
    await check_error_shapes(real)


#: how far SGLang's clock and the client's may disagree on this machine (seen: 19 ms loaded)
SKEW = 0.05


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_tracer_sessions_frame_joins_the_servers_view(real: RealServer,
                                                            stream: bool) -> None:
    """SGLang's ``meta_info`` stamps become the session's ``server_*`` columns."""
    sessions = await check_tracer_sessions(real, stream=stream)
    row = sessions.iloc[0]
    assert row["server_spans"] == 1 and row["server_preemptions"] == 0
    # SGLang's own stamps are differences within one of its processes; the front end is the
    # client's in-flight time minus them: two clocks, which a loaded machine set 19 ms apart
    # (SKEW, the bound the arrival stamp below gets too)
    for col in SERVER_COLUMNS[:-1]:
        floor = -SKEW if col == "server_frontend_s" else -0.005
        assert math.isfinite(row[col]) and row[col] >= floor, (col, row[col])
    assert row["server_queue_s"] + row["server_prefill_s"] + row["server_decode_s"] \
        <= row["server_e2e_s"] + 1e-6
    assert row["server_e2e_s"] <= row["in_flight_s"] + SKEW
    assert row["server_frontend_s"] == pytest.approx(row["in_flight_s"] - row["server_e2e_s"])
    # the server's arrival stamp lands inside the session on the trace clock (within the
    # few ms by which SGLang's conversion of its monotonic clock to Unix time may be off)
    assert row["start_ts"] - SKEW <= row["server_start_ts"] <= row["end_ts"] + SKEW


async def test_controller_single_turn_workflow_and_why_slow(real: RealServer) -> None:
    sessions = await check_controller_single_turn(real, stream=True)
    assert (sessions["server_spans"] == 1).all()
    assert sessions[list(SERVER_COLUMNS)].notna().all().all(), sessions[list(SERVER_COLUMNS)]


async def test_why_slow_explains_a_real_sglang_run(real: RealServer) -> None:
    """A burst larger than the server's batch: the slowest waited in SGLang's queue, and
    why_slow says so from the server's own numbers."""
    wf = SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        max_new_tokens=64, ignore_eos=True, logprobs=False))
    async with RolloutController(sglang=[real.address], engine_config=EngineConfig(
            stream=True), scrape_interval=0.5) as ctl:
        results = await ctl.rollout_batch_async([{"input_ids": real.ids(i)} for i in range(24)],
                                                wf, timeout=300)
        assert all(r.ok for r in results)
        traces = ctl.tracer.frames()
    table = analysis.why_slow(traces, k=3)
    assert table["server_queue_s"].notna().all() and table["server_decode_s"].notna().all()
    assert table["cause"].isin(["server_queue", "server_prefill", "server_decode",
                                "server_frontend", "client", "controller_queue"]).all()
    s = traces.sessions
    # 24 requests, at most 8 running: some waited in the server's queue
    assert s["server_queue_s"].max() > 0.01, s[["server_queue_s", "server_e2e_s"]]


async def test_weight_update_from_disk_reads_back_from_model_info(
        real: RealServer, sglang_cpu_server: SGLangCPUServer) -> None:
    """Mid-generation update to another seed's weights: later tokens carry version 1, the
    server reports it in /model_info, and greedy output changes; then back to the first."""
    other = sglang_model_dir(sglang_cpu_server.model_dir.parent, seed=1)
    before = await _raw_generate(real, {"input_ids": real.ids(), "sampling_params": {
        "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}})
    try:
        resp = await check_weight_update(real, str(other))
        assert set(resp.output_versions) == {0, 1} or resp.output_versions[0] == 1
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://{real.address}/model_info") as r:
            assert (await r.json())["weight_version"] == "1"
        after = await _raw_generate(real, {"input_ids": real.ids(), "sampling_params": {
            "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}})
        assert after["output_ids"] != before["output_ids"]
        assert after["meta_info"]["weight_version"] == "1"  # type: ignore[index]
        # the session of a call under the new weights records the server's version
        tracer = Tracer()
        async with engine_for(real) as engine:
            engine.set_version(1)
            tracer.register_task(0)
            with tracer.task_scope(0):
                async with tracer.session():
                    await engine.generate_async(ModelRequest(input_ids=real.ids(3),
                                                             gconfig=GenerationConfig(
                                                                 max_new_tokens=2)))
            tracer.finalize(0, "accepted")
        assert tracer.sessions_df().iloc[0]["server_weight_version"] == 1
    finally:  # the session's server goes back to its first weights
        async with engine_for(real) as engine:
            await engine.update_weights_from_disk_async(str(sglang_cpu_server.model_dir), 0)
    back = await _raw_generate(real, {"input_ids": real.ids(), "sampling_params": {
        "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}})
    assert back["output_ids"] == before["output_ids"]


def test_model_folder_has_weights(sglang_cpu_server: SGLangCPUServer) -> None:
    assert (sglang_cpu_server.model_dir / "model.safetensors").exists()
    assert "--max-total-tokens" in sglang_cpu_server.command()
    assert isinstance(sglang_cpu_server.model_dir, Path)
