"""rollout_kit.plotting: checks on the data behind the plots, plus one figure comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.testing.decorators import check_figures_equal

from rollout_kit import ConfigError, TraceSchemaError
from rollout_kit import plotting as P
from rollout_kit.tracing import phase_color, register_phase
from rollout_kit.tracing import schema as S
from tests._trace_factories import hand_tasks, make_traces, record_with_tracer


def _collections(ax: Axes) -> dict[str, Any]:
    return {c.get_gid().split(":", 1)[1]: c for c in ax.collections
            if (c.get_gid() or "").startswith("timeline:")}


def _rects(coll: Any) -> np.ndarray:
    """(n, 5, 2) rectangles of a timeline collection's single compound path."""
    (path,) = coll.get_paths()
    return np.asarray(path.vertices).reshape(-1, 5, 2)


def _no_data(ax: Axes) -> bool:
    return any(t.get_gid() == "no-data" for t in ax.texts)


def _spans(rows: list[tuple[int, int, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=[S.TASK_ID, S.SESSION_ID, S.PHASE, S.START, S.END])


# -- timeline ----------------------------------------------------------------------------

def test_timeline_segments_colors_and_extents() -> None:
    spans = _spans([(0, 0, "generate", 1.0, 2.0), (0, 0, "reward", 2.5, 3.0),
                    (1, 0, "generate", 1.5, 4.0)])
    tasks = pd.DataFrame({S.SUBMIT_TS: [0.5, 1.0], S.DISPATCH_TS: [1.0, 1.5],
                          S.END_TS: [3.0, 4.0], S.TOTAL_S: [2.5, 3.0]},
                         index=pd.Index([0, 1], name=S.TASK_ID))
    ax = P.plot_timeline(spans, tasks=tasks, height=0.5)
    cols = _collections(ax)
    assert list(cols) == ["idle", "queued", "generate", "reward"]
    assert tuple(cols["generate"].get_facecolor()[0]) == to_rgba(phase_color("generate"))
    assert tuple(cols["reward"].get_facecolor()[0]) == to_rgba(phase_color("reward"))
    gen = _rects(cols["generate"])
    # x = seconds since the first submit (0.5); task 0 (submitted first) is row 0
    assert gen[:, :, 0].min(axis=1).tolist() == [0.5, 1.0]
    assert gen[:, :, 0].max(axis=1).tolist() == [1.5, 3.5]
    assert gen[:, :, 1].min(axis=1).tolist() == [-0.25, 0.75]
    assert gen[:, :, 1].max(axis=1).tolist() == [0.25, 1.25]
    q = _rects(cols["queued"])
    assert q[:, :, 0].min(axis=1).tolist() == [0.0, 0.5]
    assert q[:, :, 0].max(axis=1).tolist() == [0.5, 1.0]
    idle = _rects(cols["idle"])  # whole active extent dispatch -> end, under the phases
    assert idle[:, :, 0].min(axis=1).tolist() == [0.5, 1.0]
    assert idle[:, :, 0].max(axis=1).tolist() == [2.5, 3.5]
    assert cols["idle"].get_zorder() < cols["generate"].get_zorder()
    assert ax.get_xlabel() == "seconds since first submit"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["task 0", "task 1"]
    assert ax.get_ylim() == (1.5, -0.5)  # first row on top
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["idle", "queued", "generate", "reward"]


def test_timeline_artist_count_does_not_grow_with_tasks() -> None:
    small, big = make_traces(10), make_traces(600)
    ax1 = P.plot_timeline(small.spans, tasks=small.tasks)
    ax2 = P.plot_timeline(big.spans, tasks=big.tasks)
    assert len(ax1.collections) == len(ax2.collections) == 4
    assert len(ax1.patches) == len(ax2.patches) == 0
    assert len(_rects(_collections(ax2)["generate"])) == 600
    assert len(ax2.get_yticks()) == 0  # too many rows to label
    assert "600 tasks" in ax2.get_title()


def test_timeline_custom_phase_needs_no_code_change() -> None:
    register_phase("verify_plot_test", "#00aa88")
    f = make_traces(5, extra_phase="verify_plot_test")
    ax = P.plot_timeline(f.spans, tasks=f.tasks)
    cols = _collections(ax)
    assert tuple(cols["verify_plot_test"].get_facecolor()[0]) == to_rgba("#00aa88")
    assert "verify_plot_test" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_timeline_sort_by_duration_puts_longest_first() -> None:
    f = make_traces(15)
    ax = P.plot_timeline(f.spans, tasks=f.tasks, sort="duration")
    longest = int(f.tasks[S.TOTAL_S].idxmax())
    assert ax.get_yticklabels()[0].get_text() == f"task {longest}"
    ax2 = P.plot_timeline(f.spans, tasks=f.tasks, sort="dispatch")
    first = int(f.tasks[S.DISPATCH_TS].idxmin())
    assert ax2.get_yticklabels()[0].get_text() == f"task {first}"


def test_timeline_by_session_and_color_by_status_and_server() -> None:
    f = make_traces(6, sessions=2, parallel=True, statuses=("accepted", "failed"))
    ax = P.plot_timeline(f.spans, tasks=f.tasks, by="session", color_by="status")
    cols = _collections(ax)
    assert {"accepted", "failed"} <= set(cols)
    assert tuple(cols["failed"].get_facecolor()[0]) == to_rgba(P.STATUS_COLORS["failed"])
    assert len(ax.get_yticks()) == 12  # one row per session
    assert ax.get_yticklabels()[0].get_text().endswith("/s0")
    ax2 = P.plot_timeline(f.spans, tasks=f.tasks, color_by="server")
    assert {"127.0.0.1:1", "127.0.0.1:2"} <= set(_collections(ax2))


def test_timeline_skips_spans_of_tasks_not_listed() -> None:
    f = make_traces(6)
    ax = P.plot_timeline(f.spans, tasks=f.tasks.iloc[:3])
    assert len(_rects(_collections(ax)["generate"])) == 3
    assert len(ax.get_yticks()) == 3


def test_timeline_from_tasks_only() -> None:
    ax = P.plot_timeline(hand_tasks())
    cols = _collections(ax)
    assert list(cols) == ["queued", "running", "mark:failed", "mark:rejected"]
    run = _rects(cols["running"])
    assert sorted(run[:, :, 0].max(axis=1).tolist()) == [1.0, 2.0, 3.0, 4.0]
    ax2 = P.plot_timeline(hand_tasks(), color_by="status")
    assert {"accepted", "rejected", "failed"} <= set(_collections(ax2))
    with pytest.raises(ConfigError, match="spans"):
        P.plot_timeline(hand_tasks(), by="session")


def _failing_tasks() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Task 0 accepted, 1 failed mid-generate, 2 failed before any span (an empty row),
    3 rejected, 4 failed and never ended (nothing to mark)."""
    spans = _spans([(0, 0, "generate", 1.0, 2.0), (1, 0, "generate", 1.5, 2.5),
                    (3, 0, "generate", 2.0, 3.0), (3, 0, "reward", 3.0, 3.5)])
    tasks = pd.DataFrame({
        S.STATUS: pd.Categorical(["accepted", "failed", "failed", "rejected", "failed"],
                                 categories=list(S.STATUSES)),
        S.SUBMIT_TS: [0.5, 1.0, 1.2, 1.5, 1.6], S.DISPATCH_TS: [1.0, 1.5, np.nan, 2.0, np.nan],
        S.END_TS: [2.0, 2.5, 1.4, 3.5, np.nan]}, index=pd.Index(range(5), name=S.TASK_ID))
    return spans, tasks


def test_timeline_layout_marks_non_accepted_tasks() -> None:
    from rollout_kit.plotting._timeline import _layout

    spans, tasks = _failing_tasks()
    rows = _layout(spans, tasks.reset_index(), "task", "submit")
    assert rows.task.tolist() == [0, 1, 2, 3, 4]
    assert rows.status.tolist() == ["accepted", "failed", "failed", "rejected", "failed"]
    assert rows.marked.tolist() == [False, True, True, True, False]
    # extent: submit (queue wait included) -> last span end or end_ts
    assert rows.lo[rows.marked].tolist() == [1.0, 1.2, 1.5]
    assert rows.hi[rows.marked].tolist() == [2.5, 1.4, 3.5]
    by_session = _layout(spans, tasks.reset_index(), "session", "submit")
    assert by_session.marked.tolist() == [False, True, True]


def test_timeline_outlines_failed_tasks_by_default() -> None:
    spans, tasks = _failing_tasks()
    ax = P.plot_timeline(spans, tasks=tasks, height=0.5)
    cols = _collections(ax)
    assert list(cols) == ["idle", "queued", "generate", "reward", "mark:failed",
                          "mark:rejected"]
    failed = cols["mark:failed"]
    assert to_rgba(failed.get_edgecolor()[0]) == to_rgba(P.STATUS_COLORS["failed"])
    assert failed.get_facecolor().size == 0 or failed.get_facecolor()[0][3] == 0  # outline
    assert failed.get_linewidths()[0] > 0
    assert failed.get_zorder() > cols["generate"].get_zorder()
    rect = _rects(failed)
    assert len(rect) == 2  # task 1 and the empty row of task 2; task 4 never ended
    x0 = 0.5  # first submit
    assert rect[:, :, 0].min(axis=1) == pytest.approx([1.0 - x0, 1.2 - x0], abs=0.02)
    assert rect[:, :, 0].max(axis=1) == pytest.approx([2.5 - x0, 1.4 - x0], abs=0.02)
    assert (rect[:, :, 1].max(axis=1) - rect[:, :, 1].min(axis=1) > 0.5).all()  # around bar
    assert ax.get_xlim()[0] < 0  # room left of x = 0 for an outline starting there
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-2:] == ["failed (2 tasks)", "rejected (1 task)"]
    plain = P.plot_timeline(spans, tasks=tasks, mark_status=False)
    assert not any(k.startswith("mark:") for k in _collections(plain))


def test_timeline_fills_failed_rows_when_dense() -> None:
    f = make_traces(300, statuses=("accepted", "failed", "cancelled"))
    cols = _collections(P.plot_timeline(f.spans, tasks=f.tasks))
    assert len(_rects(cols["mark:failed"])) == len(_rects(cols["mark:cancelled"])) == 100
    face = cols["mark:cancelled"].get_facecolor()[0]
    assert tuple(face) == to_rgba(P.STATUS_COLORS["cancelled"])  # filled: rows too thin


def test_timeline_bad_input() -> None:
    f = make_traces(3)
    with pytest.raises(ConfigError, match="sort"):
        P.plot_timeline(f.spans, sort="alphabetical")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="color_by"):
        P.plot_timeline(f.spans, color_by="mood")  # type: ignore[arg-type]
    with pytest.raises(TraceSchemaError, match="end"):
        P.plot_timeline(f.spans.drop(columns=[S.END]))
    assert _no_data(P.plot_timeline(f.spans.iloc[:0]))
    assert _no_data(P.plot_timeline(f.spans.iloc[:0], tasks=f.tasks.iloc[:0]))


@check_figures_equal(extensions=["png"])
def test_timeline_equals_broken_barh_reference(fig_test: Any, fig_ref: Any) -> None:
    spans = _spans([(0, 0, "generate", 0.0, 1.0), (0, 0, "reward", 1.5, 2.0),
                    (1, 0, "generate", 0.5, 2.5), (2, 0, "reward", 1.0, 1.2)])
    ax = fig_test.subplots()
    P.plot_timeline(spans, ax=ax, labels=False, legend=False, height=0.6)
    ref = fig_ref.subplots()
    kw = {"linewidth": 0, "edgecolor": "none"}
    for y, (a, b) in enumerate([(0.0, 2.0), (0.5, 2.5), (1.0, 1.2)]):  # idle extents
        ref.broken_barh([(a, b - a)], (y - 0.3, 0.6), facecolors=P.IDLE_COLOR, zorder=1, **kw)
    for phase, rows in (("generate", [(0, 0.0, 1.0), (1, 0.5, 2.5)]),
                        ("reward", [(0, 1.5, 2.0), (2, 1.0, 1.2)])):
        for y, a, b in rows:
            ref.broken_barh([(a, b - a)], (y - 0.3, 0.6), facecolors=phase_color(phase),
                            zorder=2, **kw)
    ref.set_xlim(0.0, 2.5 * 1.01)
    ref.set_ylim(2.5, -0.5)
    ref.set_yticks([])
    ref.set_ylabel("3 tasks (sorted by submit)")
    ref.set_xlabel("seconds since first submit")
    ref.set_title("Latency timeline (3 tasks)")


# -- distributions -------------------------------------------------------------------------

def test_latency_hist_percentile_lines() -> None:
    f = make_traces(40)
    ax = P.plot_latency_hist(f.tasks, percentiles=(50, 90))
    lines = {ln.get_gid(): ln for ln in ax.lines}
    for metric, col in (("generate", "generate_s"), ("total", S.TOTAL_S),
                        ("queue", S.QUEUE_S)):
        for q in (50, 90):
            x = lines[f"p{q}:{metric}"].get_xdata()[0]
            assert x == pytest.approx(np.percentile(f.tasks[col], q))
    assert lines["p50:generate"].get_color() == phase_color("generate")
    assert len(ax.patches) == 4  # one step histogram per metric: queue, generate, reward, total
    by_spans = P.plot_latency_hist(f.spans)
    gids = {ln.get_gid() for ln in by_spans.lines}
    assert "p99:generate" in gids and "p99:reward" in gids


def test_latency_hist_missing_columns_is_no_data() -> None:
    tasks = hand_tasks()[[S.STATUS, S.SUBMIT_TS, S.END_TS]]
    assert _no_data(P.plot_latency_hist(tasks))
    assert _no_data(P.plot_latency_hist(hand_tasks().iloc[:0]))


def test_latency_scatter_lines_and_outliers() -> None:
    f = make_traces(50, statuses=("accepted", "rejected"))
    ax = P.plot_latency_scatter(f.tasks)
    lines = {ln.get_gid(): ln for ln in ax.lines}
    p95 = np.percentile(f.tasks[S.TOTAL_S], 95)
    assert lines["p95"].get_ydata()[0] == pytest.approx(p95)
    assert lines["p50"].get_ydata()[0] == pytest.approx(f.tasks[S.TOTAL_S].median())
    colls = {c.get_gid(): c for c in ax.collections}
    out = colls["outliers"].get_offsets()
    assert len(out) == int((f.tasks[S.TOTAL_S] > p95).sum()) > 0
    assert len(colls["status:accepted"].get_offsets()) == 25
    x = colls["status:accepted"].get_offsets()[:, 0]
    assert x.min() >= 0  # seconds since first submit


def test_only_failures_and_nothing_finished() -> None:
    f = make_traces(6, statuses=("failed",))
    ax = P.plot_latency_scatter(f.tasks)
    assert {c.get_gid() for c in ax.collections} >= {"status:failed"}
    never = pd.DataFrame({S.STATUS: ["failed"] * 3, S.SUBMIT_TS: [0.0, 1.0, 2.0],
                          S.DISPATCH_TS: np.nan, S.END_TS: np.nan})
    assert _no_data(P.plot_latency_scatter(never))
    assert _no_data(P.plot_throughput(never))
    assert _no_data(P.plot_timeline(never))  # nothing has a start or end to draw
    conc = P.plot_concurrency(never)  # never dispatched: only a queued line, no running one
    assert [ln.get_gid() for ln in conc.lines] == ["concurrency:queued"]
    assert _no_data(P.plot_concurrency(never.drop(columns=[S.DISPATCH_TS])))


# -- over time / servers ---------------------------------------------------------------

def test_throughput_and_concurrency_lines() -> None:
    ax = P.plot_throughput(hand_tasks(), window=1.0)
    line = next(ln for ln in ax.lines if ln.get_gid() == "tasks_per_s")
    assert list(line.get_ydata()) == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # last window held
    assert list(line.get_xdata()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    tok = P.plot_throughput(hand_tasks(), window=1.0, tokens=True)
    assert list(tok.lines[0].get_ydata()) == [0, 10, 30, 20, 40, 40]
    ax2 = P.plot_concurrency(hand_tasks())
    lines = {ln.get_gid(): ln for ln in ax2.lines}
    assert list(lines["concurrency:running"].get_ydata()) == [1, 2, 1, 2, 1, 0]
    assert "concurrency:queued" in lines
    f = make_traces(5, sessions=2, parallel=True)
    ax3 = P.plot_concurrency(f.spans, by_phase=True)
    gids = {ln.get_gid() for ln in ax3.lines}
    assert gids == {"concurrency:generate", "concurrency:reward"}


def test_throughput_window_follows_the_run_length() -> None:
    def run(length: float) -> pd.DataFrame:
        return pd.DataFrame({S.SUBMIT_TS: [10.0, 10.1], S.END_TS: [10.0 + length / 2,
                                                                    10.0 + length]})
    assert P.throughput_window(run(0.56)) == pytest.approx(0.01)  # 0.56 / 50 -> 0.0112
    assert P.throughput_window(run(100.0)) == pytest.approx(2.0)
    assert P.throughput_window(run(3600.0)) == pytest.approx(50.0)
    assert P.throughput_window(run(0.137)) == pytest.approx(0.005)  # floor: 5 ms
    assert P.throughput_window(run(0.0)) == pytest.approx(0.005)
    never = pd.DataFrame({S.SUBMIT_TS: [1.0], S.END_TS: [np.nan]})
    assert P.throughput_window(never) == pytest.approx(0.005)


def test_throughput_of_a_short_run_is_visible() -> None:
    """A 0.56 s run: windows from its length, x from 0 to the last window's end."""
    n = 20
    tasks = pd.DataFrame({S.STATUS: ["accepted"] * n, S.SUBMIT_TS: np.zeros(n),
                          S.END_TS: np.linspace(0.3, 0.56, n)})
    ax = P.plot_throughput(tasks)
    assert "10 ms windows" in ax.get_xlabel()
    lo, hi = ax.get_xlim()
    assert lo == 0.0 and 0.56 <= hi <= 0.6
    line = next(ln for ln in ax.lines if ln.get_gid() == "tasks_per_s")
    y = np.asarray(line.get_ydata())
    assert y.sum() * 0.01 == pytest.approx(n + y[-1] * 0.01)  # every task counted once
    one = P.plot_throughput(tasks, window=1.0)  # shorter than one window: still one bar
    line = next(ln for ln in one.lines if ln.get_gid() == "tasks_per_s")
    assert list(line.get_xdata()) == [0.0, 1.0] and list(line.get_ydata()) == [20.0, 20.0]
    assert one.get_xlim() == (0.0, 1.0)
    colors = {ln.get_gid(): to_rgba(ln.get_color()) for ln in one.lines}
    assert colors["tasks_per_s"] != colors["accepted_per_s"]


def _distance(a: Any, b: Any) -> float:
    return float(np.linalg.norm(np.subtract(to_rgba(a)[:3], to_rgba(b)[:3])))


def test_concurrency_running_and_queued_are_told_apart() -> None:
    lines = {ln.get_gid(): ln for ln in P.plot_concurrency(hand_tasks()).lines}
    run, queued = lines["concurrency:running"], lines["concurrency:queued"]
    assert _distance(run.get_color(), queued.get_color()) > 0.5
    assert run.get_linestyle() != queued.get_linestyle()


def _labels_inside(ax: Axes) -> bool:
    fig = ax.figure
    fig.canvas.draw()  # type: ignore[union-attr]
    frame = ax.get_window_extent()
    return all(frame.x0 <= t.get_window_extent().x0 and t.get_window_extent().x1 <= frame.x1
               for t in ax.texts)


def test_server_load_labels_stay_inside_the_frame() -> None:
    f = make_traces(40, sessions=1)
    fig = plt.figure(figsize=(10.0, 5.0), layout="constrained")  # the report's size
    ax = P.plot_server_load(f.sessions, ax=fig.add_subplot())
    assert len(ax.texts) == 2
    widest = max(p.get_width() for p in ax.patches)
    assert ax.get_xlim()[1] >= 1.2 * widest
    assert _labels_inside(ax)
    dash = P.dashboard(f.tasks, f.spans, f.sessions)  # a quarter of the dashboard
    assert dash.axes[3].get_title() == "Server load" and _labels_inside(dash.axes[3])


def test_server_load() -> None:
    f = make_traces(8, sessions=2)
    ax = P.plot_server_load(f.spans)
    gen = [p for p in ax.patches if p.get_gid() == "server:generate"]
    assert len(gen) == 2
    per_server = f.spans[f.spans[S.PHASE] == "generate"].groupby(S.SERVER)[S.DURATION].sum()
    assert sorted(p.get_width() for p in gen) == pytest.approx(sorted(per_server))
    ax2 = P.plot_server_load(f.sessions)
    assert sorted(p.get_width() for p in ax2.patches) == [8, 8]
    assert _no_data(P.plot_server_load(f.sessions.drop(columns=[S.SERVER])))


def test_dashboard_and_save_plot_on_real_tracer(tmp_path: Path) -> None:
    fr = record_with_tracer(6).frames()  # type: ignore[attr-defined]
    fig = P.dashboard(fr.tasks, fr.spans, fr.sessions)
    assert len(fig.axes) == 4
    titles = [a.get_title() for a in fig.axes]
    assert titles[0].startswith("Latency timeline") and titles[3] == "Server load"
    assert not any(_no_data(a) for a in fig.axes)
    tl = _collections(fig.axes[0])
    assert {"generate", "reward", "queued", "idle"} <= set(tl)
    P.save_plot(P.plot_timeline, tmp_path / "t.png", fr.spans, tasks=fr.tasks)
    P.save_plot(P.dashboard, tmp_path / "d.png", fr.tasks, fr.spans)
    for name in ("t.png", "d.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    n_open = len(plt.get_fignums())
    P.save_plot(P.plot_latency_hist, tmp_path / "h.png", fr.tasks)
    assert len(plt.get_fignums()) == n_open  # save_plot leaves no pyplot figure behind


def test_plot_functions_draw_on_given_axes() -> None:
    f = make_traces(5)
    _, axes = plt.subplots(1, 3)
    assert P.plot_timeline(f.spans, ax=axes[0]) is axes[0]
    assert P.plot_latency_hist(f.tasks, ax=axes[1]) is axes[1]
    assert P.plot_throughput(f.tasks, ax=axes[2]) is axes[2]
    assert len(plt.get_fignums()) == 1
