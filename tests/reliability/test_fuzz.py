"""Scenario 9: property-based fuzzing of the response parsers (both APIs) and the trace loader.

The parsers are fuzzed end to end: a loopback aiohttp server answers each generation request
with the body (or SSE events) hypothesis drew, and ``agenerate`` must either return a response
or raise a ``RolloutKitError`` subclass — never another exception, never a hang. Bodies are
arbitrary JSON (huge numbers, unicode, wrong types) and near-valid API shapes with keys
missing or of the wrong type. The trace loader gets arbitrary records after a valid header and
arbitrary bytes.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rollout_kit import (
    GenerationConfig,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    RolloutKitError,
    Timeouts,
)
from rollout_kit.engines import RemoteInfEngine
from rollout_kit.tracing import load_traces

from .conftest import make_engine

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- strategies ---------------------------------------------------------------------------

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1e308, -1e308, 2**63, 2**64 + 1, 10**40, 5e-324]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=20,
)
finish = st.one_of(json_values, st.sampled_from(["stop", "length", "abort", "repetition", "x"]),
                   st.fixed_dictionaries({"type": st.one_of(st.sampled_from(
                       ["stop", "length", "abort"]), json_values)},
                       optional={"message": json_values}))
token_lists = st.one_of(st.lists(st.integers(min_value=0, max_value=400), max_size=6),
                        st.lists(json_values, max_size=4), json_values)
logprob_lists = st.one_of(
    st.lists(st.tuples(st.one_of(st.floats(max_value=0, allow_nan=False), numbers, st.none()),
                       st.one_of(st.integers(min_value=0, max_value=400), json_values),
                       st.none()).map(list), max_size=6),
    json_values)


def maybe(d: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Each key present or missing."""
    return st.fixed_dictionaries({}, optional=d)


sglang_body = st.one_of(json_values, maybe({
    "text": st.one_of(st.text(), json_values), "output_ids": token_lists,
    "meta_info": st.one_of(json_values, maybe({
        "finish_reason": finish, "output_token_logprobs": logprob_lists,
        "completion_tokens": st.one_of(numbers, json_values),
        "prompt_tokens": st.one_of(numbers, json_values),
        "cached_tokens": st.one_of(numbers, json_values),
        "e2e_latency": json_values, "sim_timing": json_values})),
}))
vllm_choice = maybe({
    "text": st.one_of(st.text(), json_values), "token_ids": token_lists,
    "finish_reason": finish, "prompt_token_ids": token_lists,
    "logprobs": st.one_of(json_values, maybe({
        "token_logprobs": st.one_of(st.lists(st.one_of(numbers, st.none()), max_size=6),
                                    json_values),
        "tokens": st.one_of(st.lists(st.one_of(
            st.integers(0, 400).map(lambda i: f"token_id:{i}"), st.text(max_size=12)),
            max_size=6), json_values)})),
})
vllm_body = st.one_of(json_values, maybe({
    "choices": st.one_of(st.lists(vllm_choice, max_size=2), json_values),
    "usage": st.one_of(json_values, maybe({
        "prompt_tokens": st.one_of(numbers, json_values),
        "prompt_tokens_details": st.one_of(json_values, maybe({"cached_tokens": numbers}))})),
    "sim_timing": json_values, "prompt_token_ids": token_lists,
}))
BODIES = {"sglang": sglang_body, "vllm": vllm_body}

# -- a loopback server answering what the example drew --------------------------------------


class FuzzServer:
    """Answers every generation request with ``self.body`` (or ``self.events`` as SSE)."""

    def __init__(self) -> None:
        self.body: bytes = b"{}"
        self.events: list[bytes] = []
        self.runner: web.AppRunner | None = None
        self.address = ""

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        if not payload.get("stream"):
            return web.Response(body=self.body, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for ev in self.events:
            await resp.write(b"data: " + ev + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _ok(self, _: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fuzz"}]})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_get("/health", self._ok)
        app.router.add_get("/v1/models", self._ok)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.address = f"127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


class Harness:
    """One loop holding the server and one engine per (flavour, stream)."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.server = FuzzServer()
        self.engines: dict[tuple[str, bool], RemoteInfEngine] = {}

    def setup(self) -> None:
        self.runner.run(self.server.start())
        for flavour in ("sglang", "vllm"):
            for stream in (False, True):
                e = make_engine(flavour, [self.server.address], stream=stream,
                                retry=RetryPolicy(max_retries=0),
                                timeouts=Timeouts(request=5, total=5, setup=5, health=2))
                self.runner.run(e.initialize_async())
                self.engines[(flavour, stream)] = e

    def close(self) -> None:
        for e in self.engines.values():
            self.runner.run(e.close_async())
        self.runner.run(self.server.stop())
        self.runner.close()

    def generate(self, flavour: str, stream: bool) -> ModelResponse:
        engine = self.engines[(flavour, stream)]
        req = ModelRequest(input_ids=[1, 2, 3], gconfig=GenerationConfig(max_new_tokens=8))

        async def go() -> ModelResponse:
            async with asyncio.timeout(10):  # a hang fails the test as TimeoutError
                return await engine.generate_async(req)

        return self.runner.run(go())


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness()
    h.setup()
    yield h
    h.close()


def dumps(value: Any) -> bytes:
    """JSON text as a server might send it (stdlib: big ints survive, unlike orjson)."""
    return json.dumps(value, ensure_ascii=False).encode()


def check_outcome(h: Harness, flavour: str, stream: bool) -> None:
    try:
        resp = h.generate(flavour, stream)
    except RolloutKitError:
        return
    # accepted bodies still give a well-formed response
    assert isinstance(resp, ModelResponse)
    assert len(resp.output_logprobs) == len(resp.output_tokens)
    assert all(isinstance(t, int) for t in resp.output_tokens)
    assert resp.stop_reason in ("stop", "length", "abort", "tool_calls")
    assert not math.isnan(resp.latency)


@pytest.mark.parametrize("flavour", ["sglang", "vllm"])
def test_fuzz_non_stream_bodies(harness: Harness, flavour: str) -> None:
    @FUZZ
    @given(body=BODIES[flavour])
    def run(body: Any) -> None:
        harness.server.body = dumps(body)
        check_outcome(harness, flavour, stream=False)

    run()


@pytest.mark.parametrize("flavour", ["sglang", "vllm"])
def test_fuzz_stream_events(harness: Harness, flavour: str) -> None:
    @FUZZ
    @given(events=st.lists(BODIES[flavour], min_size=0, max_size=4))
    def run(events: list[Any]) -> None:
        harness.server.events = [dumps(e) for e in events]
        check_outcome(harness, flavour, stream=True)

    run()


@FUZZ
@given(body=st.binary(max_size=64))
def test_fuzz_raw_bytes(harness: Harness, body: bytes) -> None:
    harness.server.body = body
    harness.server.events = [body.replace(b"\n", b" ")]
    for flavour in ("sglang", "vllm"):
        for stream in (False, True):
            check_outcome(harness, flavour, stream)


# -- trace loader ---------------------------------------------------------------------------

HEADER = {"kind": "header", "format": "rollout_kit.trace", "schema": 1, "wall_epoch": 1.0e9,
          "epoch_ns": 0, "worker": None, "pid": 1}
marks = st.one_of(st.lists(st.one_of(st.none(), numbers), min_size=5, max_size=5), json_values)
task_record = maybe({
    "kind": st.sampled_from(["task", "mark", "header", "other"]),
    "task_id": st.one_of(numbers, json_values), "worker": json_values,
    "status": st.one_of(st.sampled_from(["accepted", "failed", "pending"]), json_values),
    "reason": json_values, "error": json_values, "marks": marks, "attrs": json_values,
    "sessions": st.one_of(st.lists(maybe({
        "session_id": numbers, "status": st.sampled_from(["accepted", "bogus"]),
        "start": st.one_of(st.none(), numbers), "end": st.one_of(st.none(), numbers),
        "attrs": json_values}), max_size=2), json_values),
    "spans": st.one_of(st.lists(st.lists(st.one_of(numbers, st.text(max_size=8)),
                                         max_size=6), max_size=2), json_values),
    "event": st.one_of(st.sampled_from(["submit", "end", "nope"]), json_values),
    "ts": st.one_of(numbers, json_values), "format": json_values, "schema": json_values,
    "wall_epoch": st.one_of(numbers, json_values),
})


VALID_TASK = {"kind": "task", "task_id": 0, "worker": None, "status": "accepted",
              "reason": None, "error": None, "marks": [90, None, 101, 135, None], "attrs": {},
              "sessions": [{"session_id": 0, "status": "accepted", "start": 115, "end": 128,
                            "attrs": {"server": "x"}}],
              "spans": [[0, "generate", 116, 127, 0]]}
VALID_MARK = {"kind": "mark", "task_id": 1, "worker": None, "event": "submit", "ts": 5}


@st.composite
def mutated_record(draw: st.DrawFn) -> dict[str, Any]:
    """A valid task or mark record with one field (or one nested field) replaced."""
    rec = json.loads(json.dumps(draw(st.sampled_from([VALID_TASK, VALID_MARK]))))
    value = draw(st.one_of(numbers, json_values))
    key = draw(st.sampled_from(sorted(rec)))
    target = rec[key]
    if isinstance(target, list) and target and draw(st.booleans()):
        inner = target[0] if isinstance(target[0], list | dict) else target
        if isinstance(inner, dict):
            inner[draw(st.sampled_from(sorted(inner)))] = value
        else:
            inner[draw(st.integers(0, len(inner) - 1))] = value
    elif draw(st.booleans()):
        rec[key] = value
    else:
        del rec[key]
    out: dict[str, Any] = rec
    return out


def _load(path: Path) -> None:
    try:
        traces = load_traces(path)
    except RolloutKitError:
        return
    assert set(traces.tasks.columns) >= {"status", "reason"}


@FUZZ
@given(header=st.one_of(st.just(HEADER), maybe({k: st.one_of(st.just(v), json_values)
                                                 for k, v in HEADER.items()})),
       records=st.lists(st.one_of(mutated_record(), task_record, json_values), max_size=4))
@example(header=HEADER, records=[{**VALID_TASK, "task_id": 2**64}])
@example(header=HEADER, records=[{**VALID_MARK, "ts": 1e300}])
@example(header={**HEADER, "wall_epoch": 1e300}, records=[VALID_TASK])
@example(header=HEADER, records=[{**VALID_TASK, "error": []}])  # was a raw ValueError
# a span naming a session its task does not have: was a raw ValueError in the frames
@example(header=HEADER, records=[{**VALID_TASK, "spans": [[1, "generate", 116, 127, 0]]}])
def test_fuzz_trace_loader(tmp_path_factory: pytest.TempPathFactory, header: Any,
                           records: list[Any]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    path.write_bytes(b"".join(dumps(r) + b"\n" for r in [header, *records]))
    _load(path)


@FUZZ
@given(raw=st.binary(max_size=200))
@pytest.mark.filterwarnings("ignore::rollout_kit.tracing.TornTraceWarning")  # expected here
def test_fuzz_trace_loader_bytes(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzzb") / "t.jsonl"
    path.write_bytes(dumps(HEADER) + b"\n" + raw)
    _load(path)
