"""SGLang's own view of each request (``meta_info``) joined into the sessions frame.

Against the simulator's SGLang server, whose ``meta_info`` carries SGLang 0.5.23's stamps: the
``server_*`` columns (the names the OTLP join gives vLLM) per session, streamed and not,
continuations summed, on the trace clock; ``why_slow`` then splits an SGLang run into the
server's parts. The same join against the real SGLang CPU server is in
``tests/realserver/test_engine_sglang_real.py``.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pandas as pd
import pytest

from rollout_kit import (
    GenerationConfig,
    ModelRequest,
    RolloutController,
    SingleTurnWorkflow,
    analysis,
)
from rollout_kit.engines import RemoteSGLangEngine
from rollout_kit.engines._server_timing import server_counts
from rollout_kit.sim import serve
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import Tracer
from tests.sim.helpers import until

pytestmark = pytest.mark.timeout(120)

COLUMNS = ("server_spans", "server_queue_s", "server_prefill_s", "server_decode_s",
           "server_e2e_s", "server_frontend_s", "server_preemptions", "server_ttft_s",
           "server_start_ts")


def _wf(tokens: int) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        max_new_tokens=tokens, ignore_eos=True))


def _answer(**timing: float) -> tuple[dict[str, float], int, int]:
    return timing, 0, 0


def test_counts_sum_answers_and_keep_the_first_arrival() -> None:
    first = {"request_received_ts": 100.0, "e2e_latency": 0.5, "queue_time": 0.1,
             "forward_entry_time": 100.11, "prefill_finished_time": 100.16,
             "first_token_latency": 0.2, "num_retractions": 1.0}
    # a continuation: answered after the abort, with a retraction and no queue time
    second = {"request_received_ts": 101.0, "e2e_latency": 0.3, "first_token_latency": 0.1,
              "forward_entry_time": 101.0, "prefill_finished_time": 101.05,
              "num_retractions": 2.0}
    sums, firsts = server_counts([(first, 1_000_000_000, 1_600_000_000), _answer(**second)])
    assert sums["server_spans"] == 2 and sums["server_preemptions"] == 3
    assert sums["server_e2e_s"] == pytest.approx(0.8)
    assert sums["server_queue_s"] == pytest.approx(0.1)  # only the answer that had one
    assert sums["server_prefill_s"] == pytest.approx(0.05 + 0.05)
    assert sums["server_decode_s"] == pytest.approx(0.3 + 0.2)
    assert sums["server_frontend_s"] == pytest.approx(0.6 - 0.5)  # the one with its times
    assert firsts == {"server_ttft_s": 0.2, "server_start_wall": 100.0}


def test_answers_without_sglang_stamps_add_nothing() -> None:
    assert server_counts([_answer(e2e_s=0.2, queue_s=0.1), _answer(e2e_latency=0.3)]) \
        == ({}, {})


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_sessions_carry_the_servers_view(stream: bool) -> None:
    """4 requests on 1 running slot: three wait in the server's queue, and say so."""
    async with serve("sglang", n=1, time_scale=0.05, max_num_seqs=1) as cluster:
        cfg = fast_engine_config(stream=stream)
        async with RolloutController(engine_config=cfg, sglang=cluster.addresses) as ctl:
            res = await ctl.rollout_batch_async(["a prompt"] * 4, _wf(12))
            assert all(r.ok for r in res)
            s = ctl.sessions()
    assert set(COLUMNS) <= set(s.columns)
    assert (s["server_spans"] == 1).all() and (s["server_preemptions"] == 0).all()
    for col in ("server_queue_s", "server_prefill_s", "server_decode_s", "server_ttft_s"):
        assert (s[col] >= 0).all(), s[col]
    assert (s["server_e2e_s"] > 0).all()
    # the parts lie inside the server's end-to-end time, which lies inside the client's
    parts = s["server_queue_s"] + s["server_prefill_s"] + s["server_decode_s"]
    assert (parts <= s["server_e2e_s"] + 1e-6).all(), s[list(COLUMNS)]
    assert (s["server_e2e_s"] <= s["generate_s"] + 1e-6).all()
    assert np.allclose(s["server_frontend_s"], s["in_flight_s"] - s["server_e2e_s"])
    assert (s["server_frontend_s"] > -0.005).all()  # two clocks, one machine
    # queued behind one slot: the last admitted waited for about three others' generation
    assert s["server_queue_s"].max() > 2 * s["server_decode_s"].min()
    # the server's arrival is on the trace clock, inside the session
    assert ((s["server_start_ts"] >= s["start_ts"] - 0.005)
            & (s["server_start_ts"] <= s["end_ts"])).all(), s[["start_ts", "server_start_ts"]]
    assert (s["server_ttft_s"] >= s["server_queue_s"]).all()


async def test_continuations_are_summed() -> None:
    """A pause mid-generation: the call's two answers add up in one session."""
    async with serve("sglang", n=1, time_scale=0.05) as cluster:
        tracer = Tracer()
        engine = RemoteSGLangEngine(cluster.addresses, config=fast_engine_config())
        async with engine:
            tracer.register_task(0)
            with tracer.task_scope(0):
                async with tracer.session():
                    task = asyncio.create_task(engine.generate_async(ModelRequest(
                        input_ids=[1, 2, 3], gconfig=GenerationConfig(
                            max_new_tokens=400, ignore_eos=True))))
                    sim = cluster.servers[0].engine
                    await until(lambda: any(q.n_done > 20 for q in sim.live), "20 tokens", 20)
                    await engine.pause_generation_async()
                    engine.set_version(1)
                    await engine.continue_generation_async()
                    resp = await task
            tracer.finalize(0, "accepted")
    assert resp.n_continuations == 1 and len(resp.output_tokens) == 400
    row = tracer.sessions_df().iloc[0]
    assert row["server_spans"] == 2 and row["continuations"] == 1
    assert row["server_e2e_s"] <= row["in_flight_s"] + 1e-6
    assert math.isfinite(row["server_start_ts"])


async def test_why_slow_splits_an_sglang_run_into_the_servers_parts() -> None:
    async with serve("sglang", n=1, time_scale=0.05, max_num_seqs=1) as cluster:
        async with RolloutController(engine_config=fast_engine_config(),
                                     sglang=cluster.addresses, scrape_interval=0.02) as ctl:
            res = await ctl.rollout_batch_async(["a prompt"] * 6, _wf(16))
            assert all(r.ok for r in res)
            traces = ctl.tracer.frames()
    table = analysis.why_slow(traces, k=2)
    assert table["server_queue_s"].notna().all() and table["server_decode_s"].notna().all()
    slowest = table.iloc[0]
    assert slowest["cause"] == "server_queue", table[["cause", "verdict"]]
    assert slowest["verdict"].startswith("server queue ")


async def test_the_timeline_draws_an_sglang_runs_server_segments() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from rollout_kit.plotting import timeline_figure

    async with serve("sglang", n=1, time_scale=0.05) as cluster:
        async with RolloutController(sglang=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            await ctl.rollout_batch_async(["a story", "a poem", "a song"], _wf(12))
            sessions, spans, tasks = ctl.sessions(), ctl.spans(), ctl.traces()
    segs = analysis.server_segments(sessions)
    assert list(segs.columns) == list(analysis.SEGMENT_COLUMNS) and len(segs) == 3
    np.testing.assert_allclose(segs["start_ts"], sessions["server_start_ts"])
    np.testing.assert_allclose(segs["queue_s"], sessions["server_queue_s"])
    assert (segs["requests"] == 1).all()
    fig = timeline_figure(spans, tasks=tasks, by="session", server_spans=segs)
    by_gid = {c.get_gid(): c for c in fig.axes[0].collections}
    decode = by_gid["timeline:server decode"].get_paths()[0]
    assert len(decode.vertices) == 5 * 3  # one rectangle per request
    # a frame without the server's columns has no segments
    assert analysis.server_segments(sessions.drop(columns=["server_start_ts"])).empty


async def test_the_otlp_join_keeps_sglangs_own_columns() -> None:
    """A run over SGLang (meta_info) joined with no spans, as a mixed vLLM + SGLang run's
    SGLang sessions are: their server columns stay."""
    pytest.importorskip("opentelemetry.proto")
    from rollout_kit.otel import join_server_spans
    from rollout_kit.otel._spans import SPAN_FIELDS

    async with serve("sglang", n=1, time_scale=0.05) as cluster:
        async with RolloutController(sglang=cluster.addresses,
                                     engine_config=fast_engine_config()) as ctl:
            await ctl.rollout_batch_async(["a story", "a poem"], _wf(8))
            sessions, tracer = ctl.sessions(), ctl.tracer
    view = join_server_spans(sessions, pd.DataFrame(columns=list(SPAN_FIELDS)),
                             trace_prefix=tracer.trace_prefix, wall_epoch=tracer.wall_epoch)
    s = view.sessions
    assert (s["server_spans"] == 1).all() and s["server_spans"].dtype == "int64"
    for col in ("server_queue_s", "server_decode_s", "server_e2e_s", "server_start_ts"):
        np.testing.assert_array_equal(s[col], sessions[col])
    np.testing.assert_allclose(s["client_overhead_s"],
                               sessions["generate_s"] - sessions["server_e2e_s"])
