"""``SingleTurnWorkflow``: one prompt, ``n_samples`` completions, one reward each (RLVR).

A data item is a prompt ``str``, or a mapping with a ``"prompt"`` str (``prompt_key``) or
``"input_ids"`` (token ids); the mapping's other keys go to the reward function as keyword
arguments (e.g. ``{"prompt": "What is 2+2?", "answer": "4"}``). ``validate(data)`` checks
this shape at submit time.

The trajectory is a dict of plain lists (one entry per sample; torch is never needed)::

    {"input_ids":  [prompt + completion tokens, ...],
     "loss_mask":  [[0]*P + [1]*C, ...],
     "logprobs":   [[0.0]*P + completion logprobs, ...],
     "versions":   [[-1]*P + completion versions, ...],
     "rewards":    [float, ...],
     "completions": [text, ...], "stop_reasons": [...], "prompt": text, "prompt_len": P}

Each sample is a traced session with a ``generate`` and a ``reward`` phase; sample ``i`` of a
task uses rid ``<task rid>:<i>``, so sticky routing (keyed on the part before the last ``:``)
keeps all samples of a task on one server (prefix cache) while each request id stays unique.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._config import GenerationConfig
from .._errors import ConfigError
from .._io import ModelRequest, ModelResponse, new_rid
from ..tracing import trace_phase, trace_session
from .base import RolloutWorkflow
from .reward import RewardFn, RewardMode, RewardRunner

if TYPE_CHECKING:
    from ..engines import InferenceEngine

T = TypeVar("T")


class Tokenizer(Protocol):
    """What a workflow needs from a tokenizer (HF tokenizers and ``ByteTokenizer`` fit)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(slots=True)
class Sample:
    """One generated sample of a task."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    completion: str
    reward: float
    stop_reason: str


def build_trajectory(prompt: str, samples: list[Sample]) -> dict[str, Any]:
    """Assemble samples into the plain-list trajectory dict (see module docstring)."""
    ids: list[list[int]] = []
    mask: list[list[int]] = []
    logprobs: list[list[float]] = []
    versions: list[list[int]] = []
    rewards: list[float] = []
    completions: list[str] = []
    stops: list[str] = []
    for s in samples:  # local lists, one dict at the end: no key lookup per append
        p = len(s.prompt_ids)
        ids.append(s.prompt_ids + s.completion_ids)
        mask.append([0] * p + [1] * len(s.completion_ids))
        logprobs.append([0.0] * p + s.logprobs)
        versions.append([-1] * p + s.versions)
        rewards.append(s.reward)
        completions.append(s.completion)
        stops.append(s.stop_reason)
    return {"input_ids": ids, "loss_mask": mask, "logprobs": logprobs, "versions": versions,
            "rewards": rewards, "completions": completions, "stop_reasons": stops,
            "prompt": prompt, "prompt_len": len(samples[0].prompt_ids) if samples else 0}


class SingleTurnWorkflow(RolloutWorkflow):
    """RLVR-style workflow: generate ``gconfig.n_samples`` completions and reward each.

    Args:
        reward_fn: ``reward_fn(prompt, completion, prompt_ids, completion_ids, **data)``,
            sync or async; data keys named like those four are not passed.
        gconfig: sampling settings; ``n_samples`` sessions run in parallel.
        tokenizer: encodes text prompts / decodes completions; without one a text prompt is
            sent as text (the server tokenizes) and the server's returned text is used.
        prompt_key: the data key holding the prompt text (``input_ids`` is used if present);
            a plain ``str`` data item is the prompt itself.
        reward_timeout: seconds allowed per reward call.
        reward_mode: where a sync ``reward_fn`` runs: ``"auto"`` (in threads until it has
            shown itself cheap, then on the loop), ``"thread"`` (always off the loop, for
            slow or blocking rewards) or ``"inline"`` (always on the loop, no thread hop).
    """

    def __init__(self, reward_fn: RewardFn, gconfig: GenerationConfig | None = None,
                 tokenizer: Tokenizer | None = None, prompt_key: str = "prompt",
                 reward_timeout: float = 60.0, reward_mode: RewardMode = "auto") -> None:
        if not callable(reward_fn):
            raise ConfigError(f"reward_fn must be callable, got {reward_fn!r}")
        self.reward_fn = reward_fn
        self.gconfig = gconfig or GenerationConfig()
        self.tokenizer = tokenizer
        self.prompt_key = prompt_key
        self.reward_timeout = reward_timeout
        self.reward = RewardRunner(reward_fn, reward_mode, reward_timeout)

    def _shape_hint(self) -> str:
        return (f"a prompt str, or a mapping with a non-empty str {self.prompt_key!r} or "
                f"'input_ids' (token ids), e.g. {{{self.prompt_key!r}: 'What is 2+2?'}} or "
                "{'input_ids': [40, 41, 42]}")

    def validate(self, data: Any) -> None:
        """Refuse, at submit time, data without a usable prompt (cheap: no tokenizing).

        Raises:
            ConfigError: ``data`` is not a non-empty ``str`` nor a mapping with a non-empty
                str ``prompt_key`` or non-empty ``input_ids``; the message shows the shape.
        """
        if type(data) is dict and "input_ids" not in data:  # the common case, fast
            text = data.get(self.prompt_key)
            if type(text) is str and text:
                return
        if isinstance(data, str):
            if not data:
                raise ConfigError(f"data is an empty str; expected {self._shape_hint()}")
            return
        if not isinstance(data, Mapping):
            raise ConfigError(f"data must be {self._shape_hint()}; got "
                              f"{type(data).__name__}")
        ids = data.get("input_ids")
        text = data.get(self.prompt_key)
        if ids is not None:
            if isinstance(ids, str | bytes | Mapping) or not hasattr(ids, "__iter__"):
                raise ConfigError(f"data['input_ids'] must be a sequence of token ids, got "
                                  f"{type(ids).__name__}")
            if hasattr(ids, "__len__") and len(ids) == 0 and not (
                    isinstance(text, str) and text):
                raise ConfigError(f"data['input_ids'] is empty; expected {self._shape_hint()}")
            return
        if not isinstance(text, str) or not text:
            got = "missing" if text is None else f"{type(text).__name__} {text!r}"[:80]
            raise ConfigError(f"data[{self.prompt_key!r}] is {got}; expected "
                              f"{self._shape_hint()}")

    def prompt_of(self, data: Any) -> tuple[str | None, list[int]]:
        """The prompt text (if any) and token ids (empty when the server tokenizes)."""
        if type(data) is dict and "input_ids" not in data:  # the common case, fast
            text = data.get(self.prompt_key)
            if type(text) is str and text:
                return text, (self.tokenizer.encode(text) if self.tokenizer is not None
                              else [])
        if isinstance(data, str):
            if not data:
                raise ConfigError(f"data is an empty str; expected {self._shape_hint()}")
            return data, (self.tokenizer.encode(data) if self.tokenizer is not None else [])
        if not isinstance(data, Mapping):
            raise ConfigError(f"data must be {self._shape_hint()}; got "
                              f"{type(data).__name__}")
        ids = data.get("input_ids")
        text = data.get(self.prompt_key)
        if ids is not None:
            ids = [int(t) for t in ids]
            if ids or not isinstance(text, str) or not text:  # empty ids: use the text
                if text is None and self.tokenizer is not None:
                    text = self.tokenizer.decode(ids)
                return text, ids
        if not isinstance(text, str) or not text:
            raise ConfigError(f"data needs a non-empty str {self.prompt_key!r} or 'input_ids'; "
                              f"expected {self._shape_hint()}")
        return text, (self.tokenizer.encode(text) if self.tokenizer is not None else [])

    async def generate(self, engine: InferenceEngine, rid: str, text: str | None,
                       ids: list[int]) -> ModelResponse:
        """One traced ``generate`` phase."""
        gconfig = self.gconfig.new(n_samples=1) if self.gconfig.n_samples != 1 else self.gconfig
        req = ModelRequest(rid=rid, input_ids=ids, text=None if ids else text, gconfig=gconfig)
        with trace_phase("generate"):
            return await engine.generate_async(req)

    def completion_text(self, resp: ModelResponse) -> str:
        """The completion's text (tokenizer decode when given, else the server's text)."""
        if self.tokenizer is not None:
            return self.tokenizer.decode(resp.output_tokens)
        return resp.text or ""

    async def sample(self, engine: InferenceEngine, rid: str, text: str | None,
                     ids: list[int], data: Any) -> Sample:
        """One session: generate, then reward."""
        with trace_session():
            resp = await self.generate(engine, rid, text, ids)
            completion = self.completion_text(resp)
            prompt_ids = resp.input_tokens or ids  # the response's own lists: not copied
            prompt_text = text if text is not None else ""
            with trace_phase("reward"):
                reward = await self.reward(prompt_text, completion, prompt_ids,
                                           resp.output_tokens, data)
        return Sample(prompt_ids, resp.output_tokens, resp.output_logprobs,
                      resp.output_versions, completion, reward, resp.stop_reason)

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> dict[str, Any] | None:
        """Generate ``n_samples`` completions in parallel and reward each."""
        text, ids = self.prompt_of(data)
        rid = new_rid()
        samples = await gather_all([self.sample(engine, f"{rid}:{i}", text, ids, data)
                                    for i in range(self.gconfig.n_samples)])
        return build_trajectory(text or "", samples)


async def gather_all(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Await all; if one raises, cancel the others (no orphans) and re-raise it."""
    if len(coros) == 1:
        return [await coros[0]]
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
