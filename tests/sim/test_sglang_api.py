"""SGLang flavour over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from rollout_kit.sim import ByteTokenizer, SimCluster, serve

from .helpers import SLOW, GateSpy, first_tokens, post, sse, wait_state

TOK = ByteTokenizer()
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def sg() -> AsyncIterator[tuple[SimCluster, aiohttp.ClientSession]]:
    async with serve("sglang", time_scale=0.01, context_length=512) as c, \
            aiohttp.ClientSession() as s:
        yield c, s


async def test_generate_text_shape_and_timing(sg) -> None:
    c, s = sg
    st, body = await post(s, c.url + "/generate", {
        "text": "What is 2+2?", "rid": "r1", "return_logprob": True,
        "sampling_params": {"max_new_tokens": 300, "temperature": 0.7}})
    assert st == 200
    meta = body["meta_info"]
    assert meta["id"] == "r1" and meta["prompt_tokens"] == len(TOK.encode("What is 2+2?"))
    assert meta["weight_version"] == "default" and meta["cached_tokens"] == 0
    assert meta["completion_tokens"] == len(body["output_ids"])
    assert meta["finish_reason"] == {"type": "stop", "matched": TOK.eos_token_id}
    assert body["output_ids"][-1] == TOK.eos_token_id
    assert body["text"] == TOK.decode(body["output_ids"])
    lps = meta["output_token_logprobs"]
    assert [t[1] for t in lps] == body["output_ids"] and all(t[2] is None for t in lps)
    assert meta["input_token_logprobs"] == [[None, TOK.encode("?")[0], None]]
    timing = meta["sim_timing"]
    assert set(timing) >= {"queue_s", "prefill_s", "decode_s", "e2e_s", "first_token_s"}
    assert meta["e2e_latency"] >= timing["prefill_s"] + timing["decode_s"] > 0
    # same request again: identical output (deterministic), and a prefix-cache miss
    _st2, body2 = await post(s, c.url + "/generate", {
        "text": "What is 2+2?", "rid": "r1", "sampling_params": {"max_new_tokens": 300,
                                                                 "temperature": 0.7}})
    assert body2["output_ids"] == body["output_ids"] and body2["text"] == body["text"]


async def test_input_ids_batch_n_and_length(sg) -> None:
    c, s = sg
    st, body = await post(s, c.url + "/generate", {
        "input_ids": [[10, 11, 12], [20, 21]],
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True, "n": 2}})
    assert st == 200 and isinstance(body, list) and len(body) == 4
    assert [b["meta_info"]["prompt_tokens"] for b in body] == [3, 3, 2, 2]
    for b in body:
        assert b["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
        assert len(b["output_ids"]) == 4
    assert body[0]["output_ids"] != body[1]["output_ids"]  # different samples
    st, one = await post(s, c.url + "/generate", {"text": ["only"],
                                                    "sampling_params": {"max_new_tokens": 2}})
    assert st == 200 and isinstance(one, list) and len(one) == 1


async def test_answer_fn_stop_and_text_in_logprobs() -> None:
    async with serve("sglang", zero_latency=True, answer_fn=lambda p: f"echo:{p}") as c, \
            aiohttp.ClientSession() as s:
        _st, body = await post(s, c.url + "/generate", {
            "text": "hi there", "return_logprob": True, "return_text_in_logprobs": True,
            "top_logprobs_num": 2, "sampling_params": {"max_new_tokens": 64}})
        assert body["text"] == "echo:hi there"
        lps = body["meta_info"]["output_token_logprobs"]
        assert "".join(t[2] for t in lps[:-1]) == "echo:hi there"
        tops = body["meta_info"]["output_top_logprobs"]
        assert len(tops) == len(lps) and all(len(t) == 2 for t in tops)
        _st, body = await post(s, c.url + "/generate", {
            "text": "hi there", "sampling_params": {"max_new_tokens": 64, "stop": ["there"]}})
        assert body["text"] == "echo:hi " and body["meta_info"]["finish_reason"] == {
            "type": "stop", "matched": "there"}
        colon = TOK.encode(":")[0]
        _st, body = await post(s, c.url + "/generate", {
            "text": "x", "sampling_params": {"max_new_tokens": 64, "stop_token_ids": [colon]}})
        assert body["text"] == "echo" and body["output_ids"][-1] == colon
        assert body["meta_info"]["finish_reason"]["matched"] == colon


async def test_stream_cumulative_and_done(sg) -> None:
    c, s = sg
    st, events = await sse(s, c.url + "/generate", {
        "text": "abc", "stream": True, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}})
    assert st == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 6
    for i, ch in enumerate(chunks, 1):
        assert len(ch["output_ids"]) == i  # cumulative (0.5.23)
        assert len(ch["meta_info"]["output_token_logprobs"]) == i
        assert ch["text"] == TOK.decode(ch["output_ids"])
    assert all(ch["meta_info"]["finish_reason"] is None for ch in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6}
    assert "e2e_latency" in last and "sim_timing" in last
    assert "e2e_latency" not in chunks[0]["meta_info"]


async def test_stream_incremental_and_batch_index() -> None:
    async with serve("sglang", zero_latency=True, sglang_incremental_streaming=True) as c, \
            aiohttp.ClientSession() as s:
        _st, events = await sse(s, c.url + "/generate", {
            "text": ["a", "b"], "stream": True,
            "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
        chunks = [e for e in events if e != "[DONE]"]
        assert {ch["index"] for ch in chunks} == {0, 1}
        for idx in (0, 1):
            mine = [ch for ch in chunks if ch["index"] == idx]
            assert sum(len(ch["output_ids"]) for ch in mine) == 3
            assert all(len(ch["output_ids"]) == 1 for ch in mine)


async def test_errors_shapes(sg) -> None:
    c, s = sg
    url = c.url + "/generate"
    st, body = await post(s, url, {"sampling_params": {}})
    assert st == 400 and "should be provided" in body["error"]["message"]
    st, body = await post(s, url, {"input_ids": []})
    assert st == 400 and body["error"]["message"] == "input_ids cannot be empty."
    st, body = await post(s, url, {"text": "x", "sampling_params": {"top_p": 0}})
    assert st == 400 and body["error"]["message"] == "top_p must be in (0, 1], got 0.0."
    st, body = await post(s, url, {"text": "x", "sampling_params": {"temperature": -1}})
    assert st == 400 and "temperature must be non-negative" in body["error"]["message"]
    st, body = await post(s, url, {"text": "x" * 600})
    assert st == 400 and "longer than the model's context length (512" in \
        body["error"]["message"]
    st, body = await post(s, url, {"text": "x", "sampling_params": {"max_new_tokens": 10**9}})
    assert st == 400 and "exceeds the model's maximum context length" in \
        body["error"]["message"]
    st, body = await post(s, url, {"text": "x", "sampling_params": {"foo": 1}})
    assert st == 400 and isinstance(body["error"], str) and "unknown field `foo`" in body["error"]
    st, body = await post(s, url, {"text": 5})
    assert st == 400 and isinstance(body["error"], str) and "invalid type" in body["error"]
    st, body = await post(s, url, {"text": "x", "unknown_top_level": 1,
                                   "sampling_params": {"max_new_tokens": 1}})
    assert st == 200
    async with s.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as r:
        body = await r.json()
        assert r.status == 400 and body["object"] == "error" and body["code"] == 400
        assert "Traceback" not in body["message"]
    st, events = await sse(s, url, {"text": "x", "stream": True,
                                    "sampling_params": {"top_p": 0}})
    assert st == 200 and events[-1] == "[DONE]"
    assert events[0]["error"]["code"] == 400 and "top_p" in events[0]["error"]["message"]


async def test_control_endpoints(sg) -> None:
    c, s = sg
    for path in ("/health", "/health_generate"):
        async with s.get(c.url + path) as r:
            assert r.status == 200 and await r.read() == b""
    for path in ("/get_model_info", "/model_info"):
        async with s.get(c.url + path) as r:
            info = await r.json()
            assert info["model_path"] == "sim-model" and info["weight_version"] == "default"
    for path in ("/get_server_info", "/server_info"):
        async with s.get(c.url + path) as r:
            info = await r.json()
            assert info["context_length"] == 512 and info["status"] == "ready"
            assert info["internal_states"][0]["load"] == 0
    async with s.get(c.url + "/v1/models") as r:
        models = await r.json()
        assert models["data"][0]["id"] == "sim-model" and models["data"][0]["owned_by"] == "sglang"
    async with s.post(c.url + "/flush_cache") as r:
        assert r.status == 200 and (await r.text()).startswith("Cache flushed.")
    st, body = await post(s, c.url + "/update_weights_from_disk",
                          {"model_path": "/ckpt/step_1", "weight_version": "step_1"})
    assert st == 200 and body["success"] is True
    assert c[0].weight_version == 1
    st, gen = await post(s, c.url + "/generate", {"text": "x",
                                                  "sampling_params": {"max_new_tokens": 1}})
    assert gen["meta_info"]["weight_version"] == "step_1"
    st, body = await post(s, c.url + "/update_weights_from_disk", {"model_path": "/ckpt/2"})
    assert st == 200 and c[0].weight_version == 2 and c[0].weight_label == "2"
    st, body = await post(s, c.url + "/update_weights_from_disk", {})
    assert st == 400
    async with s.get(c.url + "/metrics") as r:
        text = await r.text()
    assert "sglang:num_running_reqs" in text and "sglang:prompt_tokens_total" in text
    assert "sglang:time_to_first_token_seconds_bucket" in text


async def test_prefix_cache_reported(sg) -> None:
    c, s = sg
    prompt = "p" * 100
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 1}}
    _, first = await post(s, c.url + "/generate", body)
    _, second = await post(s, c.url + "/generate", body)
    assert first["meta_info"]["cached_tokens"] == 0
    assert second["meta_info"]["cached_tokens"] == 96


@pytest.fixture
async def sg_slow() -> AsyncIterator[tuple[SimCluster, aiohttp.ClientSession]]:
    """Requests of 400 tokens run 8 s: a test acts on them while they run, then aborts."""
    async with serve("sglang", context_length=512, **SLOW) as c, \
            aiohttp.ClientSession() as s:
        yield c, s


async def test_abort_request_by_rid_prefix_and_all(sg_slow) -> None:
    c, s = sg_slow
    body = {"text": "long", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
            "return_logprob": True}
    t1 = asyncio.create_task(post(s, c.url + "/generate", {**body, "rid": "job-1-a"}))
    t2 = asyncio.create_task(post(s, c.url + "/generate", {**body, "rid": "other"}))
    # both running, job-1-a with a token out (so its partial output is not empty)
    await first_tokens(c[0], "job-1-a")
    await first_tokens(c[0], "other", tokens=0)
    async with s.post(c.url + "/abort_request", json={"rid": "job-1"}) as r:
        assert r.status == 200
    st, res = await t1
    assert st == 200
    fr = res["meta_info"]["finish_reason"]
    assert fr["type"] == "abort" and fr["message"] == "Aborted"
    assert 0 < len(res["output_ids"]) < 400
    assert len(res["meta_info"]["output_token_logprobs"]) == len(res["output_ids"])
    assert not t2.done()
    async with s.post(c.url + "/abort_request", json={"abort_all": True}) as r:
        assert r.status == 200
    st, res2 = await t2
    assert res2["meta_info"]["finish_reason"]["type"] == "abort"


async def test_pause_continue_holds_new_requests(sg_slow) -> None:
    c, s = sg_slow
    gate = GateSpy(c[0])
    body = {"text": "q", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    inflight = asyncio.create_task(post(s, c.url + "/generate", body))
    await first_tokens(c[0])  # in flight with a token out: the pause cuts a partial output
    st, res = await post(s, c.url + "/pause_generation", {})
    assert st == 200 and res == {"message": "Generation paused successfully.", "status": "ok"}
    st, aborted = await inflight
    assert aborted["meta_info"]["finish_reason"]["type"] == "abort"
    partial = aborted["output_ids"]
    assert 0 < len(partial) < 400
    held = asyncio.create_task(post(s, c.url + "/generate", {
        "text": "q", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}))
    await gate.wait_held()  # it reached the server and waits in the pause gate
    await asyncio.sleep(0.1)
    assert not held.done() and gate.held == 1  # a pause holds it until continue
    assert c[0].engine.running == 0 and not c[0].engine.live
    st, res = await post(s, c.url + "/continue_generation", {})
    assert res["status"] == "ok"
    st, done = await asyncio.wait_for(held, 5)
    assert st == 200 and done["meta_info"]["finish_reason"]["type"] == "length"


async def test_abort_in_waiting_queue() -> None:
    # "a" holds the one slot for 6 s (aborted below), so "b" waits until it is aborted
    async with serve("sglang", max_num_seqs=1, **SLOW) as c, \
            aiohttp.ClientSession() as s:
        body = {"sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}
        t1 = asyncio.create_task(post(s, c.url + "/generate", {**body, "text": "a", "rid": "a"}))
        await wait_state(s, c.url, running=1)
        t2 = asyncio.create_task(post(s, c.url + "/generate", {**body, "text": "b", "rid": "b"}))
        await wait_state(s, c.url, running=1, waiting=1)
        async with s.post(c.url + "/abort_request", json={"rid": "b"}):
            pass
        _st, res = await t2
        assert res["meta_info"]["finish_reason"]["message"] == "Abort in waiting queue"
        assert res["output_ids"] == [] and res["meta_info"]["completion_tokens"] == 0
        async with s.post(c.url + "/abort_request", json={"abort_all": True}):
            pass
        await t1


async def test_queue_full_answers_503() -> None:
    # the one slot is taken by a 1000-token request (20 s at 20 ms a token; aborted below)
    async with serve("sglang", max_num_seqs=1, max_waiting=0, **SLOW) as c, \
            aiohttp.ClientSession() as s:
        body = {"text": "a", "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}}
        t1 = asyncio.create_task(post(s, c.url + "/generate", body))
        await first_tokens(c[0], tokens=0)
        st, err = await post(s, c.url + "/generate", body)
        assert st == 503 and err["code"] == 503 and err["object"] == "error"
        async with s.post(c.url + "/abort_request", json={"abort_all": True}):
            pass
        await t1
