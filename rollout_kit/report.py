"""Reports of traces: a summary (Markdown and CSV), the standard plots as PNGs, a Chrome /
Perfetto trace, and the frames as CSV and Parquet — what ``rollout-kit report`` writes, as
library calls for notebooks and scripts.

Usage::

    from rollout_kit.report import write_report
    write_report(load_traces("run/traces.jsonl"), "report/")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from . import analysis, plotting
from ._errors import ConfigError
from ._paths import prepare_output_dir
from .tracing import Traces, to_chrome_trace

__all__ = ["CHROME_FILE", "PLOT_FILES", "REPORT_LANES", "SERVER_STATE_FILE", "export_frames",
           "write_chrome_trace", "write_report"]


def _no_bar(progress: bool | None) -> bool | None:
    return None if progress is None else not progress  # None: tqdm decides (tty or not)


CHROME_FILE = "trace.chrome.json"
PLOT_FILES = ("timeline.png", "latency_hist.png", "latency_scatter.png", "throughput.png",
              "concurrency.png", "server_load.png", "dashboard.png")
#: the timeline with the servers' state in lanes under it: written only when the traces
#: hold server metrics (``Traces.server_metrics``; a run with ``scrape_interval`` set)
SERVER_STATE_FILE = "server_state.png"
#: the lanes of :data:`SERVER_STATE_FILE`, top to bottom, those the servers exposed
REPORT_LANES = ("waiting", "running", "kv_cache_usage", "preemptions_per_s",
                "prefix_cache_hit_rate", "generation_tokens_per_s")
_FRAMES = ("tasks", "sessions", "spans")


def export_frames(traces: Traces, out: str | Path, *, parquet: bool = True) -> list[Path]:
    """Write ``tasks``/``sessions``/``spans`` as CSV, and as Parquet unless ``parquet=False``.

    Args:
        traces: the loaded traces.
        out: an existing folder.
        parquet: also write each frame as ``<name>.parquet`` (pyarrow is a dependency).

    Returns:
        The files written.

    Raises:
        ConfigError: ``out`` is not a folder.
    """
    out = Path(out)
    if not out.is_dir():
        raise ConfigError(f"{out} is not a folder")
    written: list[Path] = []
    for name in _FRAMES:
        df = getattr(traces, name)
        written.append(out / f"{name}.csv")
        df.to_csv(written[-1])
        if parquet:
            written.append(out / f"{name}.parquet")
            df.to_parquet(written[-1])
    return written




def write_report(traces: Traces, out: str | Path, *, force: bool = False,
                 window: float | None = None, progress: bool | None = None) -> list[Path]:
    """Write summary tables, frames, PNG plots and a Chrome trace into ``out``.

    The plots are :data:`PLOT_FILES`, plus :data:`SERVER_STATE_FILE` (the timeline with
    lanes of the servers' queue, KV cache, preemptions, prefix-cache hits and throughput)
    when the traces hold server metrics.

    Args:
        traces: the loaded traces.
        out: the report folder (created; must be empty unless ``force``).
        force: write into a non-empty folder, overwriting files of the same names.
        window: throughput window in seconds; default: from the run's length
            (:func:`rollout_kit.plotting.throughput_window`: length / 50, at least 5 ms).
        progress: show a progress bar (default: when stderr is a terminal).

    Returns:
        The files written.

    Raises:
        ConfigError: ``out`` is not empty and ``force`` is false, or is a file.
    """
    out = Path(out)
    prepare_output_dir(out, force)
    t, sp, se = traces.tasks, traces.spans, traces.sessions
    summ = _measured(analysis.summary(t, sessions=se))
    if window is None:
        window = plotting.throughput_window(t)
    written: list[Path] = []

    def summary_files() -> None:
        md = out / "summary.md"
        md.write_text(f"# Rollout report\n\n{len(t)} tasks, {len(se)} sessions, "
                      f"{len(sp)} spans.\n\n{summ.to_markdown()}", encoding="utf-8")
        summ.as_series().rename("value").to_csv(out / "summary.csv", index_label="metric")
        written.extend([md, out / "summary.csv"])

    def plot(fn: Callable[..., Any], name: str, *args: Any, **kw: Any) -> Callable[[], None]:
        def step() -> None:
            plotting.save_plot(fn, out / name, *args, **kw)
            written.append(out / name)
        return step

    def chrome() -> None:
        write_chrome_trace(traces, out / CHROME_FILE)
        written.append(out / CHROME_FILE)

    steps: list[tuple[str, Callable[[], None]]] = [
        ("summary", summary_files),
        ("frames", lambda: written.extend(export_frames(traces, out))),
        ("timeline", plot(plotting.plot_timeline, "timeline.png", sp, tasks=t,
                          figsize=(12.0, 6.0))),
        ("latency_hist", plot(plotting.plot_latency_hist, "latency_hist.png", t)),
        ("latency_scatter", plot(plotting.plot_latency_scatter, "latency_scatter.png", t)),
        ("throughput", plot(plotting.plot_throughput, "throughput.png", t, window=window)),
        ("concurrency", plot(plotting.plot_concurrency, "concurrency.png", t)),
        ("server_load", plot(plotting.plot_server_load, "server_load.png", se)),
        ("dashboard", plot(plotting.dashboard, "dashboard.png", t, sp, se, window=window)),
        ("chrome", chrome),
    ]
    metrics = getattr(traces, "server_metrics", None)
    if metrics is not None and len(metrics):
        found = set(analysis.server_series(metrics)["series"].astype(str))
        lanes = [x for x in REPORT_LANES if x in found]
        if lanes:
            steps.insert(-1, ("server_state", plot(
                plotting.plot_timeline, SERVER_STATE_FILE, sp, tasks=t, server_metrics=metrics,
                lanes=lanes, figsize=(12.0, 6.0 + 1.0 * len(lanes)))))
    with tqdm(steps, desc="report", unit="step", disable=_no_bar(progress)) as bar:
        for name, step in bar:
            bar.set_postfix_str(name)
            step()
    return written


def _measured(summ: analysis.Summary) -> analysis.Summary:
    """``summ`` without what the run did not measure: latency metrics with no values
    (e.g. ``ttft_s`` when no server reported it) and throughput rows that are NaN."""
    lat = summ.latency[summ.latency["count"] > 0]
    return dataclasses.replace(summ, latency=lat, throughput=summ.throughput.dropna())


def write_chrome_trace(traces: Traces, path: Path) -> dict[str, Any]:
    """The Chrome / Perfetto trace of every frame: tracks, flows, counters, continuations."""
    return to_chrome_trace(traces.spans, path, tasks=traces.tasks, sessions=traces.sessions,
                           events=traces.events)
