"""Engine checks against REAL SGLang and vLLM servers on an NVIDIA GPU (``scripts/gpu-check``).

Skipped unless ``ROLLOUT_KIT_SGLANG_URLS`` / ``ROLLOUT_KIT_VLLM_URLS`` name running servers
(``host:port``, first one used). The model folder (for the vocabulary size) comes from
``ROLLOUT_KIT_GPU_MODEL_DIR`` and the context length the servers were started with from
``ROLLOUT_KIT_GPU_MAX_MODEL_LEN``. The assertions are shared with the vLLM CPU suite
(``tests/realserver/engine_checks.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.realserver.engine_checks import (
    Flavour,
    RealServer,
    check_abort_continue,
    check_continuation_replay,
    check_controller_single_turn,
    check_error_shapes,
    check_seeded_replay,
    check_streaming,
    check_text_prompt,
    check_token_ids_and_logprobs,
    check_tracer_sessions,
    check_weight_update,
    check_without_logprobs,
)

pytestmark = pytest.mark.timeout(300)

_ENV = {"sglang": "ROLLOUT_KIT_SGLANG_URLS", "vllm": "ROLLOUT_KIT_VLLM_URLS"}
FLAVOURS: list[Flavour] = ["sglang", "vllm"]


def _model_dir() -> Path | None:
    raw = os.environ.get("ROLLOUT_KIT_GPU_MODEL_DIR", "")
    return Path(raw) if raw else None


@pytest.fixture(params=FLAVOURS)
def real(request: pytest.FixtureRequest) -> RealServer:
    """The GPU server of one flavour (skipped with the reason when it is not configured)."""
    flavour: Flavour = request.param
    urls = os.environ.get(_ENV[flavour], "").strip()
    if not urls:
        pytest.skip(f"no real {flavour} GPU server: {_ENV[flavour]} is not set "
                    "(run scripts/gpu-check on a machine with an NVIDIA GPU)")
    model = _model_dir()
    if model is None or not (model / "config.json").exists():
        pytest.skip("ROLLOUT_KIT_GPU_MODEL_DIR does not name a model folder with config.json")
    vocab = int(json.loads((model / "config.json").read_text())["vocab_size"])
    max_len = int(os.environ.get("ROLLOUT_KIT_GPU_MAX_MODEL_LEN", "1024"))
    address = urls.split(",")[0].strip().removeprefix("http://").rstrip("/")
    return RealServer(flavour, address, vocab, max_len)


async def test_token_ids_and_logprobs(real: RealServer) -> None:
    await check_token_ids_and_logprobs(real)


async def test_without_logprobs_ids_still_come_back(real: RealServer) -> None:
    await check_without_logprobs(real)  # SGLang: return_logprob false, ids from output_ids


async def test_text_prompt(real: RealServer) -> None:
    await check_text_prompt(real)


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


async def test_update_weights_from_disk_bumps_the_version(real: RealServer) -> None:
    if real.flavour != "sglang":
        pytest.skip("stock vLLM has no update_weights_from_disk endpoint")
    model = _model_dir()
    assert model is not None
    await check_weight_update(real, str(model))


async def test_seeded_sampling_replays_token_identical(real: RealServer, tmp_path: Path) -> None:
    await check_seeded_replay(real, str(tmp_path))


async def test_continued_generation_replays_token_identical(real: RealServer,
                                                            tmp_path: Path) -> None:
    await check_continuation_replay(real, str(tmp_path))
