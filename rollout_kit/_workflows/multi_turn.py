"""``MultiTurnWorkflow``: retry with feedback until the reward is positive or turns run out.

Each sample is one traced session; every turn adds a ``generate`` and a ``reward`` span, and
the session is annotated with ``turns``. The final reward is discounted by
``turn_discount ** (turns - 1)``. The trajectory has the single-turn layout, where
``input_ids`` holds the whole conversation and ``loss_mask`` is 1 only on model tokens
(feedback tokens are 0), plus ``turns`` per sample. Data items have the single-turn shape:
a prompt ``str``, or a mapping with ``"prompt"`` (``prompt_key``) or ``"input_ids"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._config import GenerationConfig
from .._errors import ConfigError
from .._io import ModelRequest, new_rid
from ..tracing import annotate, trace_phase, trace_session
from .base import RolloutWorkflow
from .reward import RewardFn, RewardMode
from .single_turn import SingleTurnWorkflow, Tokenizer, gather_all

if TYPE_CHECKING:
    from ..engines import InferenceEngine

DEFAULT_FEEDBACK = "\nYour answer is wrong. Please try again.\n"


class MultiTurnWorkflow(RolloutWorkflow):
    """Multi-turn RLVR: on a non-positive reward, append the answer and ``feedback``, retry.

    Args:
        reward_fn: as for :class:`SingleTurnWorkflow`.
        gconfig: sampling settings (``n_samples`` episodes run in parallel).
        tokenizer: required; builds the growing conversation as token ids.
        max_turns: at most this many generations per episode.
        turn_discount: reward multiplier per extra turn.
        feedback: the user turn appended after a wrong answer.
        prompt_key, reward_timeout, reward_mode: as for :class:`SingleTurnWorkflow`.
    """

    def __init__(self, reward_fn: RewardFn, gconfig: GenerationConfig | None = None,
                 tokenizer: Tokenizer | None = None, max_turns: int = 2,
                 turn_discount: float = 1.0, feedback: str = DEFAULT_FEEDBACK,
                 prompt_key: str = "prompt", reward_timeout: float = 60.0,
                 reward_mode: RewardMode = "auto") -> None:
        if tokenizer is None:
            raise ConfigError("MultiTurnWorkflow needs a tokenizer (encode/decode)")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"max_turns must be an int >= 1, got {max_turns!r}")
        if not 0 < turn_discount <= 1:
            raise ConfigError(f"turn_discount must be in (0, 1], got {turn_discount!r}")
        self._single = SingleTurnWorkflow(reward_fn, gconfig, tokenizer, prompt_key,
                                          reward_timeout, reward_mode)
        self.tokenizer: Tokenizer = tokenizer
        self.gconfig = self._single.gconfig
        self.max_turns = max_turns
        self.turn_discount = turn_discount
        self.feedback = feedback
        self.feedback_ids = tokenizer.encode(feedback)

    def validate(self, data: Any) -> None:
        """Refuse data without a usable prompt at submit time (as ``SingleTurnWorkflow``)."""
        self._single.validate(data)

    async def episode(self, engine: InferenceEngine, rid: str, text: str, ids: list[int],
                      data: Any) -> dict[str, Any]:
        """One sample: a session of up to ``max_turns`` generate + reward turns."""
        seq = list(ids)
        mask = [0] * len(ids)
        logp = [0.0] * len(ids)
        vers = [-1] * len(ids)
        reward = 0.0
        completion = ""
        turn = 0
        gconfig = self.gconfig.new(n_samples=1) if self.gconfig.n_samples != 1 else self.gconfig
        with trace_session():
            for turn in range(1, self.max_turns + 1):
                with trace_phase("generate"):
                    resp = await engine.generate_async(
                        ModelRequest(rid=rid, input_ids=list(seq), gconfig=gconfig))
                out = list(resp.output_tokens)
                completion = self.tokenizer.decode(out)
                seq += out
                mask += [1] * len(out)
                logp += list(resp.output_logprobs)
                vers += list(resp.output_versions)
                with trace_phase("reward"):
                    reward = await self._single.reward(text, completion, ids, out, data)
                if reward > 0 or turn == self.max_turns:
                    break
                seq += self.feedback_ids
                mask += [0] * len(self.feedback_ids)
                logp += [0.0] * len(self.feedback_ids)
                vers += [-1] * len(self.feedback_ids)
            annotate(turns=turn)
        return {"input_ids": seq, "loss_mask": mask, "logprobs": logp, "versions": vers,
                "reward": reward * self.turn_discount ** (turn - 1), "turns": turn,
                "completion": completion}

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> dict[str, Any] | None:
        """Run ``n_samples`` multi-turn episodes in parallel."""
        text, ids = self._single.prompt_of(data)
        rid = new_rid()
        eps = await gather_all([self.episode(engine, f"{rid}:{i}", text or "", ids, data)
                                for i in range(self.gconfig.n_samples)])
        return {
            "input_ids": [e["input_ids"] for e in eps],
            "loss_mask": [e["loss_mask"] for e in eps],
            "logprobs": [e["logprobs"] for e in eps],
            "versions": [e["versions"] for e in eps],
            "rewards": [e["reward"] for e in eps],
            "turns": [e["turns"] for e in eps],
            "completions": [e["completion"] for e in eps],
            "prompt": text or "",
            "prompt_len": len(ids),
        }
