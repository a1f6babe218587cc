"""``SubmitPanel``: type or pick prompts, set sampling values, press Submit, watch them run.

Callbacks are plain functions: ``controller.submit`` is non-blocking and schedules work on
the running loop, so nothing is ever awaited inside a click handler (ipywidgets would drop
a coroutine). Errors are shown inside the panel, never only in the kernel log.

Usage::

    panel = SubmitPanel(ctl, SingleTurnWorkflow(reward_fn=exact_match))
    panel                      # display it in a cell
    panel.load(df["question"]) # or type prompts, one per line
    panel.submit.click()       # what the Submit button does
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from .._config import GenerationConfig
from .._errors import ConfigError, RolloutKitError, truncate
from .._io import RolloutResult
from ..tracing import schema as S
from ._progress import ProgressSnapshot, ProgressView, Refresher
from ._widgets import widgets

ANY_WORKER = "any"


def _reward_of(result: RolloutResult | None) -> float:
    """Mean reward of a result's trajectory (``nan`` when it has none)."""
    traj = None if result is None else result.trajectory
    rewards: Any = traj.get("rewards") if isinstance(traj, dict) else traj
    if callable(getattr(rewards, "tolist", None)):  # a tensor or array (AReaL's trajectories)
        rewards = rewards.tolist()
    if isinstance(rewards, int | float) and not isinstance(rewards, bool):
        return float(rewards)
    if isinstance(rewards, Sequence) and rewards and all(
            isinstance(r, int | float) for r in rewards):
        return float(sum(rewards) / len(rewards))
    return math.nan


class SubmitPanel:
    """An ipywidgets form that submits rollouts to a controller and shows their progress.

    Args:
        controller: a ``RolloutController`` (anything with ``submit``/``wait_for_async``/
            ``traces``/``spans``/``pause``/``resume``/``cancel``).
        workflow: the workflow each prompt runs with. When it has a ``gconfig`` attribute,
            the sampling values of the form replace it (on a copy) for each submission.
        prompts: prompts to pre-fill (a list or a DataFrame column).
        prompt_key: the key of the prompt in each submitted data dict.
        refresh_interval: seconds between live refreshes.
        show_timeline: draw the live latency timeline.
    """

    def __init__(self, controller: Any, workflow: Any, *,
                 prompts: Iterable[str] | None = None, prompt_key: str = "prompt",
                 gconfig: GenerationConfig | None = None, refresh_interval: float = 1.0,
                 show_timeline: bool = True) -> None:
        self.controller = controller
        self.workflow = workflow
        self.prompt_key = prompt_key
        self.task_ids: list[int] = []
        self.results: dict[int, RolloutResult] = {}
        self.errors: list[str] = []
        self.current_error: str | None = None
        self._watchers: set[asyncio.Task[Any]] = set()
        self._awaiting: set[int] = set()  # ids whose result the panel has not collected yet
        g = gconfig or getattr(workflow, "gconfig", None) or GenerationConfig()
        self.prompt = widgets.Textarea(placeholder="one prompt per line", description="prompts",
                                       layout=widgets.Layout(width="100%", height="6em"))
        self.n_samples = widgets.BoundedIntText(value=g.n_samples, min=1, max=1024,
                                                description="n_samples")
        self.temperature = widgets.FloatText(value=g.temperature, description="temperature")
        self.top_p = widgets.FloatText(value=g.top_p, description="top_p")
        self.max_new_tokens = widgets.BoundedIntText(value=g.max_new_tokens, min=1,
                                                     max=1_000_000, description="max tokens")
        self.server = widgets.Dropdown(options=[ANY_WORKER, *self._worker_names()],
                                       value=ANY_WORKER, description="server")
        self.submit = widgets.Button(description="Submit", button_style="primary")
        self.pause = widgets.Button(description="Pause")
        self.resume = widgets.Button(description="Resume")
        self.cancel = widgets.Button(description="Cancel", button_style="warning")
        self.ids = widgets.HTML(value="task ids: –")
        self.error = widgets.HTML(value="")
        self.view = ProgressView(title="tasks", show_timeline=show_timeline)
        self.submit.on_click(self._on_submit)
        self.pause.on_click(lambda _b: self._guard(self.controller.pause))
        self.resume.on_click(lambda _b: self._guard(self.controller.resume))
        self.cancel.on_click(lambda _b: self._guard(self._cancel_pending))
        self.refresher = Refresher(self.refresh, refresh_interval, self._show_error)
        self.box = widgets.VBox([
            self.prompt,
            widgets.HBox([self.n_samples, self.temperature]),
            widgets.HBox([self.top_p, self.max_new_tokens]),
            self.server,
            widgets.HBox([self.submit, self.pause, self.resume, self.cancel]),
            self.ids, self.error, self.view.box,
        ])
        if prompts is not None:
            self.load(prompts)

    # -- form -----------------------------------------------------------------------------
    def load(self, prompts: Iterable[str]) -> None:
        """Fill the prompt box, one prompt per line (a list or a DataFrame column)."""
        lines = [str(p).replace("\n", " ") for p in prompts]
        self.prompt.value = "\n".join(lines)

    def prompts(self) -> list[str]:
        """The non-empty lines of the prompt box; ``ConfigError`` when there are none."""
        lines = [ln.strip() for ln in self.prompt.value.splitlines()]
        lines = [ln for ln in lines if ln]
        if not lines:
            raise ConfigError("enter at least one prompt (one per line)")
        return lines

    def gconfig(self) -> GenerationConfig:
        """The sampling values of the form, validated (``ConfigError`` when invalid)."""
        base = getattr(self.workflow, "gconfig", None) or GenerationConfig()
        return base.new(n_samples=int(self.n_samples.value),
                        temperature=float(self.temperature.value),
                        top_p=float(self.top_p.value),
                        max_new_tokens=int(self.max_new_tokens.value))

    # -- actions ----------------------------------------------------------------------------
    def _on_submit(self, _button: Any = None) -> None:
        self._guard(self._submit_form)

    def _submit_form(self) -> None:
        prompts = self.prompts()
        workflow = self._workflow_for(self.gconfig())
        extra: dict[str, Any] = {}
        if self.server.value != ANY_WORKER:
            extra["worker"] = self.server.value
        ids = [self.controller.submit({self.prompt_key: p}, workflow, **extra) for p in prompts]
        self.task_ids.extend(ids)
        shown = ", ".join(map(str, self.task_ids[-20:]))
        more = f" (+{len(self.task_ids) - 20} earlier)" if len(self.task_ids) > 20 else ""
        self.ids.value = f"task ids: {shown}{more}"
        for tid in ids:
            self._watch(tid)
        self.refresher.start()
        self.refresh(draw=False)  # counts now; the refresher draws the timeline off the click

    def _workflow_for(self, gconfig: GenerationConfig) -> Any:
        if not hasattr(self.workflow, "gconfig"):
            return self.workflow
        with_gconfig = getattr(self.workflow, "with_gconfig", None)
        if callable(with_gconfig):
            return with_gconfig(gconfig)
        if dataclasses.is_dataclass(self.workflow) and not isinstance(self.workflow, type):
            return dataclasses.replace(self.workflow, gconfig=gconfig)
        clone = copy.copy(self.workflow)
        clone.gconfig = gconfig
        return clone

    def _watch(self, task_id: int) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self.controller.wait_for_async(task_id))
        self._watchers.add(task)
        self._awaiting.add(task_id)
        task.add_done_callback(functools.partial(self._collect, task_id))

    def _collect(self, task_id: int, task: asyncio.Task[Any]) -> None:
        self._watchers.discard(task)
        self._awaiting.discard(task_id)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._show_error(exc)
            else:
                self.results[task_id] = task.result()
        if not self._watchers:  # the last result: show the final state at once
            self._guard(self.refresh)

    def _cancel_pending(self) -> None:
        tasks = self.controller.traces()
        mine = tasks.reindex(self.task_ids)
        status = mine[S.STATUS].astype("object")
        for tid in mine.index[status.isna() | (status == "pending")]:
            self.controller.cancel(int(tid))

    def _guard(self, action: Any) -> None:
        try:
            self.error.value = ""
            self.current_error = None
            action()
        except Exception as exc:
            self._show_error(exc)

    def _show_error(self, exc: BaseException) -> None:
        kind = "" if isinstance(exc, RolloutKitError) else f"{type(exc).__name__}: "
        message = truncate(f"{kind}{exc}", 500)
        self.errors.append(message)
        self.current_error = message
        self.error.value = f"<span style='color:#b91c1c'>⚠ {_escape(message)}</span>"

    # -- live view --------------------------------------------------------------------------
    def refresh(self, *, draw: bool = True) -> ProgressSnapshot:
        """Update counts, the results table and (when ``draw``) the timeline now."""
        mine = self._mine(self.controller.traces())
        snapshot = ProgressSnapshot.from_frames(mine)
        spans = self.controller.spans()
        mine_spans = spans[spans[S.TASK_ID].isin(self.task_ids)] if len(spans) else spans
        self.view.update(snapshot, self.table(mine), mine_spans, mine.dropna(how="all"),
                         draw=draw)
        if snapshot.failed:
            reasons = mine[S.REASON].dropna()
            if len(reasons) and not self.error.value:
                self.error.value = (f"<span style='color:#b91c1c'>{snapshot.failed} failed; "
                                    f"latest: {_escape(truncate(reasons.iloc[-1], 300))}</span>")
        if snapshot.submitted and snapshot.done == snapshot.submitted and not self._watchers:
            self.refresher.stop()
        return snapshot

    def _mine(self, tasks: pd.DataFrame) -> pd.DataFrame:
        """The panel's rows; a finished task whose result is not collected yet stays
        ``pending``, so counts, rewards and statuses always change together."""
        mine = tasks.reindex(self.task_ids)
        late = [t for t in self._awaiting if t in mine.index]
        if late:
            mine = mine.copy()
            mine[S.STATUS] = mine[S.STATUS].astype("object")
            mine.loc[late, S.STATUS] = "pending"
        return mine

    def table(self, tasks: pd.DataFrame | None = None) -> pd.DataFrame:
        """The latest results: task_id, status, reward, latency_s, server."""
        mine = self._mine(self.controller.traces()) if tasks is None else tasks
        sessions = self.controller.sessions()
        server = (sessions[S.SERVER].groupby(level=S.TASK_ID).first()
                  if len(sessions) and S.SERVER in sessions else pd.Series(dtype=object))
        out = pd.DataFrame({
            S.STATUS: mine[S.STATUS].astype("object"),
            "reward": [_reward_of(self.results.get(int(t))) for t in mine.index],
            "latency_s": mine[S.TOTAL_S],
            S.SERVER: server.reindex(mine.index),
        }, index=pd.Index(mine.index, name=S.TASK_ID))
        return out

    def state(self) -> dict[str, Any]:
        """A plain summary for assertions and ``NBVAL_CHECK_OUTPUT`` cells."""
        snap = self.view.snapshot
        return {"task_ids": list(self.task_ids), "submitted": snap.submitted,
                "done": snap.done, "accepted": snap.accepted, "rejected": snap.rejected,
                "failed": snap.failed, "cancelled": snap.cancelled,
                "error": self.current_error}

    async def wait_async(self, timeout: float | None = None) -> ProgressSnapshot:
        """Wait until every task submitted from the panel has a result, then refresh."""
        if self._watchers:
            await asyncio.wait_for(asyncio.gather(*list(self._watchers),
                                                  return_exceptions=True), timeout)
        return self.refresh()

    def close(self) -> None:
        """Stop refreshing and close the widgets (tasks keep running in the controller)."""
        self.refresher.stop()
        self.box.close()

    def _worker_names(self) -> list[str]:
        names = getattr(self.controller, "worker_names", None)
        if callable(names):
            names = names()
        return [str(n) for n in names] if names else []

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.box._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        s = self.state()
        return (f"SubmitPanel(submitted={s['submitted']}, done={s['done']}, "
                f"accepted={s['accepted']}, failed={s['failed']})")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
