"""The server's own view: traceparent on every request, the OTLP receiver, the join.

The simulators export an ``llm_request`` span per request with vLLM 0.32's attribute names
(as a child of the request's ``traceparent``), so everything here runs against them;
``tests/realserver`` runs the same join against the real vLLM CPU server.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import pandas as pd
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rollout_kit import (
    ConfigError,
    EngineConfig,
    GenerationConfig,
    ModelRequest,
    RolloutController,
    RolloutTimeoutError,
    SingleTurnWorkflow,
)
from rollout_kit.otel import SERVER_COLUMNS, OtlpReceiver, export_traces, join_server_spans
from rollout_kit.otel._spans import SpanDecodeError, decode_export_request, span_rows
from rollout_kit.sim import SimConfig, serve
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import Tracer, trace_session, traceparent

TP = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


def _wf(n: int = 2, tokens: int = 12) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=n, max_new_tokens=tokens, ignore_eos=True))


@pytest.fixture
def receiver() -> Any:
    with OtlpReceiver() as rx:
        yield rx


def _view(ctl: RolloutController, rx: OtlpReceiver, prefix: str | None = "") -> Any:
    tracer = ctl.tracer
    return join_server_spans(ctl.sessions(), rx.spans(),
                             trace_prefix=tracer.trace_prefix if prefix == "" else prefix,
                             wall_epoch=tracer.wall_epoch)


@pytest.mark.parametrize("flavour", ["vllm", "sglang"])
@pytest.mark.parametrize("stream", [False, True])
async def test_every_session_gets_its_server_span(flavour: str, stream: bool,
                                                  receiver: OtlpReceiver) -> None:
    async with serve(flavour, n=2, time_scale=0.05,
                     otlp_traces_endpoint=receiver.endpoint) as cluster:
        async with RolloutController(engine_config=fast_engine_config(stream=stream),
                                     **{flavour: cluster.addresses}) as ctl:
            results = await ctl.rollout_batch_async(["a story", "a poem", "a song"], _wf())
            assert all(r.ok for r in results)
            await receiver.wait_for_async(6, trace_prefix=ctl.tracer.trace_prefix)
            view = _view(ctl, receiver)
    assert view.counts == {"joined": 6}, view.unmatched
    s = view.sessions
    assert (s["server_spans"] == 1).all()
    assert (s["server_e2e_s"] > 0).all() and (s["server_e2e_s"] <= s["generate_s"]).all()
    assert (s["client_overhead_s"] >= 0).all()
    assert ((s["server_queue_s"] >= 0) & (s["server_prefill_s"] >= 0)
            & (s["server_decode_s"] > 0)).all()
    assert (s["server_ttft_s"] <= s["server_e2e_s"]).all()
    assert ((s["server_start_ts"] >= s["start_ts"] - 0.005)
            & (s["server_start_ts"] <= s["end_ts"])).all()
    spans = view.spans
    assert set(spans["name"]) == {"llm_request"} and set(spans["kind"]) == {"SERVER"}
    assert (spans["attributes"].map(lambda a: a["gen_ai.usage.completion_tokens"]) == 12).all()
    # one trace per task, the sessions' span ids as parents
    per_task = spans.groupby("task_id")["trace_id"].nunique()
    assert (per_task == 1).all() and spans["trace_id"].nunique() == 3


async def test_continued_generation_has_one_server_span_per_response(
        receiver: OtlpReceiver) -> None:
    async with serve("vllm", n=1, zero_latency=True,
                     otlp_traces_endpoint=receiver.endpoint) as cluster:
        cluster.servers[0].faults.force("abort", 2)
        async with RolloutController(vllm=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            [res] = await ctl.rollout_batch_async(["a long story"], _wf(1, 40))
            assert res.ok
            await receiver.wait_for_async(3, trace_prefix=ctl.tracer.trace_prefix)
            view = _view(ctl, receiver)
    s = view.sessions
    assert s["server_spans"].tolist() == [3]
    assert s["continuations"].tolist() == [2]
    finishes = view.spans["attributes"].map(lambda a: a["rollout_kit.sim.finish_reason"])
    assert finishes.tolist() == ["abort", "abort", "length"]


async def test_spans_that_cannot_be_joined_are_kept_apart(receiver: OtlpReceiver) -> None:
    class OutsideASession:
        async def arun_episode(self, engine: Any, data: Any) -> dict[str, Any]:
            g = GenerationConfig(max_new_tokens=4, ignore_eos=True)
            await engine.generate_async(ModelRequest(input_ids=[5, 6], gconfig=g))
            return {}

    async with serve("sglang", n=1, zero_latency=True,
                     otlp_traces_endpoint=receiver.endpoint) as cluster:
        cfg = fast_engine_config()
        async with RolloutController(sglang=cluster.addresses, engine_config=cfg) as ctl, \
                RolloutController(sglang=cluster.addresses, engine_config=cfg) as other, \
                RolloutController(sglang=cluster.addresses, engine_config=EngineConfig(
                    trace_context=False)) as silent:
            await ctl.rollout_batch_async(["mine"], _wf(1))
            await ctl.rollout_batch_async([None], OutsideASession())
            await other.rollout_batch_async(["theirs"], _wf(1))
            await silent.rollout_batch_async(["no header"], _wf(1))
            await receiver.wait_for_async(4)
            view = _view(ctl, receiver)
            loose = _view(ctl, receiver, prefix=None)  # e.g. reloaded traces: no prefix
    assert view.counts == {"joined": 1, "parent is the task (a call outside any session)": 1,
                           "another tracer's trace": 1, "no parent span": 1}
    assert len(view.unmatched) == 3 and set(view.unmatched["why"]) == {
        "parent is the task (a call outside any session)", "another tracer's trace",
        "no parent span"}
    assert view.sessions["server_spans"].tolist() == [1]
    # without the prefix the other tracer's span names task 0, session 0 too: the frame
    # holds that key, so only the prefix tells them apart — which is why it is the default
    assert loose.counts["joined"] == 2


def test_missing_attributes_and_unknown_sessions() -> None:
    sessions = pd.DataFrame({"generate_s": [1.0], "start_ts": [0.0]},
                            index=pd.MultiIndex.from_tuples([(3, 7)],
                                                            names=["task_id", "session_id"]))
    prefix = "ab" * 8
    base = {"name": "llm_request", "kind": "SERVER", "start_wall": 100.5, "end_wall": 101.0,
            "service": "x", "span_id": "11" * 8}
    full = {"gen_ai.latency.time_in_queue": 0.1, "gen_ai.latency.time_to_first_token": 0.2,
            "gen_ai.latency.e2e": 0.5}
    rows = [
        {**base, "trace_id": prefix + f"{3:016x}", "parent_span_id": f"{8:016x}",
         "attributes": full},
        {**base, "trace_id": prefix + f"{3:016x}", "parent_span_id": f"{8:016x}",
         "attributes": {"gen_ai.latency.e2e": 0.5}},
        {**base, "trace_id": prefix + f"{4:016x}", "parent_span_id": f"{8:016x}",
         "attributes": full},
        {**base, "trace_id": "12", "parent_span_id": f"{8:016x}", "attributes": full},
    ]
    view = join_server_spans(sessions, pd.DataFrame(rows), trace_prefix=prefix,
                             wall_epoch=100.0)
    assert view.counts == {"joined": 1, "missing attributes: gen_ai.latency.time_in_queue, "
                           "gen_ai.latency.time_to_first_token": 1,
                           "no such session in the frame": 1, "not a W3C trace id": 1}
    row = view.sessions.loc[(3, 7)]
    assert row["server_e2e_s"] == 0.5 and row["server_queue_s"] == pytest.approx(0.1)
    assert row["server_start_ts"] == pytest.approx(0.5)
    assert row["client_overhead_s"] == pytest.approx(0.5)
    assert pd.isna(row["server_prefill_s"])  # the span had none: NA, never 0


async def test_traceparent_names_the_task_and_session() -> None:
    assert traceparent() is None  # no task
    tr = Tracer()
    tr.register_task(5)
    with tr.task_scope(5):
        outside = traceparent()
        async with trace_session() as sid:
            inside = traceparent()
    assert outside is not None and inside is not None
    m_out, m_in = TP.match(outside), TP.match(inside)
    assert m_out and m_in
    assert m_in.group(1) == m_out.group(1) == tr.trace_prefix + f"{5:016x}"
    assert int(m_in.group(2), 16) == sid + 1 and int(m_out.group(2), 16) == 1 << 63


async def test_receiver_takes_json_and_refuses_junk(receiver: OtlpReceiver) -> None:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "by-hand"
    sp = rs.scope_spans.add().spans.add()
    sp.trace_id, sp.span_id, sp.name = bytes(range(16)), bytes(range(1, 9)), "x"
    sp.start_time_unix_nano, sp.end_time_unix_nano = 10**18, 10**18 + 5 * 10**8
    a = sp.attributes.add()
    a.key, a.value.double_value = "gen_ai.latency.e2e", 0.5
    async with aiohttp.ClientSession() as http:
        async with http.post(receiver.endpoint, data=json_format.MessageToJson(req),
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200
        async with http.post(receiver.endpoint, data=b"\xff\xfenot protobuf",
                             headers={"Content-Type": "application/x-protobuf"}) as resp:
            assert resp.status == 400
            assert "not an OTLP trace export request" in (await resp.json())["error"]
    assert receiver.rejected == 1 and receiver.last_error is not None
    [row] = receiver.spans().to_dict("records")
    assert row["service"] == "by-hand" and row["attributes"] == {"gen_ai.latency.e2e": 0.5}
    assert row["parent_span_id"] is None and row["end_wall"] - row["start_wall"] == 0.5
    with pytest.raises(RolloutTimeoutError, match=r"1 of 2 spans arrived.*rejected bodies: 1"):
        receiver.wait_for(2, timeout=0.01)
    assert receiver.endpoint.startswith("http://127.0.0.1:")


def test_the_simulator_exports_to_loopback_only() -> None:
    with pytest.raises(ConfigError, match="otlp_traces_endpoint must be an http URL on loopback"):
        SimConfig(otlp_traces_endpoint="http://10.0.0.1:4318/v1/traces")
    SimConfig(otlp_traces_endpoint="http://127.0.0.1:4318/v1/traces")


async def test_an_unreachable_endpoint_costs_nothing_but_a_count() -> None:
    async with serve("vllm", n=1, zero_latency=True,
                     otlp_traces_endpoint="http://127.0.0.1:9/v1/traces") as cluster:
        async with RolloutController(vllm=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            results = await ctl.rollout_batch_async(["x", "y"], _wf(1))
    assert all(r.ok for r in results)
    await asyncio.sleep(0)


async def test_export_puts_client_and_server_spans_in_one_trace(
        receiver: OtlpReceiver) -> None:
    async with serve("vllm", n=1, zero_latency=True,
                     otlp_traces_endpoint=receiver.endpoint) as cluster:
        async with RolloutController(vllm=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            await ctl.rollout_batch_async(["a story", "a poem"], _wf())
            prefix = ctl.tracer.trace_prefix
            await receiver.wait_for_async(4, trace_prefix=prefix)
            traces = ctl.tracer.frames()
    n = await asyncio.to_thread(export_traces, traces, receiver.endpoint,
                                trace_prefix=prefix, model="sim-model")
    assert n == len(traces.tasks) + len(traces.sessions) + len(traces.spans) == 2 + 4 + 8
    spans = receiver.spans()
    ours = spans[spans["service"] == "rollout_kit"]
    assert len(ours) == n
    by_id = spans.set_index("span_id")
    tasks = ours[ours["name"] == "rollout_kit.task"]
    sessions = ours[ours["name"] == "rollout_kit.session"]
    assert sorted(tasks["attributes"].map(lambda a: a["rollout_kit.task_id"])) == [0, 1]
    assert tasks["parent_span_id"].isna().all()
    attrs = sessions["attributes"].tolist()
    assert {a["gen_ai.request.model"] for a in attrs} == {"sim-model"}
    assert all(a["gen_ai.usage.output_tokens"] == 12 and a["gen_ai.usage.input_tokens"] > 0
               and a["gen_ai.response.finish_reasons"] == ["length"]
               and a["server.address"] == "127.0.0.1" for a in attrs)
    # every server span's parent is one of our session spans, in the same trace
    server = spans[spans["name"] == "llm_request"]
    for _, row in server.iterrows():
        parent = by_id.loc[row["parent_span_id"]]
        assert parent["name"] == "rollout_kit.session"
        assert parent["trace_id"] == row["trace_id"]
    phases = ours[ours["name"].isin(["generate", "reward"])]
    assert set(phases["parent_span_id"]) <= set(sessions["span_id"])


@pytest.mark.parametrize("by", ["task", "session"])
async def test_the_timeline_draws_the_server_segments(by: str, receiver: OtlpReceiver) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from rollout_kit.plotting import timeline_figure

    async with serve("vllm", n=1, time_scale=0.05,
                     otlp_traces_endpoint=receiver.endpoint) as cluster:
        async with RolloutController(vllm=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            await ctl.rollout_batch_async(["a story", "a poem"], _wf())
            await receiver.wait_for_async(4, trace_prefix=ctl.tracer.trace_prefix)
            view = _view(ctl, receiver)
            fig = timeline_figure(ctl.spans(), tasks=ctl.traces(), by=by,
                                  server_spans=view.spans)
    ax = fig.axes[0]
    by_gid = {c.get_gid(): c for c in ax.collections}
    for kind in ("server queue", "server prefill", "server decode"):
        assert f"timeline:{kind}" in by_gid
    decode = by_gid["timeline:server decode"].get_paths()[0]
    assert len(decode.vertices) == 5 * 4  # one rectangle per request
    y = decode.vertices[:, 1].reshape(4, 5).mean(axis=1)
    assert len(set(y.round(3))) == (2 if by == "task" else 4)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "server decode" in labels


# -- the join and the decoding, by hand (no simulator) --

_PREFIX = "ab" * 8
_FULL = {"gen_ai.latency.time_in_queue": 0.1, "gen_ai.latency.time_to_first_token": 0.2,
         "gen_ai.latency.e2e": 0.5}


def _sessions(keys: list[tuple[int, int]], **cols: list[float]) -> pd.DataFrame:
    return pd.DataFrame(cols or {"generate_s": [1.0] * len(keys)},
                        index=pd.MultiIndex.from_tuples(keys, names=["task_id", "session_id"]))


def _row(task: int, session: int, *, start: float = 100.5, trace_id: str | None = None,
         attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": "llm_request", "kind": "SERVER", "start_wall": start,
            "end_wall": start + 0.5, "service": "x", "span_id": "11" * 8,
            "trace_id": trace_id or _PREFIX + f"{task:016x}",
            "parent_span_id": f"{session + 1:016x}",
            "attributes": _FULL if attributes is None else attributes}


def test_task_ids_are_read_as_all_sixteen_hex_digits() -> None:
    """Task 16 is ``…10`` in hex (not 10, nor 17); a task id using the top digit of the
    trace id's task part keeps it."""
    big = 0x7000_0000_0000_0003
    sessions = _sessions([(16, 0), (10, 0), (big, 2), (3, 2)])
    view = join_server_spans(sessions, pd.DataFrame([_row(16, 0), _row(big, 2)]),
                             trace_prefix=_PREFIX, wall_epoch=100.0)
    assert view.counts == {"joined": 2}
    assert view.sessions["server_spans"].tolist() == [1, 0, 1, 0]


def test_a_trace_id_must_be_lower_case_hex() -> None:
    sessions = _sessions([(3, 0)])
    rows = [_row(3, 0, trace_id="X" * 32), _row(3, 0, trace_id=(_PREFIX + f"{3:016x}").upper()),
            _row(3, 0, trace_id="g" * 32)]
    for prefix in (_PREFIX, None):
        view = join_server_spans(sessions, pd.DataFrame(rows), trace_prefix=prefix,
                                 wall_epoch=100.0)
        assert view.counts == {"not a W3C trace id": 3}  # each reason counted, not just seen
        assert view.unmatched["why"].tolist() == ["not a W3C trace id"] * 3
        assert view.sessions["server_spans"].tolist() == [0]


def test_each_session_gets_its_own_spans_whatever_the_frame_order() -> None:
    """The sessions frame in no particular order; a session no span names keeps 0 spans and
    NaN latencies; the front end is ``in_flight_s`` less the server's e2e."""
    sessions = _sessions([(5, 1), (3, 7), (4, 0), (3, 2)],
                         generate_s=[3.0, 2.0, 9.0, 1.0], in_flight_s=[2.5, 1.5, 8.0, 0.75])
    rows = [_row(3, 2, start=100.25, attributes={**_FULL, "gen_ai.latency.e2e": 0.5}),
            _row(5, 1, start=101.0, attributes={**_FULL, "gen_ai.latency.e2e": 2.0}),
            _row(3, 7, start=100.5, attributes={**_FULL, "gen_ai.latency.e2e": 1.0})]
    view = join_server_spans(sessions, pd.DataFrame(rows), trace_prefix=_PREFIX,
                             wall_epoch=100.0)
    s = view.sessions
    assert list(s.columns) == ["generate_s", "in_flight_s", *SERVER_COLUMNS]
    assert list(s.index) == [(5, 1), (3, 7), (4, 0), (3, 2)]
    assert s["server_spans"].dtype == "int64"
    assert s["server_spans"].tolist() == [1, 1, 0, 1]
    assert s["server_e2e_s"].tolist()[:2] == [2.0, 1.0] and s["server_e2e_s"].iloc[3] == 0.5
    assert s["server_start_ts"].tolist()[:2] == [1.0, 0.5]
    assert s["server_frontend_s"].tolist()[:2] == [0.5, 0.5]
    assert s["server_frontend_s"].iloc[3] == 0.25
    assert s["client_overhead_s"].tolist()[:2] == [1.0, 1.0]
    missed = s.loc[(4, 0)]
    assert missed["server_spans"] == 0
    assert missed[list(SERVER_COLUMNS[1:])].isna().all()
    # the joined spans, sorted by session and arrival, with their latencies as columns
    assert view.spans[["task_id", "session_id"]].values.tolist() == [[3, 2], [3, 7], [5, 1]]
    assert view.spans["e2e_s"].tolist() == [0.5, 1.0, 2.0]
    assert view.unmatched.empty
    assert list(view.unmatched.columns) == [*pd.DataFrame(rows).columns, "why"]


def test_no_span_joined_leaves_zero_spans_and_nan_latencies() -> None:
    sessions = _sessions([(3, 0), (3, 1)], generate_s=[1.0, 2.0], in_flight_s=[0.5, 1.5])
    view = join_server_spans(sessions, pd.DataFrame([_row(9, 0)]), trace_prefix=_PREFIX,
                             wall_epoch=100.0)
    assert view.counts == {"no such session in the frame": 1}
    s = view.sessions
    assert s["server_spans"].tolist() == [0, 0] and s["server_spans"].dtype == "int64"
    for col in SERVER_COLUMNS[1:]:
        assert s[col].dtype == "float64" and s[col].isna().all(), col
    assert view.spans.empty


def _request(service: str | None = "svc") -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    if service is not None:
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", service
    kv = rs.resource.attributes.add()
    kv.key, kv.value.int_value = "pid", 7
    sp = rs.scope_spans.add().spans.add()
    sp.trace_id, sp.span_id, sp.name = bytes(range(16)), bytes(range(1, 9)), "x"
    sp.parent_span_id = bytes(range(2, 10))
    sp.kind = 2  # SPAN_KIND_SERVER
    sp.start_time_unix_nano, sp.end_time_unix_nano = 2 * 10**9, 3 * 10**9
    a = sp.attributes.add()
    a.key = "map"
    inner = a.value.kvlist_value.values.add()
    inner.key, inner.value.int_value = "n", 3
    inner = a.value.kvlist_value.values.add()
    inner.key = "list"
    inner.value.array_value.values.add().bool_value = True
    inner.value.array_value.values.add().double_value = 0.5
    a = sp.attributes.add()
    a.key, a.value.bytes_value = "raw", b"\x01\xab"
    a = sp.attributes.add()
    a.key = "unset"  # an AnyValue with no value
    a = sp.attributes.add()
    a.key, a.value.string_value = "s", "text"
    return req


@pytest.mark.parametrize("content_type", ["application/x-protobuf", "application/json"])
def test_every_attribute_value_kind_decodes(content_type: str) -> None:
    req = _request()
    body = (json_format.MessageToJson(req).encode() if content_type == "application/json"
            else req.SerializeToString())
    [row] = decode_export_request(body, content_type)
    assert row == {
        "trace_id": bytes(range(16)).hex(), "span_id": "0102030405060708",
        "parent_span_id": "0203040506070809", "name": "x", "kind": "SERVER",
        "start_wall": 2.0, "end_wall": 3.0, "service": "svc",
        "attributes": {"map": {"n": 3, "list": [True, 0.5]}, "raw": "01ab", "unset": None,
                       "s": "text"}}


def test_a_resource_without_a_service_name_has_none() -> None:
    [row] = span_rows(_request(service=None))
    assert row["service"] is None


def test_a_bad_body_names_its_content_type() -> None:
    with pytest.raises(SpanDecodeError, match=r"request \(application/x-protobuf\): "):
        decode_export_request(b"\xff\xfenot protobuf", "application/x-protobuf")
    with pytest.raises(SpanDecodeError, match=r"request \(no content type\): "):
        decode_export_request(b"\xff\xfenot protobuf", "")
    with pytest.raises(SpanDecodeError, match=r"request \(application/json\): "):
        decode_export_request(b"{not json", "application/json")
