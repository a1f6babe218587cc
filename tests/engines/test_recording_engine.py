"""RecordingEngine: the one engine view that files each generate call in its caller's log."""

from __future__ import annotations

from typing import Any

import pytest

from rollout_kit import ModelRequest, ModelResponse
from rollout_kit.engines import RecordingEngine


class _Engine:
    name = "inner"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        if self.fail:
            raise RuntimeError("down")
        return ModelResponse(input_tokens=[1], output_tokens=[2, 3])

    def get_version(self) -> int:
        return 7


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def begin_call(self, t0: float) -> _Log:
        self.events.append(("begin", t0))
        return self

    def add(self, t0: float, resp: ModelResponse) -> None:
        self.events.append(("add", (t0, resp)))


async def test_each_call_is_begun_then_given_its_response() -> None:
    log = _Log()
    engine = RecordingEngine(_Engine(), log)  # type: ignore[arg-type]
    resp = await engine.generate_async(ModelRequest(input_ids=[1]))
    (begin, t0), (add, (t0_again, filed)) = log.events
    assert (begin, add) == ("begin", "add") and t0 == t0_again and filed is resp
    assert engine.get_version() == 7 and engine.name == "inner"  # the rest is the engine's


async def test_a_failed_call_is_begun_and_files_no_response() -> None:
    log = _Log()
    engine = RecordingEngine(_Engine(fail=True), log)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="down"):
        await engine.generate_async(ModelRequest(input_ids=[1]))
    assert [e for e, _ in log.events] == ["begin"]
