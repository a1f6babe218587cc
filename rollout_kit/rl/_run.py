"""The RL loop: admission under AReaL's staleness formula, steps, weight updates, cleanup.

One coroutine runs the steps; a second (the *feeder*) submits rollouts whenever the
formula allows, so generation goes on while the trainer trains. Results arrive through the
controller's reserved submissions (``submit_reserved``): a result goes to the loop, never to
a concurrent ``wait()``.

Every task ends accounted: consumed by a step (accepted), consumed as rejected (the group
filter), raised as failed, or — when the loop stops early (an error, a cancel) —
cancelled, its result consumed; accepted results no step took are released to ``wait()``.
Servers are never left paused: ``continue_generation`` runs whatever ends an update.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Literal

from .._config import ExecutorConfig
from .._controller.batching import validate_item, workflow_error
from .._errors import ConfigError
from .._executor.staleness import capacity
from ..tracing import schema as S
from ._config import RLConfig, token_versions

if TYPE_CHECKING:
    import pandas as pd

    from .._controller import RolloutController
    from .._executor import AcceptFnSpec, WorkflowSpec
    from .._io import RolloutResult

#: ``train(batch, step)``: the trainer step (its return value is kept in ``RLRun.outputs``)
TrainFn = Callable[[list["RolloutResult"], int], Awaitable[Any]]
#: ``update(controller, version)``: push the weights of ``version`` to the servers
UpdateFn = Callable[["RolloutController", int], Awaitable[Any]]
StepStatus = Literal["ok", "train_failed", "update_failed", "cancelled"]


@dataclass
class RLRun:
    """What :func:`run_rl_async` did.

    Attributes:
        steps: this run's rows of the steps frame (``Traces.steps``), indexed by ``step``
            (the weight version the step trained on).
        step_samples: this run's rows of the step samples frame, indexed by ``task_id``.
        outputs: what each ``train`` call returned, by step.
        leftover: ids of accepted results no step took (released to ``wait()``).
    """

    steps: pd.DataFrame
    step_samples: pd.DataFrame
    outputs: list[Any] = field(default_factory=list)
    leftover: list[int] = field(default_factory=list)


class _Loop:
    """The state of one run (see the module docstring)."""

    def __init__(self, ctl: RolloutController, data: Iterable[Any], workflow: WorkflowSpec,
                 config: RLConfig, train: TrainFn, update: UpdateFn | None,
                 should_accept_fn: AcceptFnSpec | None, progress: bool) -> None:
        self.ctl = ctl
        self.cfg = config
        self.train = train
        self.update = update
        self.recipe = ctl.prepare(workflow, None, should_accept_fn)
        self.it = iter(data)
        self.progress = progress
        self.admission = ExecutorConfig(max_concurrent_rollouts=config.max_concurrent_rollouts,
                                        max_staleness=config.max_staleness,
                                        consumer_batch_size=config.batch_size)
        self.v0 = ctl.get_version()
        self.live: set[int] = set()  # submitted, not finished
        self.early: set[int] = set()  # finished before submit_reserved returned
        self.accepted: deque[int] = deque()  # finished accepted, not consumed
        self.failed: deque[int] = deque()
        self.n_accepted = 0  # accepted since the start (AReaL's counter)
        self.n_items = 0
        self.exhausted = False
        self.hold = False  # no admission during a weight update
        self.feed_error: BaseException | None = None
        self.outputs: list[Any] = []

    # -- admission ---------------------------------------------------------------------------
    def room(self) -> int:
        """Rollouts that may start now: AReaL's capacity, and no more than the steps left
        still need."""
        running = len(self.live)
        cap = capacity(self.admission, running=running, accepted=self.n_accepted,
                       version=self.ctl.get_version() - self.v0)
        need = self.cfg.steps * self.cfg.batch_size - self.n_accepted - running
        return min(cap, need)

    def on_done(self, tid: int) -> None:
        if tid in self.live:
            self.live.remove(tid)
        else:
            self.early.add(tid)
        res = self.ctl.peek(tid)
        assert res is not None
        if res.status == "accepted":
            self.accepted.append(tid)
            self.n_accepted += 1
        elif res.status == "failed" and self.cfg.raise_on_failure:
            self.failed.append(tid)
        else:  # rejected by the group filter, cancelled, or a failure to drop: consumed
            self.ctl.take(tid)

    async def feed(self) -> None:
        ctl = self.ctl
        try:
            while True:
                await ctl.waiters.until(lambda: not self.hold and self.room() > 0,
                                        timeout=None, what="RL admission",
                                        stall_reason=ctl.stall_reason, check_stall=False)
                try:
                    item = next(self.it)
                except StopIteration:
                    self.exhausted = True
                    return
                validate_item(self.recipe, item, f"item {self.n_items} of the RL data")
                self.n_items += 1
                tid = await ctl.submit_reserved(item, self.recipe, self.on_done)
                if tid in self.early:
                    self.early.remove(tid)
                else:
                    self.live.add(tid)
        except Exception as exc:  # a bad data item, a closed controller: the step raises it
            self.feed_error = exc
        finally:
            ctl.waiters.wake()

    # -- steps -------------------------------------------------------------------------------
    def batch_or_raise(self, step: int) -> bool:
        """Whether a batch is ready; raises what stops the loop while it waits."""
        if self.failed:
            raise workflow_error(self.ctl.take(self.failed.popleft()))
        if self.feed_error is not None:
            raise self.feed_error
        if len(self.accepted) >= self.cfg.batch_size:
            return True
        if self.exhausted and not self.live:
            raise ConfigError(
                f"RL loop: the data ran out after {self.n_items} item(s), at step {step} "
                f"with {len(self.accepted)}/{self.cfg.batch_size} accepted; the steps so far "
                "are kept (pass more data, e.g. itertools.cycle(data))")
        return False

    async def run(self) -> RLRun:
        ctl, cfg = self.ctl, self.cfg
        feeder = asyncio.get_running_loop().create_task(self.feed(), name="rl-feeder")
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg.steps, desc="RL steps", unit="step")
        try:
            for i in range(cfg.steps):
                await self.step(self.v0 + i)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            leftover = await self.cleanup()
        steps, samples = ctl.tracer.steps_df()
        first, last = self.v0, self.v0 + cfg.steps - 1
        return RLRun(steps=steps.loc[first:last],
                     step_samples=samples[samples[S.STEP].between(first, last)],
                     outputs=self.outputs, leftover=leftover)

    async def step(self, step: int) -> None:
        ctl, cfg = self.ctl, self.cfg
        row: dict[str, Any] = {S.STEP: step, S.VERSION: ctl.get_version(),
                               S.START_TS: perf_counter_ns(), S.BATCH_READY_TS: None,
                               S.TRAIN_START_TS: None, S.TRAIN_END_TS: None,
                               S.UPDATE_START_TS: None, S.UPDATE_END_TS: None,
                               S.SAMPLES: 0, S.TOKENS: 0, S.STEP_STATUS: "ok",
                               S.ERROR: None}
        samples: list[dict[str, Any]] = []
        status: StepStatus = "train_failed"
        try:
            # the feeder runs first: what the last update allowed starts before this step
            # trains, even when the batch is ready at once
            await asyncio.sleep(0)
            await ctl.waiters.until(lambda: self.batch_or_raise(step), timeout=None,
                                    what=f"RL step {step}", stall_reason=ctl.stall_reason)
            ids = [self.accepted.popleft() for _ in range(cfg.batch_size)]
            batch = ctl.results.take_all(ids)
            row[S.BATCH_READY_TS] = perf_counter_ns()
            samples = [self.sample_row(r, step, row[S.VERSION]) for r in batch]
            row[S.SAMPLES] = len(batch)
            row[S.TOKENS] = sum(s[S.TOKENS] for s in samples)
            row[S.TRAIN_START_TS] = perf_counter_ns()
            self.outputs.append(await self.train(batch, step))
            row[S.TRAIN_END_TS] = perf_counter_ns()
            status = "update_failed"
            row[S.UPDATE_START_TS] = perf_counter_ns()
            await self.update_weights(row[S.VERSION] + 1)
            row[S.UPDATE_END_TS] = perf_counter_ns()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                status = "cancelled"
            row[S.STEP_STATUS] = status
            row[S.ERROR] = f"{type(exc).__name__}: {exc}"[:2000]
            if row[S.BATCH_READY_TS] is not None or status == "cancelled":
                ctl.tracer.record_step(row, samples)
            raise
        ctl.tracer.record_step(row, samples)

    @staticmethod
    def sample_row(result: RolloutResult, step: int, version: int) -> dict[str, Any]:
        versions = token_versions(result.trajectory)
        lo, hi = (min(versions), max(versions)) if versions else (-1, -1)
        return {S.TASK_ID: result.task_id, S.STEP: step, S.VERSION_MIN: lo,
                S.VERSION_MAX: hi, S.STALENESS: version - lo if versions else -1,
                S.PARTIAL: lo != hi, S.TOKENS: len(versions)}

    async def update_weights(self, version: int) -> None:
        """pause_generation → update → set_version → continue_generation (always, once
        paused: the servers are never left paused)."""
        ctl = self.ctl
        self.hold = True
        paused = False
        try:
            if self.cfg.pause_generation:
                paused = True  # a pause cut short may have reached some servers
                await ctl.pause_generation_async()
            if self.update is not None:
                await self.update(ctl, version)
            ctl.set_version(version)
        except BaseException as exc:
            if paused:  # resume every server that answers; the update's error wins
                for problem in await self.resume_all():
                    exc.add_note(f"continue_generation also failed: {problem}")
            raise
        else:
            if paused:
                problems = await self.resume_all()
                if problems:
                    raise problems[0]
        finally:
            self.hold = False
            ctl.waiters.wake()

    async def resume_all(self) -> list[BaseException]:
        """``continue_generation`` on every engine, each tried (one failing does not keep
        the others paused); the errors."""
        answers = await asyncio.gather(
            *(e.continue_generation_async() for e in self.ctl.engines),
            return_exceptions=True)
        return [a for a in answers if isinstance(a, BaseException)]

    async def cleanup(self) -> list[int]:
        """Cancel what still runs and wait until each is accounted; release accepted
        results no step took. Returns their ids."""
        ctl = self.ctl
        for tid in list(self.live):
            ctl.cancel(tid)
        if self.live:
            await ctl.waiters.until(lambda: not self.live, timeout=None,
                                    what="RL loop cleanup", stall_reason=ctl.stall_reason,
                                    check_stall=False)
        leftover = [*self.accepted, *self.failed]
        for tid in leftover:
            ctl.release(tid)
        return leftover


async def run_rl_async(
    controller: RolloutController,
    data: Iterable[Any],
    workflow: WorkflowSpec,
    config: RLConfig,
    *,
    train: TrainFn,
    update: UpdateFn | None = None,
    should_accept_fn: AcceptFnSpec | None = None,
    progress: bool = False,
) -> RLRun:
    """Run ``config.steps`` steps of RL over ``controller``: rollouts of ``workflow`` on
    items of ``data`` admitted under AReaL's staleness formula, each step training on
    ``config.batch_size`` accepted results, then updating the weights.

    A step: wait for the batch (the first ``batch_size`` accepted results, in completion
    order) → ``await train(batch, step)`` → ``pause_generation`` → ``await update(controller,
    step + 1)`` → ``set_version(step + 1)`` → ``continue_generation``. Meanwhile new rollouts
    start whenever the formula allows (none during the update), so with ``max_staleness >
    0`` generation overlaps training and a generation cut by an update finishes under the
    new weights (a partial rollout: two versions). Step ``n`` trains on weight version
    ``n`` (steps count on from the controller's version).

    Each step is recorded in the controller's tracer (``Traces.steps``,
    ``Traces.step_samples``) as it ends, also when it fails.

    Args:
        controller: where rollouts run; its tracer records the steps.
        data: items for the workflow (an iterable; ``itertools.cycle`` for epochs).
        workflow: the rollout workflow (as for ``submit``).
        config: steps, batch size, staleness bound, concurrency.
        train: ``async train(batch, step)``, or :class:`SimulatedTrain`.
        update: ``async update(controller, version)`` (e.g. :class:`WeightsFromDisk`,
            :class:`SimulatedUpdate`); ``None`` only sets the version.
        should_accept_fn: the group filter: results it refuses are rejected and do not count
            toward a batch.
        progress: show a tqdm bar of steps.

    Raises:
        ConfigError: a bad ``config`` or data item, or the data ran out.
        WorkflowError: a rollout failed (``config.raise_on_failure``).
        Exception: what ``train`` or ``update`` raised (an update failing on one server
            fails the step: the servers continue generating under the old version).

    On any error or a cancel the loop stops: the steps so far stay in the traces, running
    rollouts are cancelled and accounted, unconsumed accepted results go to ``wait()``.
    """
    if not isinstance(config, RLConfig):
        raise ConfigError(f"config must be an RLConfig, got {type(config).__name__}")
    if not callable(train):
        raise ConfigError(f"train must be an async callable train(batch, step), got {train!r}")
    if update is not None and not callable(update):
        raise ConfigError(f"update must be None or an async callable, got {update!r}")
    controller.check_open("run_rl()")
    controller.binding.bind()
    return await _Loop(controller, data, workflow, config, train, update, should_accept_fn,
                       progress).run()


def run_rl(controller: RolloutController, data: Iterable[Any], workflow: WorkflowSpec,
           config: RLConfig, *, train: TrainFn, update: UpdateFn | None = None,
           should_accept_fn: AcceptFnSpec | None = None, progress: bool = False) -> RLRun:
    """Blocking twin of :func:`run_rl_async` (a script, or a notebook cell)."""
    return controller.binding.blocking(run_rl_async(
        controller, data, workflow, config, train=train, update=update,
        should_accept_fn=should_accept_fn, progress=progress), "run_rl()")
