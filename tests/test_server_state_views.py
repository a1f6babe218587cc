"""Views of the servers' state beside the tasks: the lanes under the timeline, the report's
server_state.png, the load sweep's per-level panels, ``why_slow`` and its figure, and the
live monitor's lane.

A simulator run (vLLM flavour, 2 running slots, a burst that queues) gives real metrics;
hand-built frames give cases whose answer is known (the queue is the obvious cause).
Waits are for conditions, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from rollout_kit import (
    ConfigError,
    GenerationConfig,
    RolloutController,
    SingleTurnWorkflow,
    analysis,
    plotting,
)
from rollout_kit.notebook import LiveMonitor
from rollout_kit.notebook._monitor import MONITOR_LANES
from rollout_kit.plotting import lane_layout
from rollout_kit.report import PLOT_FILES, SERVER_STATE_FILE, write_report
from rollout_kit.sim import serve
from rollout_kit.testing import fast_engine_config
from rollout_kit.tracing import Traces
from rollout_kit.tracing import schema as S
from rollout_kit.tracing.server_metrics import SCRAPE_FAILED
from tests.sim.helpers import until

pytestmark = pytest.mark.timeout(120)


def _wf(tokens: int = 24) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(lambda *a, **k: 0.0, GenerationConfig(
        n_samples=1, max_new_tokens=tokens, ignore_eos=True))


def _until(cond: Callable[[], bool], what: str,
           timeout: float = 20.0) -> Coroutine[Any, Any, None]:
    return until(cond, what, timeout, every=0.01)  # the condition builds a frame


def _scrapes(frame: pd.DataFrame) -> int:
    return int(frame[[S.TS, S.SERVER]].drop_duplicates().shape[0])


@dataclasses.dataclass
class Run:
    traces: Traces
    sweep: pd.DataFrame
    sweep_metrics: pd.DataFrame


@pytest.fixture(scope="module")
def run() -> Run:
    """A burst of 24 tasks against 2 servers of 2 running slots each (the rest wait),
    scraped every 20 ms; then a 2-level load sweep on another controller."""
    from rollout_kit.load import Arrivals, LoadSpec, sweep_async, synthetic

    async def go() -> Run:
        async with serve("vllm", n=2, time_scale=0.1, max_num_seqs=2) as cluster:
            ctl = RolloutController(engine_config=fast_engine_config(),
                                    vllm=cluster.addresses, scrape_interval=0.02)
            async with ctl:
                res = await ctl.rollout_batch_async(["a burst of prompts"] * 24, _wf())
                assert all(r.ok for r in res)
                n = _scrapes(ctl.server_metrics())
                await _until(lambda: _scrapes(ctl.server_metrics()) >= n + 4, "4 scrapes")
                traces = ctl.tracer.frames()
            ctl2 = RolloutController(engine_config=fast_engine_config(),
                                     vllm=cluster.addresses, scrape_interval=0.02)
            async with ctl2:
                sweep = await sweep_async(
                    ctl2, synthetic(16, input_len=16, output_len=16), rates=[100.0, 400.0],
                    spec_template=LoadSpec(arrivals=Arrivals(rate=1.0, seed=1)))
                metrics = ctl2.server_metrics()
        return Run(traces, sweep, metrics)

    return asyncio.run(go())


# -- hand-built frames ------------------------------------------------------------------------

SERVERS = ("10.0.0.1:8000", "10.0.0.2:8000")


def _metrics(waiting: dict[str, list[float]], kv: float = 0.5, dt: float = 0.5,
             t0: float = 0.0) -> pd.DataFrame:
    """A server metrics frame: per server, one scrape every ``dt`` from ``t0`` with the
    given waiting counts, 2 running, KV usage ``kv`` and a generation counter +10/scrape."""
    rows: list[tuple[float, str, str, str, float]] = []
    for server, values in waiting.items():
        for i, w in enumerate(values):
            ts = t0 + i * dt
            rows += [(ts, server, "vllm:num_requests_waiting", "engine=0", w),
                     (ts, server, "vllm:num_requests_running", "engine=0", 2.0),
                     (ts, server, "vllm:kv_cache_usage_perc", "engine=0", kv),
                     (ts, server, "vllm:num_preemptions_total", "engine=0", 0.0),
                     (ts, server, "vllm:generation_tokens_total", "engine=0", 10.0 * i)]
    df = pd.DataFrame(rows, columns=list(S.SERVER_METRIC_COLUMNS))
    return df.sort_values(S.TS, kind="stable", ignore_index=True)


def _tasks(total: dict[int, float], queue: dict[int, float] | None = None) -> pd.DataFrame:
    queue = queue or {}
    ids = list(total)
    q = np.array([queue.get(i, 0.0) for i in ids])
    tot = np.array([total[i] for i in ids])
    return pd.DataFrame({
        S.STATUS: ["accepted"] * len(ids), S.SUBMIT_TS: np.zeros(len(ids)),
        S.DISPATCH_TS: q, S.START_TS: q, S.END_TS: tot, S.QUEUE_S: q, S.TOTAL_S: tot,
        "generate_s": tot - q,
    }, index=pd.Index(ids, name=S.TASK_ID))


def _sessions(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    return df.set_index([S.TASK_ID, S.SESSION_ID])


def _spans(sessions: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        S.TASK_ID: sessions.index.get_level_values(0),
        S.SESSION_ID: sessions.index.get_level_values(1),
        S.PHASE: "generate", S.START: sessions[S.START_TS].to_numpy(),
        S.END: sessions[S.END_TS].to_numpy(),
        S.DURATION: (sessions[S.END_TS] - sessions[S.START_TS]).to_numpy(),
        S.SERVER: sessions[S.SERVER].to_numpy(), S.STATUS: "accepted",
        S.CLOSED_AT_FINALIZE: False})


def _traces(tasks: pd.DataFrame, sessions: pd.DataFrame, metrics: pd.DataFrame) -> Traces:
    return Traces(tasks=tasks, sessions=sessions, spans=_spans(sessions), wall_epoch=0.0,
                  server_metrics=metrics)


# -- lanes under the timeline -----------------------------------------------------------------


def test_lanes_draw_under_the_timeline_and_share_its_x_axis() -> None:
    metrics = _metrics({SERVERS[0]: [0, 3, 8, 8, 1], SERVERS[1]: [0, 1, 1, 0, 0]}, t0=1.0)
    sess = _sessions([{S.TASK_ID: i, S.SESSION_ID: 0, S.START_TS: 1.0 + 0.2 * i,
                       S.END_TS: 2.0 + 0.3 * i, S.SERVER: SERVERS[i % 2]} for i in range(4)])
    tasks = _tasks({i: 2.0 + 0.3 * i for i in range(4)})
    tasks[S.SUBMIT_TS] = 1.0  # t0 = 1.0: the lanes' x counts from the first submit too
    fig = Figure(figsize=(8, 7))
    ax = plotting.plot_timeline(_spans(sess), tasks=tasks, ax=fig.add_subplot(),
                                server_metrics=metrics,
                                lanes=("waiting", "running", "kv_cache_usage",
                                       "generation_tokens_per_s"))
    lanes = {a.get_gid(): a for a in fig.axes if a is not ax}
    assert set(lanes) == {"lane:waiting", "lane:running", "lane:kv_cache_usage",
                          "lane:generation_tokens_per_s"}
    for lane in lanes.values():
        assert lane.get_shared_x_axes().joined(ax, lane)
        assert lane.get_xlim() == ax.get_xlim()
    # lanes sit below the timeline, in the order asked
    ys = [lanes[f"lane:{n}"].get_position().y0 for n in ("waiting", "running",
                                                         "kv_cache_usage")]
    assert ax.get_position().y0 > ys[0] > ys[1] > ys[2]
    # one line per server, x on the timeline's axis (seconds since the first submit)
    lines = {ln.get_gid(): ln for ln in lanes["lane:waiting"].get_lines()}
    line = lines[f"lane:waiting:{SERVERS[0]}"]
    np.testing.assert_allclose(line.get_xdata()[:5], [0.0, 0.5, 1.0, 1.5, 2.0])
    assert max(line.get_ydata()) == 8
    kv = lanes["lane:kv_cache_usage"].get_lines()[0]
    assert max(kv.get_ydata()) == pytest.approx(50.0)  # in %
    assert ax.get_xlabel() == "" and lanes["lane:generation_tokens_per_s"].get_xlabel()
    fig.savefig(_devnull(), format="png")


def _devnull() -> Any:
    import io
    return io.BytesIO()


def test_lane_layout_numbers_and_merged_servers() -> None:
    metrics = _metrics({SERVERS[0]: [0, 3, 8], SERVERS[1]: [1, 1, 1]})
    (waiting, gen) = lane_layout(metrics, ("waiting", "generation_tokens_per_s"), t0=0.0)
    assert [label for label, _, _ in waiting.lines] == list(SERVERS)
    assert waiting.step == "post" and gen.step == "pre"
    np.testing.assert_allclose(gen.lines[0][2], [20.0, 20.0])  # +10 per 0.5 s
    (merged,) = lane_layout(metrics, ("waiting",), max_servers=1)
    label, x, y = merged.lines[0]
    assert label == "all 2 servers"
    np.testing.assert_allclose(y, [1.0, 4.0, 9.0])  # queue depths add up
    np.testing.assert_allclose(x, [0.0, 0.5, 1.0])
    (empty,) = lane_layout(metrics.iloc[:0], ("waiting",))
    assert empty.lines == ()


def test_lanes_refuse_unknown_names_and_axes_without_a_grid_place() -> None:
    metrics = _metrics({SERVERS[0]: [0, 1]})
    sess = _sessions([{S.TASK_ID: 0, S.SESSION_ID: 0, S.START_TS: 0.0, S.END_TS: 1.0,
                       S.SERVER: SERVERS[0]}])
    with pytest.raises(ConfigError, match="unknown lane"):
        plotting.plot_timeline(_spans(sess), ax=Figure().add_subplot(),
                               server_metrics=metrics, lanes=("queue_depth",))
    with pytest.raises(ConfigError, match="add_subplot"):
        plotting.plot_timeline(_spans(sess), ax=Figure().add_axes((0.1, 0.1, 0.8, 0.8)),
                               server_metrics=metrics)
    # an empty frame draws the timeline alone
    fig = Figure()
    plotting.plot_timeline(_spans(sess), ax=fig.add_subplot(),
                           server_metrics=metrics.iloc[:0])
    assert len(fig.axes) == 1


def test_lanes_on_a_simulator_run(run: Run) -> None:
    tr = run.traces
    fig = plotting.timeline_figure(tr.spans, tasks=tr.tasks, server_metrics=tr.server_metrics)
    waiting = next(a for a in fig.axes if a.get_gid() == "lane:waiting")
    servers = {ln.get_gid().split(":", 2)[2] for ln in waiting.get_lines()}
    assert servers == set(tr.sessions[S.SERVER].astype(str))
    # the burst queued: some server had requests waiting
    assert max(max(ln.get_ydata()) for ln in waiting.get_lines()) >= 1
    fig.savefig(_devnull(), format="png")
    axes = plotting.plot_server_lanes(tr.server_metrics, ("running", "waiting"))
    assert [a.get_gid() for a in axes] == ["lane:running", "lane:waiting"]


# -- report ---------------------------------------------------------------------------------


def test_report_writes_server_state_only_when_the_traces_have_metrics(
        run: Run, tmp_path: Path) -> None:
    with_metrics = write_report(run.traces, tmp_path / "a", progress=False)
    names = {p.name for p in with_metrics}
    assert SERVER_STATE_FILE in names and set(PLOT_FILES) <= names
    assert (tmp_path / "a" / SERVER_STATE_FILE).stat().st_size > 10_000
    bare = dataclasses.replace(run.traces, server_metrics=run.traces.server_metrics.iloc[:0])
    without = write_report(bare, tmp_path / "b", progress=False)
    assert SERVER_STATE_FILE not in {p.name for p in without}
    assert not (tmp_path / "b" / SERVER_STATE_FILE).exists()
    assert set(PLOT_FILES) <= {p.name for p in without}


# -- load sweep -----------------------------------------------------------------------------


def test_the_load_sweep_figure_has_a_server_panel_per_level(run: Run) -> None:
    sw = run.sweep
    assert {"start_ts", "end_ts"} <= set(sw.columns)
    assert (sw["end_ts"] > sw["start_ts"]).all()
    assert (sw["start_ts"].iloc[1:].to_numpy() >= sw["end_ts"].iloc[:-1].to_numpy()).all()
    fig = plotting.load_sweep_figure(sw, pyplot=False, server_metrics=run.sweep_metrics)
    gids = {ln.get_gid() for a in fig.axes for ln in a.get_lines()}
    for i in range(len(sw)):
        assert {f"level:{i}:running", f"level:{i}:waiting",
                f"level:{i}:kv_cache_usage"} <= gids
    running = [ln for a in fig.axes for ln in a.get_lines()
               if ln.get_gid() == f"level:{len(sw) - 1}:running"]
    assert max(running[0].get_ydata()) >= 1
    fig.savefig(_devnull(), format="png")
    plain = plotting.load_sweep_figure(sw, pyplot=False)  # without metrics: as before
    assert len(plain.axes) == 4


# -- why was this task slow ------------------------------------------------------------------


def _queue_case() -> tuple[Traces, pd.DataFrame]:
    """Task 1 waited 1.8 s in the server's queue (8 waiting, KV 97 % then); task 0 was
    quick; task 2 waited in the controller's queue."""
    metrics = _metrics({SERVERS[0]: [0, 0, 8, 8, 8, 8, 0], SERVERS[1]: [0] * 7}, kv=0.97)
    tasks = _tasks({0: 0.3, 1: 2.0, 2: 1.5}, queue={2: 1.2})
    rows = [
        {S.TASK_ID: 0, S.SESSION_ID: 0, S.START_TS: 0.0, S.END_TS: 0.3, S.SERVER: SERVERS[1],
         "generate_s": 0.3, S.TOTAL_S: 0.3},
        {S.TASK_ID: 1, S.SESSION_ID: 1, S.START_TS: 0.9, S.END_TS: 2.0, S.SERVER: SERVERS[0],
         "generate_s": 1.1, S.TOTAL_S: 1.1},
        {S.TASK_ID: 1, S.SESSION_ID: 2, S.START_TS: 0.0, S.END_TS: 0.9, S.SERVER: SERVERS[1],
         "generate_s": 0.9, S.TOTAL_S: 0.9},
        {S.TASK_ID: 2, S.SESSION_ID: 3, S.START_TS: 1.2, S.END_TS: 1.5, S.SERVER: SERVERS[1],
         "generate_s": 0.3, S.TOTAL_S: 0.3},
    ]
    sessions = _sessions(rows)
    joined = sessions.assign(server_queue_s=[0.01, 0.9, 0.01, 0.01],
                             server_prefill_s=[0.05, 0.05, 0.1, 0.05],
                             server_decode_s=[0.2, 0.1, 0.7, 0.2],
                             server_frontend_s=[0.02, 0.03, 0.05, 0.02],
                             client_own_s=[0.001] * 4)
    return _traces(tasks, sessions, metrics), joined


def test_why_slow_names_the_server_queue_with_the_server_state_then() -> None:
    traces, joined = _queue_case()
    table = analysis.why_slow(traces, server_view=joined, k=2)
    assert list(table.columns) == list(analysis.WHY_COLUMNS)
    assert list(table.index) == [1, 2]  # the slowest first
    row = table.loc[1]
    assert row[S.SESSION_ID] == 1 and row[S.SERVER] == SERVERS[0]  # its slowest generation
    assert (row["waiting"], row["running"]) == (8.0, 2.0)
    assert row["kv_cache_usage"] == pytest.approx(0.97)
    assert row["state_samples"] >= 2
    assert row["cause"] == "server_queue"
    assert row["verdict"] == "server queue 0.90 s of 2.00 s: 8 waiting, 2 running, KV 97 %"
    assert table.loc[2, "cause"] == "controller_queue"
    assert table.loc[2, "verdict"].startswith("controller queue 1.20 s of 1.50 s")
    # the parts of the wall time add up (other is derived, clipped at 0)
    parts = table[[S.QUEUE_S, "generate_s", "tool_s", "reward_s", "other_s"]].sum(axis=1)
    np.testing.assert_allclose(parts, table[S.TOTAL_S])


def test_why_slow_without_the_servers_spans_and_by_session() -> None:
    traces, _ = _queue_case()
    table = analysis.why_slow(traces, task_ids=1)
    assert list(table.index) == [1]
    row = table.loc[1]
    assert np.isnan(row["server_queue_s"])
    assert row["cause"] == "generate"
    assert row["verdict"].endswith(": 8 waiting, 2 running, KV 97 %")
    streamed = dataclasses.replace(traces, sessions=traces.sessions.assign(
        ttft_s=[0.05, 0.95, 0.05, 0.05], itl_s=0.01))
    row = analysis.why_slow(streamed, task_ids=[1]).loc[1]
    assert row["cause"] == "first_token" and row["decode_s"] == pytest.approx(0.15)
    by_session = analysis.why_slow(traces, task_ids=[1], by="session")
    assert list(by_session.index) == [(1, 1), (1, 2)]
    assert by_session[S.QUEUE_S].isna().all()
    with pytest.raises(ConfigError, match="no such task"):
        analysis.why_slow(traces, task_ids=[99])
    with pytest.raises(ConfigError, match="k must be"):
        analysis.why_slow(traces, k=0)
    # no metrics: no state, a verdict still
    bare = dataclasses.replace(traces, server_metrics=traces.server_metrics.iloc[:0])
    row = analysis.why_slow(bare, task_ids=[1]).loc[1]
    assert np.isnan(row["waiting"]) and row["verdict"] == "generate 1.10 s of 2.00 s"


def test_why_slow_quotes_no_state_when_no_scrape_saw_the_session() -> None:
    """The scrapes during task 1's queue failed (a saturated server answers /metrics late):
    the verdict says so, with the count, instead of the idle state scraped before it."""
    traces, joined = _queue_case()
    m = traces.server_metrics
    lost = (m[S.SERVER] == SERVERS[0]) & m[S.TS].isin([1.0, 1.5, 2.0])
    failed = pd.DataFrame([(ts, SERVERS[0], SCRAPE_FAILED, "reason=timeout", 1.0)
                           for ts in (1.0, 1.5)], columns=list(S.SERVER_METRIC_COLUMNS))
    metrics = pd.concat([m[~lost], failed], ignore_index=True).sort_values(S.TS,
                                                                         kind="stable")
    gap = dataclasses.replace(traces, server_metrics=metrics)
    row = analysis.why_slow(gap, server_view=joined, task_ids=[1]).loc[1]
    assert row["cause"] == "server_queue"
    assert (row["state_samples"], row["scrapes_failed"]) == (0, 2)
    assert np.isnan(row["waiting"]) and np.isnan(row["running"])
    assert row["verdict"] == ("server queue 0.90 s of 2.00 s: no scrape saw the server "
                              "while it ran (2 failed)")
    # the same with the failures lost too: no scrape at all inside
    quiet = dataclasses.replace(traces, server_metrics=m[~lost])
    row = analysis.why_slow(quiet, server_view=joined, task_ids=[1]).loc[1]
    assert row["verdict"] == "server queue 0.90 s of 2.00 s: no scrape fell while it ran"
    # the series hold a gap (NaN) at the failed scrapes, and the lanes draw it
    wide = analysis.server_series(metrics, wide=True).loc[SERVERS[0]]
    assert wide.loc[[1.0, 1.5], "waiting"].isna().all()
    assert (wide.loc[[1.0, 1.5], "scrape_failed"] == 1).all()
    [lane] = lane_layout(metrics, ("waiting",))
    x, y = next((x, y) for label, x, y in lane.lines if label == SERVERS[0])
    assert np.isnan(y[np.isin(x, [1.0, 1.5])]).all() and np.isfinite(y[x < 1.0]).all()


def test_plot_why_slow_draws_the_parts_and_the_verdicts() -> None:
    traces, joined = _queue_case()
    table = analysis.why_slow(traces, server_view=joined, k=3)
    fig = plotting.why_slow_figure(table)
    ax = fig.axes[0]
    gids = {p.get_gid() for p in ax.patches}
    assert {"why:controller_queue", "why:server_queue", "why:server_decode"} <= gids
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "why:verdict"]
    assert texts == list(table["verdict"])
    # the bar of task 1 (row 0) is as long as its wall time
    ends = [p.get_x() + p.get_width() for p in ax.patches
            if abs(p.get_y() + p.get_height() / 2) < 1e-9 and p.get_width() > 0]
    assert max(ends) == pytest.approx(2.0)
    fig.savefig(_devnull(), format="png")
    empty = plotting.plot_why_slow(table.iloc[:0], ax=Figure().add_subplot())
    assert any(t.get_gid() == "no-data" for t in empty.texts)


def test_why_slow_on_a_simulator_run(run: Run) -> None:
    table = analysis.why_slow(run.traces, k=3)
    assert len(table) == 3
    assert (table["state_samples"] >= 1).all()
    # the slowest tasks of a burst against 4 slots waited behind others
    assert table["waiting"].max() >= 1
    assert table["verdict"].str.contains("waiting").all()


# -- live monitor ---------------------------------------------------------------------------


async def test_the_live_monitor_draws_a_server_lane_from_new_rows_only() -> None:
    with pytest.raises(ConfigError, match="unknown server lane"):
        LiveMonitor(object(), server_lanes=("nope",), autostart=False)
    async with serve("vllm", n=1, time_scale=0.05, max_num_seqs=2) as cluster:
        ctl = RolloutController(engine_config=fast_engine_config(), vllm=cluster.addresses,
                                scrape_interval=0.02)
        async with ctl:
            monitor = LiveMonitor(ctl, server_lanes=True, autostart=False)
            assert monitor.lanes == MONITOR_LANES
            res = await ctl.rollout_batch_async(["q"] * 8, _wf(16))
            assert all(r.ok for r in res)
            follower = monitor.metrics
            assert follower is not None
            monitor.refresh()
            first = follower.cursor
            assert first > 0
            await _until(lambda: len(ctl.tracer.server_metrics_df()) > first, "new rows")
            monitor.refresh()
            assert follower.cursor > first
            # only the lanes' metrics are kept
            assert set(follower.frame[S.METRIC]) <= follower.metrics
            assert _scrapes(follower.frame) >= 2
            out = monitor.view.timeline.outputs
            assert len(out) == 1 and "image/png" in out[0]["data"]
            assert monitor.view._drawn_key is not None and monitor.view._drawn_key[2] > 0
