"""The RL loop's settings and its simulated trainer and weight update (duration models)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from .._controller import RolloutController
    from .._io import RolloutResult


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_seconds(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) \
        and x >= 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RLConfig:
    """How an RL loop runs (:func:`~rollout_kit.rl.run_rl_async`).

    Attributes:
        steps: training steps to run.
        batch_size: accepted results each step trains on (AReaL's ``consumer_batch_size``).
        max_staleness: how many weight versions a rollout may run ahead of the trainer
            (AReaL's ``max_head_offpolicyness``, ``η``): rollouts are admitted while
            ``(max_staleness + version + 1) · batch_size − (accepted + running)`` and
            ``max_concurrent_rollouts − running`` are both positive (AReaL's formula,
            ``version`` counting the steps done). ``0`` is synchronous RL: a step's batch is
            generated with the weights it trains, no generation overlaps training.
        max_concurrent_rollouts: rollouts in flight at most.
        pause_generation: pause generation on the servers around each weight update
            (``pause_generation`` → update → ``set_version`` → ``continue_generation``), so
            in-flight generations continue under the new weights as partial rollouts;
            ``False`` only sets the version.
        raise_on_failure: a failed rollout stops the loop with ``WorkflowError`` (the steps
            so far kept); ``False`` drops it like a rejected one.
    """

    steps: int
    batch_size: int
    max_staleness: int = 0
    max_concurrent_rollouts: int = 256
    pause_generation: bool = True
    raise_on_failure: bool = True

    def __post_init__(self) -> None:
        _check(_is_count(self.steps) and self.steps >= 1,
               f"steps must be an int >= 1, got {self.steps!r}")
        _check(_is_count(self.batch_size) and self.batch_size >= 1,
               f"batch_size must be an int >= 1, got {self.batch_size!r}")
        _check(_is_count(self.max_staleness) and self.max_staleness >= 0,
               f"max_staleness must be an int >= 0 (0: synchronous RL), got "
               f"{self.max_staleness!r}")
        _check(_is_count(self.max_concurrent_rollouts) and self.max_concurrent_rollouts >= 1,
               f"max_concurrent_rollouts must be an int >= 1, got "
               f"{self.max_concurrent_rollouts!r}")
        _check(isinstance(self.pause_generation, bool), "pause_generation must be a bool")
        _check(isinstance(self.raise_on_failure, bool), "raise_on_failure must be a bool")


def output_tokens(result: RolloutResult) -> int:
    """Output tokens of a result: the non-negative entries of its trajectory's
    ``versions`` (what :func:`token_versions` reads)."""
    return len(token_versions(result.trajectory))


def token_versions(trajectory: Any) -> list[int]:
    """The weight version of every output token of a trajectory: its ``versions`` entry (a
    key or an attribute; a list per sample, or one list; numpy / torch arrays too), the
    prompt's ``-1`` left out. Empty when the trajectory has none."""
    v = trajectory.get("versions") if isinstance(trajectory, dict) else \
        getattr(trajectory, "versions", None)
    if v is None:
        return []
    if hasattr(v, "tolist"):
        v = v.tolist()
    out: list[int] = []
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, list | tuple):
            stack.extend(reversed(x))
        elif hasattr(x, "tolist"):
            stack.append(x.tolist())
        elif isinstance(x, int | float) and x >= 0:
            out.append(int(x))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedTrain:
    """A trainer step that only takes time: ``fixed_s + per_sample_s · samples +
    per_token_s · output tokens`` seconds (a duration model to study the loop without a
    GPU)."""

    fixed_s: float = 0.0
    per_sample_s: float = 0.0
    per_token_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_sample_s", "per_token_s"):
            v = getattr(self, name)
            _check(_is_seconds(v), f"SimulatedTrain.{name} must be a number >= 0, got {v!r}")

    def duration(self, batch: Sequence[RolloutResult]) -> float:
        """Seconds the step takes for ``batch``."""
        tokens = sum(output_tokens(r) for r in batch)
        return self.fixed_s + self.per_sample_s * len(batch) + self.per_token_s * tokens

    async def __call__(self, batch: Sequence[RolloutResult], step: int) -> None:
        del step
        await asyncio.sleep(self.duration(batch))


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedUpdate:
    """A weight update that only takes ``seconds`` (generation is paused meanwhile)."""

    seconds: float = 0.0

    def __post_init__(self) -> None:
        _check(_is_seconds(self.seconds),
               f"SimulatedUpdate.seconds must be a number >= 0, got {self.seconds!r}")

    async def __call__(self, controller: RolloutController, version: int) -> None:
        del controller, version
        await asyncio.sleep(self.seconds)


class WeightsFromDisk:
    """The weight update as ``update_weights_from_disk`` on every server of every engine
    (SGLang's endpoint, with ``weight_version``).

    Args:
        path: the checkpoint directory, or ``path(version) -> str`` for one per version.

    A server that refuses or fails fails the step: the loop stops with that
    :class:`~rollout_kit.EngineError` (generation continued, the version not advanced),
    rather than leaving a server generating with other weights than the rest.
    """

    __slots__ = ("path",)

    def __init__(self, path: str | Callable[[int], str]) -> None:
        _check((isinstance(path, str) and bool(path)) or callable(path),
               f"path must be a non-empty str or a callable version -> str, got {path!r}")
        self.path = path

    def path_for(self, version: int) -> str:
        return self.path(version) if callable(self.path) else self.path

    async def __call__(self, controller: RolloutController, version: int) -> None:
        path = self.path_for(version)
        fns = [getattr(e, "update_weights_from_disk_async", None) for e in controller.engines]
        for e, fn in zip(controller.engines, fns, strict=True):
            if fn is None:
                raise ConfigError(f"engine {e!r} has no update_weights_from_disk_async; "
                                  "give the loop an update coroutine of your own")
        await asyncio.gather(*(fn(path, version) for fn in fns if fn is not None))

    def __repr__(self) -> str:
        return f"WeightsFromDisk({self.path!r})"
