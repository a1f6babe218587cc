"""Differential test: the simulator's vLLM flavour against the REAL vLLM 0.32 server (CPU).

The same requests go to both; response *shapes* (keys and JSON types, recursively, see
``shapes.py``), status codes, finish reasons and error shapes must agree. Allowed differences
are listed in ``SIM_EXTENSIONS`` and next to each comparison, each with its reason. Values that
depend on the model (text, token ids, logprobs, prompt token counts of *text* prompts: the
simulator tokenizes bytes) are not compared, only their types.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from rollout_kit.sim import SimCluster, serve
from rollout_kit.testing import VLLMCPUServer
from tests.realserver.shapes import shape_diff
from tests.realserver.test_vllm_cpu_contract import (
    Outcome,
    abort_in_flight,
    control,
    stream_events,
)

pytestmark = pytest.mark.vllm_cpu

PROMPT = [0, 50, 60, 70, 80]
#: Fields only the simulator sends: its own server-side timings (documented extension, see
#: ``rollout_kit.sim``), on final bodies and final stream chunks.
SIM_EXTENSIONS = ("sim_timing",)

Reply = tuple[int, Any]


def strip_extensions(body: Any) -> Any:
    """``body`` without the simulator's extension fields (top level only)."""
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if k not in SIM_EXTENSIONS}
    return body


def assert_same_shape(real: Any, sim: Any, what: str) -> None:
    diff = shape_diff(real, strip_extensions(sim))
    assert not diff, f"{what}: the simulator differs from real vLLM:\n" + "\n".join(diff)


@dataclass
class Pair:
    """One HTTP session per server, each with its base URL."""

    real: aiohttp.ClientSession
    sim: aiohttp.ClientSession
    cluster: SimCluster
    real_url: str  # the dev-mode vLLM server's, to freeze it

    async def both(self, method: str, path: str, **kw: Any) -> tuple[Reply, Reply]:
        async def one(http: aiohttp.ClientSession) -> Reply:
            async with http.request(method, path, **kw) as resp:
                raw = await resp.read()
                try:
                    return resp.status, json.loads(raw) if raw else raw
                except ValueError:
                    return resp.status, raw
        real, sim = await asyncio.gather(one(self.real), one(self.sim))
        return real, sim

    async def complete(self, **body: Any) -> tuple[Reply, Reply]:
        return await self.both("POST", "/v1/completions",
                               json={"model": "tiny", "prompt": PROMPT, "max_tokens": 4, **body})


@pytest.fixture
async def pair(vllm_cpu_server: VLLMCPUServer) -> AsyncIterator[Pair]:
    timeout = aiohttp.ClientTimeout(total=60)
    # the real server's served name, context and flags (AGENT_ARGS: prompt tokens details);
    # ITL slow enough to pause mid-generation
    async with serve("vllm", n=1, model_name=vllm_cpu_server.model,
                     context_length=vllm_cpu_server.max_model_len, itl_s=0.004,
                     prompt_tokens_details=True,
                     prefill_overhead_s=0.002, jitter_cv=0.0) as cluster, \
            aiohttp.ClientSession(base_url=vllm_cpu_server.url, timeout=timeout) as real, \
            aiohttp.ClientSession(base_url=cluster.urls[0], timeout=timeout) as sim:
        yield Pair(real, sim, cluster, vllm_cpu_server.url)


# ------------------------------------------------------------------------------ completions


async def test_completion_token_ids_and_logprobs(pair: Pair) -> None:
    (rs, real), (ss, sim) = await pair.complete(
        max_tokens=6, ignore_eos=True, logprobs=0, return_tokens_as_token_ids=True,
        return_token_ids=True)
    assert rs == ss == 200, (real, sim)
    assert_same_shape(real, sim, "completion")
    for body in (real, sim):
        [choice] = body["choices"]
        assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
        assert choice["prompt_token_ids"] == PROMPT and len(choice["token_ids"]) == 6
        assert [t.split(":")[0] for t in choice["logprobs"]["tokens"]] == ["token_id"] * 6
        assert body["usage"]["prompt_tokens"] == len(PROMPT)
        assert body["usage"]["completion_tokens"] == 6
        assert body["system_fingerprint"].startswith("vllm-0.32.0-")
        assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
        assert body["model"] == "tiny"


async def test_string_prompt_n2(pair: Pair) -> None:
    (rs, real), (ss, sim) = await pair.complete(prompt="The quick brown fox", n=2,
                                                max_tokens=3, ignore_eos=True,
                                                return_token_ids=True)
    assert rs == ss == 200, (real, sim)
    assert_same_shape(real, sim, "n=2 completion")
    for body in (real, sim):
        assert [c["index"] for c in body["choices"]] == [0, 1]
        assert [c["finish_reason"] for c in body["choices"]] == ["length", "length"]
        # the prompt is counted once, not once per sample
        prompt_ids = body["choices"][0]["prompt_token_ids"]
        assert body["choices"][1]["prompt_token_ids"] == prompt_ids
        assert body["usage"]["prompt_tokens"] == len(prompt_ids)
        assert body["usage"]["completion_tokens"] == 6


def _stream_payload(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "prompt": PROMPT, "max_tokens": 3, "ignore_eos": True,
            "stream": True, **extra}


@pytest.mark.parametrize("extra", [
    {"return_token_ids": True, "stream_options": {"include_usage": True}},
    {"return_token_ids": True, "logprobs": 0, "return_tokens_as_token_ids": True,
     "stream_options": {"include_usage": True}},
    {},
], ids=["ids+usage", "ids+logprobs+usage", "plain"])
async def test_stream_chunk_sequence(pair: Pair, extra: dict[str, Any]) -> None:
    real, sim = await asyncio.gather(stream_events(pair.real, _stream_payload(**extra)),
                                     stream_events(pair.sim, _stream_payload(**extra)))
    usage = bool(extra.get("stream_options"))
    for events in (real, sim):
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        deltas = chunks[:-1] if usage else chunks
        assert all(len(d["choices"]) == 1 for d in deltas)
        finishes = [d["choices"][0]["finish_reason"] for d in deltas]
        assert finishes[-1] == "length" and set(finishes[:-1]) <= {None}
        ids = [d["choices"][0]["token_ids"] for d in deltas]
        prompt_ids = [d["choices"][0]["prompt_token_ids"] for d in deltas]
        if extra.get("return_token_ids"):
            assert sum(len(x) for x in ids) == 3
            assert prompt_ids[0] == PROMPT and set(map(str, prompt_ids[1:])) <= {"None"}
        else:
            assert set(map(str, ids + prompt_ids)) == {"None"}
        assert all("usage" not in d for d in deltas)  # 0.32 leaves usage out of deltas
        # system_fingerprint only on the last chunk before [DONE]
        assert [("system_fingerprint" in c) for c in chunks] == [False] * (len(chunks) - 1) + [
            True]
        if usage:
            assert chunks[-1]["choices"] == []
            totals = dict(chunks[-1]["usage"])
            # --enable-prompt-tokens-details: streamed, the details hold cached_tokens only
            assert set(totals.pop("prompt_tokens_details")) == {"cached_tokens"}
            assert totals == {"prompt_tokens": len(PROMPT), "completion_tokens": 3,
                              "total_tokens": len(PROMPT) + 3}
    # chunk by chunk: the first delta, a middle one, the finishing one, the usage chunk.
    # (vLLM may merge deltas, so the counts are not compared; text "" vs "x" is a value.)
    real_chunks, sim_chunks = real[:-1], sim[:-1]
    pick = [0, -1] if not usage else [0, -2, -1]
    if len(real_chunks) - usage == 1:  # a busy server merged every delta into the last one:
        pick = pick[1:]                # its first delta is its finishing one, compared below
    for i in pick:
        assert_same_shape(real_chunks[i], sim_chunks[i], f"stream chunk {i} ({extra})")


# ------------------------------------------------------------------ operational endpoints


async def test_models_version_health(pair: Pair) -> None:
    (rs, real), (ss, sim) = await pair.both("GET", "/v1/models")
    assert rs == ss == 200
    assert_same_shape(real, sim, "/v1/models")
    # root: the real server reports the model folder, the simulator the model name
    for body in (real, sim):
        [card] = body["data"]
        assert card["id"] == "tiny" and card["max_model_len"] == 1024
        assert card["owned_by"] == "vllm"
    (rs, real), (ss, sim) = await pair.both("GET", "/version")
    assert rs == ss == 200 and real == sim == {"version": "0.32.0"}
    (rs, real), (ss, sim) = await pair.both("GET", "/health")
    assert rs == ss == 200 and real == sim == b""
    (rs, real), (ss, sim) = await pair.both("GET", "/is_paused")
    assert rs == ss == 200 and real == sim == {"is_paused": False}


# ------------------------------------------------------------------------------ errors

ERROR_CASES: list[tuple[str, dict[str, Any]]] = [
    ("prompt-too-long", {"json": {"model": "tiny", "prompt": [5] * 1100}}),
    ("unknown-model", {"json": {"model": "nope", "prompt": PROMPT}}),
    ("top-p-zero", {"json": {"model": "tiny", "prompt": PROMPT, "top_p": 0}}),
    ("top-p-above-one", {"json": {"model": "tiny", "prompt": PROMPT, "top_p": 1.5}}),
    ("negative-temperature", {"json": {"model": "tiny", "prompt": PROMPT, "temperature": -1}}),
    ("max-tokens-zero", {"json": {"model": "tiny", "prompt": PROMPT, "max_tokens": 0}}),
    ("max-tokens-too-large", {"json": {"model": "tiny", "prompt": PROMPT, "max_tokens": 3000}}),
    ("max-tokens-not-int", {"json": {"model": "tiny", "prompt": PROMPT, "max_tokens": "many"}}),
    ("n-fraction", {"json": {"model": "tiny", "prompt": PROMPT, "n": 1.5}}),
    ("bool-not-bool", {"json": {"model": "tiny", "prompt": PROMPT, "ignore_eos": "x"}}),
    ("logprobs-negative", {"json": {"model": "tiny", "prompt": PROMPT, "logprobs": -2}}),
    ("logprobs-too-many", {"json": {"model": "tiny", "prompt": PROMPT, "logprobs": 50}}),
    ("stream-options-without-stream",
     {"json": {"model": "tiny", "prompt": PROMPT, "stream_options": {"include_usage": True}}}),
    ("missing-prompt", {"json": {"model": "tiny", "max_tokens": 3}}),
    ("empty-prompt", {"json": {"model": "tiny", "prompt": []}}),
    ("negative-token-id", {"json": {"model": "tiny", "prompt": [0, -1]}}),
    ("malformed-json", {"data": b"{bad", "headers": {"Content-Type": "application/json"}}),
    ("empty-body", {"data": b"", "headers": {"Content-Type": "application/json"}}),
    ("body-not-object", {"json": [1, 2]}),
]


@pytest.mark.parametrize(("case", "request_kw"), ERROR_CASES, ids=[c for c, _ in ERROR_CASES])
async def test_error_shapes(pair: Pair, case: str, request_kw: dict[str, Any]) -> None:
    (rs, real), (ss, sim) = await pair.both("POST", "/v1/completions", **request_kw)
    assert rs == ss and 400 <= rs < 500, (real, sim)
    assert set(real) == set(sim) == {"error"}
    r, s = real["error"], sim["error"]
    assert set(r) == set(s) == {"message", "type", "param", "code"}
    assert (r["type"], r["param"], r["code"]) == (s["type"], s["param"], s["code"]), (r, s)
    if r["type"] == "Bad Request":
        # request validation: pydantic's wording has details (extra "ctx", several
        # alternatives tried for union fields) the simulator does not copy; the count line
        # may differ for unions, the location of the first error may not
        loc = r["message"].split("'loc': ", 1)[1].split(",", 1)[0]
        assert f"'loc': {loc}," in s["message"], (r, s)
    else:
        assert r["message"] == s["message"], (r, s)


async def test_pause_with_bad_mode(pair: Pair) -> None:
    (rs, real), (ss, sim) = await pair.both("POST", "/pause", params={"mode": "bogus"})
    assert rs == ss == 400
    assert_same_shape(real, sim, "/pause?mode=bogus")
    assert real["error"]["param"] == sim["error"]["param"] == "query.mode"


async def test_accepts_what_pydantic_coerces(pair: Pair) -> None:
    # lax mode: "yes" is a boolean, "3" an integer, "0.5" a number
    (rs, real), (ss, sim) = await pair.complete(stream=False, ignore_eos="yes", max_tokens="3",
                                                top_p="0.5", return_token_ids=True)
    assert rs == ss == 200, (real, sim)
    assert_same_shape(real, sim, "coerced values")
    assert len(real["choices"][0]["token_ids"]) == len(sim["choices"][0]["token_ids"]) == 3


# ------------------------------------------------------------------------------ pause / resume


async def _abort_outcome(http: aiohttp.ClientSession, freeze: str | None) -> Outcome:
    """Pause one server with requests in flight; check ``/is_paused`` and ``/resume``; leave
    the server resumed."""
    try:
        outcome = await abort_in_flight(http, freeze)
        assert await control(http, "GET", "/is_paused") == (200, {"is_paused": True})
    finally:
        assert await control(http, "POST", "/resume") == (200, {"status": "resumed"})
    assert await control(http, "GET", "/is_paused") == (200, {"is_paused": False})
    return outcome


async def test_pause_abort_in_flight_then_resume(pair: Pair) -> None:
    real_plain, real_events = await _abort_outcome(pair.real, pair.real_url)
    sim_plain, sim_events = await _abort_outcome(pair.sim, None)
    for plain, events in ((real_plain, real_events), (sim_plain, sim_events)):
        for status, body in plain:
            assert status == 200, body
            [choice] = body["choices"]
            assert choice["finish_reason"] == "abort"
            assert 0 < len(choice["token_ids"]) < 1000
            assert body["usage"]["completion_tokens"] == len(choice["token_ids"])
        assert events[-1] == "[DONE]"
        finishes = [e["choices"][0]["finish_reason"] for e in events[:-1]]
        assert finishes[-1] == "abort" and set(finishes[:-1]) == {None}
    assert_same_shape(real_plain[0][1], sim_plain[0][1], "aborted completion")
    assert_same_shape(real_events[0], sim_events[0], "first chunk of an aborted stream")
    assert_same_shape(real_events[-2], sim_events[-2], "last chunk of an aborted stream")
