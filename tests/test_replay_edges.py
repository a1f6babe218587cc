"""Edges of the replay's two pure parts, without a server: the requests a recorded call is
re-sent as (:mod:`rollout_kit.replay._calls`, on a scripted engine and a fake clock) and the
frame row that compares it with the recording (:mod:`rollout_kit.replay._compare`), field by
field against hand-made rows: every column, every reason word for word, the segment budgets
at their edges (0 and 1 tokens), the text comparison of a dump without token ids, the TTFT of
an engine that does or does not say when it started, an error in the middle of a call."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from rollout_kit import ConfigError, EngineError, ModelRequest, ModelResponse
from rollout_kit.replay import _calls as calls
from rollout_kit.replay._calls import Replayed, is_seeded, not_replayable, replay_call
from rollout_kit.replay._compare import (
    FRAME_COLUMNS,
    compare_call,
    first_divergence,
    matches_recording,
    missing_row,
)

NAN = "<nan>"


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """The row with each NaN as one marker, so that rows compare with ``==``."""
    return {k: NAN if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


# -- calls: is_seeded / not_replayable ---------------------------------------------------


@pytest.mark.parametrize(("sampling", "seeded"), [
    ({"seed": 5}, True),                      # at the default temperature 1.0
    ({"seed": 7.0}, True),                    # a seed read back from a float column
    ({"seed": math.nan}, False),              # ... and a missing one there (NA)
    ({"seed": None, "temperature": 0.5}, False),
    ({"greedy": True}, True),                 # greedy needs no seed
    ({"greedy": True, "temperature": 1.0}, True),
    ({"temperature": 0.0}, True),             # temperature 0 is greedy
    ({"temperature": 0.9e-5}, True),
    ({"temperature": 1e-5}, False),           # the greedy bound is strict
    ({}, False),
    (None, False),
])
def test_is_seeded(sampling: dict[str, Any] | None, seeded: bool) -> None:
    assert is_seeded({"sampling": sampling}) is seeded


def test_is_seeded_without_sampling() -> None:
    assert is_seeded({}) is False


def test_not_replayable_says_why() -> None:
    seg = {"prefix": 0, "n_tokens": 2, "max_new_tokens": 4, "stop_reason": "abort"}
    assert not_replayable({"prompt_ids": [], "prompt_text": None}) == (
        "no prompt to send: the call was sent as text, the dump is text-free and the server "
        "returned no prompt token ids")
    assert not_replayable({"prompt_text": "hi", "segments": [seg, seg]}) == (
        "continued after an abort but no prompt token ids were recorded")
    assert not_replayable({"prompt_text": "hi", "segments": [seg]}) is None  # one request
    assert not_replayable({"prompt_text": "hi", "segments": []}) is None
    assert not_replayable({"prompt_ids": [3], "segments": [seg, seg, seg]}) is None


# -- calls: replay_call on a scripted engine ---------------------------------------------


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now


class _Engine:
    """Answers each request with the next scripted step: ``(seconds, response or error)``;
    the fake clock moves by those seconds before the answer."""

    def __init__(self, clock: _Clock, *script: tuple[float, ModelResponse | Exception]) -> None:
        self.clock = clock
        self.script = list(script)
        self.requests: list[ModelRequest] = []

    async def generate_async(self, req: ModelRequest) -> ModelResponse:
        self.requests.append(req)
        seconds, answer = self.script.pop(0)
        self.clock.now += seconds
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock(100.0)
    monkeypatch.setattr(calls, "time", SimpleNamespace(perf_counter=c.perf_counter))
    return c


def _seg(prefix: int, n_tokens: int, max_new_tokens: int, stop: str) -> dict[str, Any]:
    return {"prefix": prefix, "n_tokens": n_tokens, "max_new_tokens": max_new_tokens,
            "stop_reason": stop}


async def test_each_segment_is_one_request_with_its_budget(clock: _Clock) -> None:
    call = {"prompt_ids": [1, 2], "output_ids": [10, 11, 12, 13, 14],
            "sampling": {"seed": 9, "temperature": 0.5, "max_new_tokens": 10},
            "segments": [_seg(0, 2, 10, "abort"),
                         _seg(2, 0, 8, "abort"),    # aborted before a token: nothing to ask
                         _seg(2, 1, 8, "abort"),    # one token: asked for exactly one
                         _seg(3, 2, 7, "stop")]}    # not aborted: its own budget, not n_tokens
    engine = _Engine(
        clock,
        (1.0, ModelResponse(output_tokens=[10, 11], output_logprobs=[-0.5, -0.25], text="ab",
                            stop_reason="abort", server="s1", start=100.0, ttft=0.25,
                            latency=0.75)),
        (1.0, ModelResponse(output_tokens=[12], output_logprobs=[-1.0], text=None,
                            stop_reason="abort", server="s2", start=101.0, ttft=0.125,
                            latency=0.5)),
        (1.5, ModelResponse(output_tokens=[13, 14], output_logprobs=[-2.0, -4.0], text="cd",
                            stop_reason="stop", server="s3", start=102.0, ttft=0.125,
                            latency=1.0)))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    assert [r.input_ids for r in engine.requests] == [[1, 2], [1, 2, 10, 11], [1, 2, 10, 11, 12]]
    assert [r.gconfig.max_new_tokens for r in engine.requests] == [2, 1, 7]
    assert {(r.gconfig.seed, r.gconfig.temperature) for r in engine.requests} == {(9, 0.5)}
    assert out == Replayed(output_ids=[10, 11, 12, 13, 14],
                           logprobs=[-0.5, -0.25, -1.0, -2.0, -4.0], stop_reason="stop",
                           server="s3", latency_s=3.5, text="abcd", error=None,
                           ttft_s=0.25)  # the first token of the first response, from t0


async def test_ttft_of_an_engine_that_does_not_say_when_it_started(clock: _Clock) -> None:
    call = {"prompt_ids": [1], "sampling": {"max_new_tokens": 3}}
    engine = _Engine(clock, (2.0, ModelResponse(output_tokens=[4, 5, 6], latency=1.5,
                                                ttft=0.25, stop_reason="length")))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    # no start: the call began `latency` before it came back (at 102.0), i.e. at 100.5
    assert (out.ttft_s, out.latency_s, out.text, out.server) == (0.75, 2.0, "", None)


async def test_ttft_counts_from_the_engines_start_when_it_began_with_the_replay(
        clock: _Clock) -> None:
    call = {"prompt_ids": [1], "sampling": {"max_new_tokens": 3}}
    engine = _Engine(clock, (2.0, ModelResponse(output_tokens=[4], start=100.0, latency=1.5,
                                                ttft=0.25, stop_reason="length")))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    assert out.ttft_s == 0.25  # start == t0 is the engine's own start, not 102.0 - 1.5


async def test_no_ttft_without_a_streamed_first_token(clock: _Clock) -> None:
    call = {"prompt_ids": [1], "sampling": {"max_new_tokens": 1}}
    engine = _Engine(clock, (1.0, ModelResponse(output_tokens=[4], start=100.0, latency=1.0)))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    assert math.isnan(out.ttft_s) and out.latency_s == 1.0


async def test_a_call_without_segments_is_one_request_from_the_prompt(clock: _Clock) -> None:
    call = {"prompt_ids": [5, 6], "output_ids": [7, 8, 9], "segments": [],
            "sampling": {"max_new_tokens": 3, "seed": 4}}
    engine = _Engine(clock, (0.5, ModelResponse(output_tokens=[7, 8, 9], text="xyz")))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    [req] = engine.requests
    assert (req.input_ids, req.text, req.gconfig.max_new_tokens, req.gconfig.seed) == (
        [5, 6], None, 3, 4)
    assert (out.output_ids, out.text) == ([7, 8, 9], "xyz")


async def test_a_text_prompt_keeps_its_sampling_and_budget(clock: _Clock) -> None:
    # an AReaL-like record: text only, no segments; a sampling without a budget asks for 1
    call = {"prompt_text": "What is 2+3?", "sampling": {"temperature": 0.5, "seed": 11}}
    engine = _Engine(clock, (0.5, ModelResponse(output_tokens=[3], text="5")))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    [req] = engine.requests
    assert (req.text, req.input_ids) == ("What is 2+3?", [])
    assert (req.gconfig.max_new_tokens, req.gconfig.seed, req.gconfig.temperature) == (1, 11, 0.5)
    assert out.text == "5"
    call["sampling"] = {"max_new_tokens": 6}
    engine = _Engine(clock, (0.5, ModelResponse(output_tokens=[3], text="5")))
    await replay_call(engine, call)  # type: ignore[arg-type]
    assert engine.requests[0].gconfig.max_new_tokens == 6


async def test_an_error_midway_is_kept_and_stops_the_call(clock: _Clock) -> None:
    call = {"prompt_ids": [1, 2], "output_ids": [3, 4, 5],
            "sampling": {"max_new_tokens": 3, "seed": 1},
            "segments": [_seg(0, 1, 3, "abort"), _seg(1, 1, 2, "abort"), _seg(2, 1, 1, "length")]}
    engine = _Engine(clock,
                     (1.0, ModelResponse(output_tokens=[3], output_logprobs=[-1.0], text="c",
                                         stop_reason="abort", server="s1")),
                     (2.0, EngineError("boom", server="s1")),
                     (1.0, ModelResponse(output_tokens=[5])))
    out = await replay_call(engine, call)  # type: ignore[arg-type]
    assert len(engine.requests) == 2  # nothing sent after the failure
    assert out == Replayed(output_ids=[3], logprobs=[-1.0], stop_reason="abort", server="s1",
                           latency_s=3.0, ttft_s=out.ttft_s, text="c", error="EngineError: boom")
    assert math.isnan(out.ttft_s)


async def test_a_call_that_cannot_be_sent_raises(clock: _Clock) -> None:
    engine = _Engine(clock)
    with pytest.raises(ConfigError, match="no prompt to send"):
        await replay_call(engine, {"prompt_ids": [], "sampling": {}})  # type: ignore[arg-type]
    assert engine.requests == []


# -- compare: one frame row --------------------------------------------------------------


def _call(**kw: Any) -> dict[str, Any]:
    call = {"output_ids": [1, 2, 3, 4], "logprobs": [-0.5, -1.0, -1.5, -2.0],
            "seed": 7, "sampling": {"seed": 7, "temperature": 0.7}, "stop_reason": "length",
            "server": "10.0.0.1:8000", "version_end": 3, "latency_s": 0.75, "ttft_s": 0.25}
    return {**call, **kw}


def _now(ids: list[int], lps: list[float], **kw: Any) -> Replayed:
    return Replayed(**{"output_ids": ids, "logprobs": lps, "stop_reason": "length",
                       "server": "10.0.0.2:8000", "latency_s": 0.5, "ttft_s": 0.125, **kw})


def _row(**kw: Any) -> dict[str, Any]:
    row = {"first_divergence": None, "tokens_then": 4, "tokens_now": 4, "stop_then": "length",
           "stop_now": "length", "logprob_max_abs_delta": NAN, "logprob_mean_abs_delta": NAN,
           "seed": 7, "server_then": "10.0.0.1:8000", "server_now": "10.0.0.2:8000",
           "version_then": 3, "version_now": 3, "latency_then_s": 0.75,
           "latency_now_s": 0.5, "ttft_then_s": 0.25, "ttft_now_s": 0.125}
    return {**row, **kw}


def test_an_identical_call_row_field_by_field() -> None:
    now = _now([1, 2, 3, 4], [-0.5, -1.25, -1.5, -2.5], stop_reason="stop")
    row = compare_call(_call(), now, None, 3)
    assert _plain(row) == _row(status="identical", reason=None, stop_now="stop",
                               logprob_max_abs_delta=0.5, logprob_mean_abs_delta=0.1875)
    assert set(row) == set(FRAME_COLUMNS) - {"replay_task_id"}


def test_logprob_deltas_stop_at_the_first_divergence() -> None:
    now = _now([1, 2, 9, 9, 9], [-0.5, -0.75, -3.0, -3.0, -3.0])
    row = compare_call(_call(), now, None, 3)
    assert _plain(row) == _row(status="diverged", reason="diverged", first_divergence=2,
                               tokens_now=5, logprob_max_abs_delta=0.25,
                               logprob_mean_abs_delta=0.125)


def test_a_nan_logprob_on_one_side_is_left_out() -> None:
    row = compare_call(_call(logprobs=[math.nan, -1.0, -1.5, -2.0]),
                       _now([1, 2, 3, 4], [-0.5, -1.5, -1.5, -2.0]), None, 3)
    assert (row["logprob_max_abs_delta"], row["logprob_mean_abs_delta"]) == (0.5, 0.5 / 3)
    row = compare_call(_call(), _now([1, 2, 3, 4], []), None, 3)  # no logprobs now
    assert math.isnan(row["logprob_max_abs_delta"])


def test_a_failed_replay_row() -> None:
    now = Replayed(error="EngineError: boom", latency_s=0.5, ttft_s=math.nan)
    row = compare_call(_call(), now, None, 3)
    assert _plain(row) == _row(status="failed", reason="EngineError: boom", tokens_now=0,
                               stop_now=None, server_now=None, ttft_now_s=NAN)


def test_a_seeded_divergence_without_a_known_cause() -> None:
    now = _now([1, 2, 3, 5], [-0.5, -1.0, -1.5, -2.0])
    row = compare_call(_call(version_end=None), now, None, 0)
    assert (row["status"], row["reason"], row["first_divergence"]) == ("diverged", "diverged", 3)
    assert (row["version_then"], row["version_now"]) == (None, 0)
    row = compare_call(_call(), now, None, 3)  # the same version: no change named
    assert row["reason"] == "diverged"


def test_every_cause_is_named_in_order() -> None:
    now = _now([1, 2, 3, 5], [-0.5, -1.0, -1.5, -2.0])
    call = _call(seed=None, sampling={"seed": None, "temperature": 0.7})
    row = compare_call(call, now, None, 4)
    assert row["reason"] == ("unseeded sampling at temperature 0.7: not reproducible; "
                             "weight version changed (3 then, 4 now)")
    for sampling in ({"seed": None}, None):  # the default temperature
        row = compare_call(_call(sampling=sampling), now, None, 3)
        assert row["reason"] == "unseeded sampling at temperature 1.0: not reproducible"


def test_the_second_replay_tells_ignored_seeds_from_other_numerics() -> None:
    now = _now([1, 2, 3, 5], [], text="one")
    same = _now([1, 2, 3, 5], [], text="two")  # the same tokens (the text does not count)
    row = compare_call(_call(), now, same, 3)
    assert row["reason"] == ("the server repeats its own output for this seed but not the "
                             "recorded one: other weights, settings or numerics")
    other = _now([1, 2, 3, 6], [], text="one")
    row = compare_call(_call(), now, other, 3)
    assert row["reason"] == ("the server gave two different outputs for the same seed: it "
                             "does not honour seeds")
    failed = Replayed(error="EngineError: boom")
    assert compare_call(_call(), now, failed, 3)["reason"] == "diverged"


def _text_call(text: str | None) -> dict[str, Any]:
    return _call(output_ids=[], logprobs=[], output_text=text, completion_tokens=8, seed=None,
                 sampling={"max_new_tokens": 8})


def test_a_dump_without_token_ids_compares_the_text() -> None:
    now = _now([], [], text="The answer is 6.")
    row = compare_call(_text_call("The answer is 5."), now, None, 3)
    assert (row["status"], row["first_divergence"], row["tokens_then"], row["tokens_now"]) == (
        "diverged", 14, 8, 0)
    again = _now([7], [], text="The answer is 6.")  # other ids, the same text
    row = compare_call(_text_call("The answer is 5."), now, again, 3)
    assert "repeats its own output" in row["reason"]
    row = compare_call(_text_call("The answer is 6."), now, None, 3)
    assert (row["status"], row["first_divergence"]) == ("identical", None)
    row = compare_call(_text_call(None), _now([], [], text=""), None, 3)  # nothing, both times
    assert (row["status"], row["first_divergence"]) == ("identical", None)


def test_matches_recording() -> None:
    ids = _call(output_text="abcd")
    assert matches_recording(ids, _now([1, 2, 3, 4], [], text="other text"))  # ids decide
    assert not matches_recording(ids, _now([1, 2, 3, 5], [], text="abcd"))
    assert matches_recording(_text_call("abc"), _now([], [], text="abc"))
    assert not matches_recording(_text_call("abc"), _now([], [], text="abd"))
    assert matches_recording(_text_call(None), _now([], [], text=""))
    assert not matches_recording(_text_call(None), _now([], [], text="x"))


def test_first_divergence_of_text_and_of_a_longer_first() -> None:
    assert first_divergence("abc", "abd") == 2
    assert first_divergence([1, 2, 3], [1, 2]) == 2
    assert first_divergence([], []) is None


def test_missing_rows_keep_what_was_recorded() -> None:
    empty = dict.fromkeys(FRAME_COLUMNS)
    assert missing_row("task 4 is not in the dump") == {
        **empty, "status": "not_replayed", "reason": "task 4 is not in the dump"}
    row = missing_row("no prompt", _call(completion_tokens=4))
    assert _plain(row) == {**empty, "status": "not_replayed", "reason": "no prompt",
                           "tokens_then": 4, "stop_then": "length", "seed": 7,
                           "server_then": "10.0.0.1:8000", "version_then": 3,
                           "latency_then_s": 0.75, "ttft_then_s": 0.25}
    assert missing_row("no prompt", _text_call(None))["tokens_then"] == 8  # the count
