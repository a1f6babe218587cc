"""vLLM flavour over real HTTP on 127.0.0.1, incl. the official openai client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from rollout_kit.sim import ByteTokenizer, SimCluster, serve

from .helpers import SLOW, GateSpy, first_tokens, post, sse

TOK = ByteTokenizer()
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def vl() -> AsyncIterator[tuple[SimCluster, aiohttp.ClientSession]]:
    async with serve("vllm", time_scale=0.01, context_length=512) as c, \
            aiohttp.ClientSession() as s:
        yield c, s


async def test_completion_shape_with_token_ids_and_logprobs(vl) -> None:
    c, s = vl
    prompt = [5, 6, 7, 8]
    st, body = await post(s, c.url + "/v1/completions", {
        "model": "sim-model", "prompt": prompt, "max_tokens": 300, "logprobs": 0,
        "return_tokens_as_token_ids": True, "return_token_ids": True, "temperature": 1.0,
        "top_p": 1.0, "top_k": -1, "unknown_field": {"ignored": True}})
    assert st == 200
    assert set(body) >= {"id", "object", "created", "model", "choices", "usage",
                         "service_tier", "system_fingerprint", "kv_transfer_params",
                         "sim_timing"}
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    ch = body["choices"][0]
    assert set(ch) == {"index", "text", "logprobs", "finish_reason", "stop_reason",
                       "token_ids", "prompt_logprobs", "prompt_token_ids", "routed_experts"}
    assert ch["prompt_token_ids"] == prompt and ch["finish_reason"] == "stop"
    assert ch["stop_reason"] is None and ch["token_ids"][-1] == TOK.eos_token_id
    lp = ch["logprobs"]
    assert [int(t.split(":")[1]) for t in lp["tokens"]] == ch["token_ids"]
    assert len(lp["token_logprobs"]) == len(ch["token_ids"])
    assert all(len(d) == 1 for d in lp["top_logprobs"])
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": len(ch["token_ids"]),
                             "total_tokens": 4 + len(ch["token_ids"]),
                             "prompt_tokens_details": None, "completion_tokens_details": None}
    assert body["sim_timing"]["e2e_s"] > 0


async def test_default_max_tokens_batch_and_n(vl) -> None:
    c, s = vl
    st, body = await post(s, c.url + "/v1/completions", {
        "prompt": ["one", "two"], "n": 2, "ignore_eos": True, "seed": 3})
    assert st == 200 and [ch["index"] for ch in body["choices"]] == [0, 1, 2, 3]
    assert all(len(TOK.encode(ch["text"])) == 16 for ch in body["choices"])  # default 16
    assert all(ch["finish_reason"] == "length" for ch in body["choices"])
    assert body["usage"]["prompt_tokens"] == 6 and body["usage"]["completion_tokens"] == 64
    assert body["choices"][0]["text"] != body["choices"][1]["text"]


async def test_stop_strings_and_stop_token_ids() -> None:
    async with serve("vllm", zero_latency=True, answer_fn=lambda p: "The answer is 4.") as c, \
            aiohttp.ClientSession() as s:
        _st, b = await post(s, c.url + "/v1/completions", {"prompt": "q", "stop": ["is"],
                                                           "max_tokens": 50})
        ch = b["choices"][0]
        assert ch["text"] == "The answer " and ch["stop_reason"] == "is"
        dot = TOK.encode(".")[0]
        _st, b = await post(s, c.url + "/v1/completions", {
            "prompt": "q", "stop_token_ids": [dot], "max_tokens": 50, "return_token_ids": True})
        ch = b["choices"][0]
        assert ch["text"] == "The answer is 4" and ch["stop_reason"] == dot
        assert ch["token_ids"][-1] == dot
        _st, b = await post(s, c.url + "/v1/completions", {"prompt": "q", "max_tokens": 3})
        assert b["choices"][0]["text"] == "The" and b["choices"][0]["finish_reason"] == "length"


async def test_stream_with_usage(vl) -> None:
    c, s = vl
    st, events = await sse(s, c.url + "/v1/completions", {
        "prompt": "hello", "max_tokens": 5, "ignore_eos": True, "stream": True,
        "return_token_ids": True, "logprobs": 1,
        "stream_options": {"include_usage": True}})
    assert st == 200 and events[-1] == "[DONE]"
    chunks = events[:-2]
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
        "prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    assert chunks[0]["choices"][0]["prompt_token_ids"] == TOK.encode("hello")
    assert all(ch["choices"][0]["prompt_token_ids"] is None for ch in chunks[1:])
    ids = [t for ch in chunks for t in ch["choices"][0]["token_ids"]]
    text = "".join(ch["choices"][0]["text"] for ch in chunks)
    assert len(ids) == 5 and text == TOK.decode(ids)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "sim_timing" in chunks[-1] and "usage" not in chunks[0]
    offsets = [o for ch in chunks for o in ch["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == sorted(offsets) and len(offsets) == 5


async def test_chat_completions_basic_and_stream(vl) -> None:
    c, s = vl
    msgs = [{"role": "user", "content": "hi"}]
    st, b = await post(s, c.url + "/v1/chat/completions", {
        "messages": msgs, "max_tokens": 4, "ignore_eos": True, "logprobs": True,
        "top_logprobs": 2})
    assert st == 200 and b["object"] == "chat.completion"
    ch = b["choices"][0]
    assert ch["message"]["role"] == "assistant" and len(ch["message"]["content"]) == 4
    assert len(ch["logprobs"]["content"]) == 4
    assert all(len(t["top_logprobs"]) == 2 for t in ch["logprobs"]["content"])
    st, events = await sse(s, c.url + "/v1/chat/completions", {
        "messages": msgs, "max_tokens": 3, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]" and events[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-2])
    assert len(content) == 3 and events[-2]["usage"]["completion_tokens"] == 3
    st, err = await post(s, c.url + "/v1/chat/completions", {"max_tokens": 3})
    assert st == 400 and err["error"]["code"] == 400


async def test_error_shapes(vl) -> None:
    c, s = vl
    url = c.url + "/v1/completions"
    st, b = await post(s, url, {"max_tokens": 3})
    assert st == 400 and b["error"] == {
        "message": "Either prompt or prompt_embeds must be provided and non-empty. "
                   "(parameter=prompt)",
        "type": "BadRequestError", "param": "prompt", "code": 400}
    st, b = await post(s, url, {"prompt": "x", "model": "nope"})
    assert st == 404 and b["error"]["type"] == "NotFoundError"
    assert b["error"]["message"] == "The model `nope` does not exist. Valid aliases: sim-model."
    st, b = await post(s, url, {"prompt": "x", "top_p": 0})
    assert st == 400 and b["error"]["message"] == (
        "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)")
    assert b["error"]["param"] == "top_p"
    st, b = await post(s, url, {"prompt": "x", "temperature": -0.5})
    assert st == 400 and "temperature must be non-negative" in b["error"]["message"]
    st, b = await post(s, url, {"prompt": "x" * 600})
    assert st == 400 and "maximum context length is 512" in b["error"]["message"]
    st, b = await post(s, url, {"prompt": "x", "max_tokens": 10**9})
    assert st == 400 and "cannot be greater than max_model_len=512" in b["error"]["message"]
    st, b = await post(s, url, {"prompt": "x", "max_tokens": 512, "ignore_eos": True})
    assert st == 200 and b["usage"]["completion_tokens"] == 511  # clamped to the context
    st, b = await post(s, url, {"prompt": "x", "max_tokens": "many"})
    assert st == 400 and b["error"]["type"] == "Bad Request"
    st, b = await post(s, url, {"prompt": "x", "logprobs": 50})
    assert st == 400 and "greater than max allowed: 20" in b["error"]["message"]
    st, b = await post(s, url, {"prompt": "x", "stream_options": {"include_usage": True}})
    assert st == 400 and "stream=True" in b["error"]["message"]
    async with s.post(url, data=b"{bad", headers={"Content-Type": "application/json"}) as r:
        b = await r.json()
        assert r.status == 400 and set(b["error"]) == {"message", "type", "param", "code"}
        assert "Traceback" not in b["error"]["message"]
    st, b = await post(s, url, [1, 2])
    assert st == 400


async def test_flat_errors_and_reject_policy() -> None:
    async with serve("vllm", zero_latency=True, context_length=100, flat_errors=True,
                     max_tokens_policy="reject") as c, aiohttp.ClientSession() as s:
        st, b = await post(s, c.url + "/v1/completions", {"prompt": "x" * 10, "max_tokens": 95})
        assert st == 400 and b["object"] == "error" and "is too large: 95" in b["message"]


async def test_operational_routes(vl) -> None:
    c, s = vl
    async with s.get(c.url + "/health") as r:
        assert r.status == 200 and await r.read() == b""
    async with s.get(c.url + "/version") as r:
        assert (await r.json()) == {"version": "0.32.0"}
    async with s.get(c.url + "/v1/models") as r:
        card = (await r.json())["data"][0]
        assert card["id"] == "sim-model" and card["max_model_len"] == 512
        assert card["permission"][0]["object"] == "model_permission"
    _st, tk = await post(s, c.url + "/tokenize", {"prompt": "héllo"})
    assert tk["count"] == 6 and tk["tokens"] == TOK.encode("héllo")
    _st, dt = await post(s, c.url + "/detokenize", {"tokens": tk["tokens"]})
    assert dt == {"prompt": "héllo"}


@pytest.fixture
async def vl_slow() -> AsyncIterator[tuple[SimCluster, aiohttp.ClientSession]]:
    """Requests of 400 tokens run 8 s: a test acts on them while they run, then aborts."""
    async with serve("vllm", context_length=512, **SLOW) as c, \
            aiohttp.ClientSession() as s:
        yield c, s


async def test_pause_resume_dev_routes_hold(vl_slow) -> None:
    c, s = vl_slow
    gate = GateSpy(c[0])
    body = {"prompt": "p", "max_tokens": 400, "ignore_eos": True, "return_token_ids": True}
    inflight = asyncio.create_task(post(s, c.url + "/v1/completions", body))
    await first_tokens(c[0])  # in flight with a token out: the pause cuts a partial output
    async with s.post(c.url + "/pause?mode=abort") as r:
        assert (await r.json()) == {"status": "paused"}
    st, res = await inflight
    ch = res["choices"][0]
    assert st == 200 and ch["finish_reason"] == "abort" and 0 < len(ch["token_ids"]) < 400
    async with s.get(c.url + "/is_paused") as r:
        assert (await r.json()) == {"is_paused": True}
    held = asyncio.create_task(post(s, c.url + "/v1/completions", {**body, "max_tokens": 2}))
    await gate.wait_held()  # it reached the server and waits in the pause gate
    await asyncio.sleep(0.1)
    assert not held.done() and gate.held == 1  # 0.32 holds new requests
    assert c[0].engine.running == 0 and not c[0].engine.live
    async with s.post(c.url + "/resume") as r:
        assert (await r.json()) == {"status": "resumed"}
    st, res = await asyncio.wait_for(held, 5)
    assert st == 200 and res["choices"][0]["finish_reason"] == "length"
    async with s.post(c.url + "/pause?mode=bogus") as r:
        err = (await r.json())["error"]  # FastAPI query validation, like vLLM 0.32
        assert r.status == 400 and err["param"] == "query.mode" and err["type"] == "Bad Request"


async def test_pause_reject_keep_wait_and_abort_requests() -> None:
    # 3 ms a token: a 300-token request runs 0.9 s, time enough for a pause to land while it
    # runs (it is waited for by condition first), short enough to run to its end below
    async with serve("vllm", time_scale=1.0, itl_s=0.003, paused_new_requests="reject") as c, \
            aiohttp.ClientSession() as s:
        eng = c[0].engine
        url = c.url + "/v1/completions"
        body = {"prompt": "p", "max_tokens": 300, "ignore_eos": True, "request_id": "abc"}
        async with s.post(c.url + "/pause?mode=abort"):
            pass
        st, b = await post(s, url, body)
        assert st == 503 and b["error"]["type"] == "ServiceUnavailableError"
        async with s.post(c.url + "/resume"):
            pass
        # keep: in-flight requests freeze and finish after resume with every token
        t = asyncio.create_task(post(s, url, body))
        (seq,) = await first_tokens(c[0], "cmpl-abc", tokens=0)
        async with s.post(c.url + "/pause?mode=keep"):
            pass
        assert eng.frozen and seq.state == "running" and seq.n_done < 300
        done_at_pause = seq.n_done
        await asyncio.sleep(0.1)
        assert not t.done() and seq.n_done == done_at_pause  # frozen where it was
        async with s.post(c.url + "/resume"):
            pass
        st, b = await t
        assert b["choices"][0]["finish_reason"] == "length"
        assert b["usage"]["completion_tokens"] == 300
        # wait: the pause call returns once in-flight requests drained
        t = asyncio.create_task(post(s, url, {**body, "max_tokens": 20}))
        (seq,) = await first_tokens(c[0], "cmpl-abc", tokens=0)
        async with s.post(c.url + "/pause?mode=wait"):
            pass
        # drained: the request ran to its end before the pause answered
        assert seq.state == "done" and eng.running == 0 and not eng.live
        assert (await t)[1]["choices"][0]["finish_reason"] == "length"
        async with s.post(c.url + "/resume"):
            pass
        # abort_requests by id prefix
        t = asyncio.create_task(post(s, url, body))
        await first_tokens(c[0], "cmpl-abc", tokens=0)
        st, res = await post(s, c.url + "/abort_requests", {"request_ids": ["cmpl-abc"]})
        assert res == {"status": "aborted", "aborted": 1}
        st, b = await t
        assert b["choices"][0]["finish_reason"] == "abort"


async def test_queue_full_answers_429() -> None:
    # the one slot is taken by a 1000-token request (20 s at 20 ms a token; aborted below)
    async with serve("vllm", max_num_seqs=1, max_waiting=0, **SLOW) as c, \
            aiohttp.ClientSession() as s:
        body = {"prompt": "a", "max_tokens": 1000, "ignore_eos": True}
        t1 = asyncio.create_task(post(s, c.url + "/v1/completions", body))
        await first_tokens(c[0], tokens=0)
        st, err = await post(s, c.url + "/v1/completions", body)
        assert st == 429 and err["error"]["code"] == 429
        async with s.post(c.url + "/abort_requests", json={}):
            pass
        await t1


async def test_openai_client_and_prometheus_parser() -> None:
    async with serve("vllm", time_scale=0.01) as c:
        client = AsyncOpenAI(base_url=c.url + "/v1", api_key="unused", max_retries=0)
        try:
            comp = await client.completions.create(model="sim-model", prompt="Say hi",
                                                   max_tokens=8, logprobs=1)
            assert comp.choices[0].finish_reason in ("stop", "length")
            assert comp.usage is not None and comp.usage.prompt_tokens == 6
            assert comp.choices[0].logprobs is not None
            stream = await client.completions.create(
                model="sim-model", prompt="Say hi", max_tokens=8, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            texts, usage = [], None
            async for chunk in stream:
                if chunk.choices:
                    texts.append(chunk.choices[0].text)
                if chunk.usage is not None:
                    usage = chunk.usage
            assert len("".join(texts)) == 8 and usage is not None
            assert usage.completion_tokens == 8
            chat = await client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            assert chat.choices[0].message.role == "assistant"
            models = await client.models.list()
            assert [m.id for m in models.data] == ["sim-model"]
        finally:
            await client.close()
        async with aiohttp.ClientSession() as s, s.get(c.url + "/metrics") as r:
            text = await r.text()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:prompt_tokens", "vllm:generation_tokens",
            "vllm:request_success", "vllm:time_to_first_token_seconds",
            "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds"} <= set(fams)
    gen = fams["vllm:generation_tokens"].samples[0]
    assert gen.value >= 20 and gen.labels == {"engine": "0", "model_name": "sim-model"}
    ttft_count = next(x for x in fams["vllm:time_to_first_token_seconds"].samples
                  if x.name.endswith("_count"))
    assert ttft_count.value == 3
