"""The RL views and plots on hand-made frames whose numbers are known."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from rollout_kit import TraceSchemaError, analysis, plotting
from rollout_kit.tracing import Tracer
from rollout_kit.tracing import schema as S

NS = 1_000_000_000


def frames():
    """Two steps: step 0 waits 1 s, trains 1 s, syncs 0.5 s; step 1 waits 0.7 s. Task 2
    is cut by step 0's update (versions 0 and 1)."""
    tr = Tracer()
    e = tr.epoch_ns

    def t(s):
        return None if s is None else e + round(s * NS)

    def step(n, times, samples, tokens):
        keys = S.STEP_TIMES
        return {"step": n, "version": n, **{k: t(v) for k, v in zip(keys, times, strict=True)},
                "samples": samples, "tokens": tokens, "status": "ok", "error": None}

    def sample(tid, n, lo, hi, tokens):
        return {"task_id": tid, "step": n, "version_min": lo, "version_max": hi,
                "staleness": n - lo, "partial": lo != hi, "tokens": tokens}

    tr.record_step(step(0, (0, 1, 1, 2, 2, 2.5), 2, 30),
                   [sample(0, 0, 0, 0, 20), sample(1, 0, 0, 0, 10)])
    tr.record_step(step(1, (2.5, 3.2, 3.2, 4.2, 4.2, 4.7), 2, 50),
                   [sample(2, 1, 0, 1, 40), sample(3, 1, 1, 1, 10)])
    steps, samples = tr.steps_df()
    spans = pd.DataFrame({
        S.TASK_ID: [0, 1, 2, 3], S.SESSION_ID: pd.array([0, 0, 0, 0], dtype="Int64"),
        S.PHASE: pd.Categorical(["generate"] * 4),
        S.START: [0.0, 0.0, 1.5, 2.6], S.END: [1.0, 0.8, 3.0, 3.2]})
    tasks = pd.DataFrame({S.START_TS: [0.0, 0.0, 1.5, 2.6], S.END_TS: [1.0, 0.8, 3.0, 3.2]},
                         index=pd.Index([0, 1, 2, 3], name=S.TASK_ID))
    events = pd.DataFrame({S.TASK_ID: [2], S.SESSION_ID: pd.array([0], dtype="Int64"),
                           S.EVENT: pd.Categorical(["continue"]), S.TS: [2.5],
                           S.VERSION: pd.array([1], dtype="Int64")})
    return steps, samples, spans, tasks, events


def test_rl_steps_splits_each_step_and_measures_idle_and_staleness() -> None:
    steps, samples, spans, tasks, _ = frames()
    per = analysis.rl_steps(steps, samples, tasks=tasks, spans=spans)
    assert list(per.columns) == list(analysis.RL_STEP_COLUMNS)
    assert per["step_s"].tolist() == pytest.approx([2.5, 2.2])
    assert per["wait_s"].tolist() == pytest.approx([1.0, 0.7])
    assert per["train_s"].tolist() == pytest.approx([1.0, 1.0])
    assert per["sync_s"].tolist() == pytest.approx([0.5, 0.5])
    assert per["trainer_idle_ratio"].tolist() == pytest.approx([0.4, 0.7 / 2.2])
    # generating: [0, 1] and [1.5, 2] in step 0 (the update [2, 2.5] is cut out); [2.5, 3.2]
    assert per["rollout_idle_ratio"].tolist() == pytest.approx([1 - 1.5 / 2.5, 1 - 0.7 / 2.2])
    assert per["samples_per_s"].tolist() == pytest.approx([2 / 2.5, 2 / 2.2])
    assert per["tokens_per_s"].tolist() == pytest.approx([30 / 2.5, 50 / 2.2])
    assert per["staleness_avg"].tolist() == pytest.approx([0.0, 0.5])
    assert per["staleness_max"].tolist() == [0, 1]
    assert per["stale_samples"].tolist() == [0, 1]
    assert per["partial_ratio"].tolist() == pytest.approx([0.0, 0.5])
    assert per["max_partial_span"].tolist() == [0, 1]
    assert per["held_by"].tolist() == [0, 3]  # the last result into each batch
    assert per["held_by_tokens"].tolist() == [20, 10]
    summary = analysis.rl_summary(steps, samples, tasks=tasks, spans=spans)
    assert summary["steps"] == 2 and summary["wall_s"] == pytest.approx(4.7)
    assert summary["steps_per_s"] == pytest.approx(2 / 4.7)
    assert summary["trainer_idle_ratio"] == pytest.approx(1.7 / 4.7)
    assert summary["rollout_idle_ratio"] == pytest.approx(1 - 2.2 / 4.7)
    assert summary["partial_ratio"] == pytest.approx(0.25)
    assert summary["stale_samples"] == 1 and summary["staleness_max"] == 1
    # without spans, tasks' run time is the generation time (the same here)
    no_spans = analysis.rl_steps(steps, samples, tasks=tasks)
    np.testing.assert_allclose(no_spans["rollout_idle_ratio"], per["rollout_idle_ratio"])


def test_rl_views_of_empty_frames_and_missing_columns() -> None:
    tr = Tracer()
    steps, samples = tr.steps_df()
    per = analysis.rl_steps(steps, samples)
    assert per.empty and list(per.columns) == list(analysis.RL_STEP_COLUMNS)
    assert analysis.rl_summary(steps, samples)["steps"] == 0
    with pytest.raises(TraceSchemaError, match="train_end_ts"):
        analysis.rl_steps(steps.drop(columns="train_end_ts"), samples)


def test_the_timeline_layout_cuts_a_partial_rollout_at_the_update() -> None:
    steps, _, spans, _, events = frames()
    lay = plotting.rl_timeline_layout(steps, spans, events=events)
    assert lay.rows.tolist() == [0, 1, 2, 3] and lay.versions == [0, 1]
    task2 = lay.pieces[lay.pieces["y"] == 2].sort_values("start")
    np.testing.assert_allclose(task2[["start", "end", "version"]].to_numpy(dtype=float),
                               [[1.5, 2.0, 0], [2.0, 2.5, -1], [2.5, 3.0, 1]], atol=1e-9)
    assert lay.pieces.loc[lay.pieces["y"] == 3, "version"].tolist() == [1]
    assert lay.windows[0].tolist() == pytest.approx([2.0, 4.2])
    assert lay.trainer["wait"][1].tolist() == pytest.approx([1.0, 3.2])
    plain = plotting.rl_timeline_layout(steps, spans)  # no events: spans are not cut
    assert plain.pieces.loc[plain.pieces["y"] == 2, "version"].tolist() == [1]


def test_the_plots_draw_versions_pauses_the_trainer_and_speedups() -> None:
    steps, samples, spans, tasks, events = frames()
    fig = plotting.rl_figure(steps, spans, samples, events=events, tasks=tasks)
    gids = {c.get_gid() for ax in fig.axes for c in ax.collections}
    assert {"rl_timeline:v0", "rl_timeline:v1", "rl_timeline:paused",
            "rl_timeline:trainer:wait", "rl_timeline:trainer:train",
            "rl_timeline:trainer:sync"} <= gids
    runs = pd.DataFrame({"max_staleness": [0, 0, 1, 2], "steps_per_s": [1.0, 1.0, 1.5, 2.0]})
    ax = plotting.plot_staleness_sweep(runs)
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["1.00×", "1.50×", "2.00×"]
    plt.close("all")
    empty_steps, _ = Tracer().steps_df()
    ax = plotting.plot_rl_timeline(empty_steps, spans.iloc[:0])
    assert "no RL steps" in " ".join(t.get_text() for t in ax.texts)


def test_the_rollout_idle_ratio_from_the_servers_running_series() -> None:
    steps, samples, spans, tasks, _ = frames()
    metrics = pd.DataFrame({  # running 1 on [0, 2) and [3, 4.7) on one server
        S.TS: [0.0, 1.0, 2.0, 3.0, 4.7], S.SERVER: ["a"] * 5,
        S.METRIC: ["vllm:num_requests_running"] * 5, S.LABELS: [""] * 5,
        S.VALUE: [1.0, 1.0, 0.0, 1.0, 0.0]})
    per = analysis.rl_steps(steps, samples, tasks=tasks, spans=spans, server_metrics=metrics)
    assert per["rollout_idle_ratio"].tolist() == pytest.approx([1 - 2.0 / 2.5, 1 - 1.7 / 2.2])
    no_running = metrics.assign(**{S.METRIC: "vllm:num_requests_waiting"})
    from_spans = analysis.rl_steps(steps, samples, spans=spans, server_metrics=no_running)
    assert from_spans["rollout_idle_ratio"].tolist() == pytest.approx(
        [1 - 1.5 / 2.5, 1 - 0.7 / 2.2])
