"""rollout_kit.plotting._load: the data behind the load-sweep plots, on hand-made frames."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from rollout_kit import ConfigError
from rollout_kit import plotting as P


@pytest.fixture(autouse=True)
def _close() -> Any:
    yield
    plt.close("all")


def _sweep() -> pd.DataFrame:
    # levels given out of order: the plots sort them
    return pd.DataFrame({
        "level": [20.0, 5.0, 10.0, 40.0],
        "offered_rate": [20.0, 5.0, 10.0, 40.0],
        "achieved_rate": [19.8, 5.0, 10.0, 30.0],
        "request_throughput": [19.5, 4.9, 9.9, 25.0],
        "request_goodput": [15.0, 4.9, 9.5, 2.0],
        "median_ttft_ms": [30.0, 10.0, 12.0, 400.0],
        "p99_ttft_ms": [90.0, 20.0, 25.0, 1500.0],
        "median_e2el_ms": [300.0, 100.0, 120.0, 2000.0],
        "p99_e2el_ms": [600.0, 200.0, 250.0, 5000.0],
        "saturated": [False, False, False, True],
    })


def _line(ax: Axes, gid: str) -> tuple[list[float], list[float]]:
    (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    return (np.asarray(line.get_xdata(), dtype=float).tolist(),
            np.asarray(line.get_ydata(), dtype=float).tolist())


def _scatter(ax: Axes, gid: str) -> list[list[float]]:
    (coll,) = [c for c in ax.collections if c.get_gid() == gid]
    pts: list[list[float]] = np.asarray(coll.get_offsets(), dtype=float).tolist()
    return pts


def _bar_total(ax: Axes) -> float:
    return float(sum(p.get_height() for p in ax.patches if isinstance(p, Rectangle)))


def _no_data(ax: Axes) -> bool:
    return any(t.get_gid() == "no-data" for t in ax.texts)


def test_knee_draws_each_stat_against_throughput_sorted() -> None:
    ax = P.plot_latency_vs_throughput(_sweep())
    assert _line(ax, "knee:median_ttft_ms") == ([4.9, 9.9, 19.5, 25.0], [10.0, 12.0, 30.0, 400.0])
    assert _line(ax, "knee:p99_ttft_ms") == ([4.9, 9.9, 19.5, 25.0], [20.0, 25.0, 90.0, 1500.0])
    assert _scatter(ax, "saturated") == [[25.0, 1500.0]]  # ringed on the last stat's line
    assert ax.get_ylabel() == "TTFT (ms)"
    assert ax.get_xlabel() == "request throughput (req/s)"


def test_knee_other_metric_and_x_and_log() -> None:
    ax = P.plot_latency_vs_throughput(_sweep(), metric="e2el", stats=("p99",),
                                      x="request_goodput", log=True)
    assert _line(ax, "knee:p99_e2el_ms") == ([2.0, 4.9, 9.5, 15.0], [5000.0, 200.0, 250.0, 600.0])
    assert ax.get_yscale() == "log"
    assert [ln.get_gid() for ln in ax.get_lines()] == ["knee:p99_e2el_ms"]


def test_knee_skips_nan_levels_and_missing_columns() -> None:
    df = _sweep()
    df.loc[1, "p99_ttft_ms"] = np.nan  # a level where nothing completed
    ax = P.plot_latency_vs_throughput(df, stats=("median", "p99", "p90"))  # no p90 column
    assert _line(ax, "knee:p99_ttft_ms")[0] == [9.9, 19.5, 25.0]
    assert {ln.get_gid() for ln in ax.get_lines()} == {"knee:median_ttft_ms", "knee:p99_ttft_ms"}


def test_knee_bad_choices_raise() -> None:
    with pytest.raises(ConfigError, match="metric"):
        P.plot_latency_vs_throughput(_sweep(), metric="latency")
    with pytest.raises(ConfigError, match="stat"):
        P.plot_latency_vs_throughput(_sweep(), stats=("p95",))


def test_goodput_vs_offered_rate() -> None:
    ax = P.plot_goodput(_sweep())
    assert _line(ax, "goodput") == ([5.0, 10.0, 20.0, 40.0], [4.9, 9.5, 15.0, 2.0])
    assert _line(ax, "throughput") == ([5.0, 10.0, 20.0, 40.0], [4.9, 9.9, 19.5, 25.0])
    assert _scatter(ax, "saturated") == [[40.0, 2.0]]
    assert ax.get_xlabel() == "offered rate (req/s)"


def test_goodput_concurrency_sweep_uses_level_and_notes_missing_slos() -> None:
    df = pd.DataFrame({"level": [4, 1, 2], "offered_rate": [np.inf] * 3,
                       "achieved_rate": [40.0, 10.0, 20.0],
                       "request_throughput": [38.0, 10.0, 19.0],
                       "request_goodput": [np.nan] * 3})
    ax = P.plot_goodput(df)
    assert _line(ax, "throughput") == ([1.0, 2.0, 4.0], [10.0, 19.0, 38.0])
    assert ax.get_xlabel() == "level (max concurrency)"
    assert any(t.get_gid() == "no-goodput" for t in ax.texts)
    assert not [ln for ln in ax.get_lines() if ln.get_gid() == "goodput"]


def test_achieved_vs_offered_with_ideal_line() -> None:
    ax = P.plot_achieved_rate(_sweep())
    assert _line(ax, "achieved") == ([5.0, 10.0, 20.0, 40.0], [5.0, 10.0, 19.8, 30.0])
    x, y = _line(ax, "ideal")
    assert x == y and x[0] == 0.0 and x[1] == pytest.approx(42.0)
    tx, ty = _line(ax, "tolerance")
    assert ty[1] == pytest.approx(0.95 * tx[1])
    assert _scatter(ax, "saturated") == [[40.0, 30.0]]
    assert ax.get_xlim() == ax.get_ylim() == pytest.approx((0.0, 42.0))
    ax2 = P.plot_achieved_rate(_sweep(), tolerance=0)
    assert "tolerance" not in {ln.get_gid() for ln in ax2.get_lines()}


def test_achieved_unbounded_rate_is_no_data() -> None:
    df = pd.DataFrame({"level": [1, 2], "offered_rate": [np.inf, np.inf],
                       "achieved_rate": [10.0, 20.0]})
    assert _no_data(P.plot_achieved_rate(df))


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "scheduled_s": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
        "sent_s": [0.0, 0.1005, 0.201, 0.3002, 0.4, np.nan],
        "send_lag_s": [0.0, 0.0005, 0.001, 0.0002, 0.0, np.nan],  # the last was never sent
        "warmup": [True, False, False, False, False, False],
        "status": ["accepted"] * 5 + ["failed"],
    }, index=pd.Index(range(6), name="task_id"))


def test_send_lag_hist_in_ms_without_warmup() -> None:
    ax = P.plot_send_lag(_frame(), bins=4)
    assert _bar_total(ax) == 4  # warm-up and unsent requests left out
    (p50,) = [ln for ln in ax.get_lines() if ln.get_gid() == "p50"]
    assert np.asarray(p50.get_xdata(), dtype=float)[0] == pytest.approx(0.35)  # ms
    (p99,) = [ln for ln in ax.get_lines() if ln.get_gid() == "p99"]
    assert np.asarray(p99.get_xdata(), dtype=float)[0] == pytest.approx(
        float(np.percentile([0.5, 1.0, 0.2, 0.0], 99)))
    assert ax.get_xlabel() == "send lag (ms)"
    assert _bar_total(P.plot_send_lag(_frame(), include_warmup=True)) == 5


def test_send_lag_over_time() -> None:
    ax = P.plot_send_lag(_frame(), kind="time")
    pts = np.asarray(_scatter(ax, "send_lag"))
    assert pts[:, 0].tolist() == [0.1, 0.2, 0.3, 0.4]
    assert pts[:, 1] == pytest.approx([0.5, 1.0, 0.2, 0.0])
    with pytest.raises(ConfigError, match="kind"):
        P.plot_send_lag(_frame(), kind="cdf")  # type: ignore[arg-type]


@pytest.mark.parametrize("plot", [P.plot_latency_vs_throughput, P.plot_goodput,
                                  P.plot_achieved_rate, P.plot_send_lag])
def test_empty_and_foreign_frames_are_no_data(plot: Any) -> None:
    assert _no_data(plot(pd.DataFrame()))
    assert _no_data(plot(pd.DataFrame({"x": [1.0]})))


def test_sweep_figure_has_four_panels_and_saves(tmp_path: Any) -> None:
    fig = P.load_sweep_figure(_sweep(), _frame(), pyplot=False)
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    assert [a.get_title() for a in axes] == ["TTFT vs throughput", "Goodput vs offered rate",
                                             "Achieved vs offered rate", "Send lag"]
    fig.savefig(tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    no_frame = P.load_sweep_figure(_sweep(), pyplot=False)
    assert _no_data(no_frame.get_axes()[3])
    P.save_plot(P.plot_goodput, tmp_path / "g.png", _sweep())
    assert (tmp_path / "g.png").exists()


_SHELL = """
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from matplotlib_inline.backend_inline import configure_inline_support
shell = InteractiveShell.instance()
configure_inline_support(shell, "module://matplotlib_inline.backend_inline")
matplotlib.interactive(True)  # as %matplotlib inline does: pyplot figures flush at a cell's end
values = []  # what a kernel sends as the cell's execute_result
shell.displayhook.write_format_data = lambda data, md=None: values.append("image/png" in data)
shell.run_cell('''
import pandas as pd
from rollout_kit.plotting import conversation_figure, dashboard, load_sweep_figure
turns = pd.DataFrame({"ttft_s": [0.1, 0.2], "cache_hit_ratio": [0.0, 0.5],
                      "status": ["accepted"] * 2, "warmup": [False] * 2},
                     index=pd.MultiIndex.from_tuples([(0, 0), (0, 1)], names=["task_id", "turn"]))
sweep = pd.DataFrame({"level": [1.0, 2.0], "offered_rate": [1.0, 2.0],
                      "achieved_rate": [1.0, 2.0], "request_throughput": [1.0, 1.9],
                      "median_ttft_ms": [10.0, 12.0], "p99_ttft_ms": [20.0, 30.0]})
''', store_history=False)
for cell in ("conversation_figure(turns)", "fig = conversation_figure(turns)",
             "load_sweep_figure(sweep)", "import matplotlib.pyplot as plt; plt.close('all'); fig"):
    values.clear()
    with capture_output() as cap:
        result = shell.run_cell(cell)
    result.raise_error()
    print(sum("image/png" in o.data for o in cap.outputs) + sum(values))
"""


def test_the_figures_show_once_in_a_notebook() -> None:
    """As a cell's value (displayed by IPython) and as an open pyplot figure (shown by the
    inline backend at the cell's end) a figure is one image, not two; closed, it still shows."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SHELL], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "1", "1"], out.stdout
