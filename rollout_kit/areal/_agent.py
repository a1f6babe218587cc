"""``AReaLAgentWorkflow``: an AReaL agent, unchanged, as a rollout_kit workflow.

AReaL's agent protocol is any object with ``async run(data, **extra_kwargs)`` that talks to
an OpenAI-compatible ``base_url`` with ``api_key`` (and an ``http_client``) and returns a float
(the reward of its last completion) or ``{completion_id: reward}``. Here each task gets an
:class:`~rollout_kit.agents.AgentClient` bound to a key of its own on an
:class:`~rollout_kit.agents.AgentEndpoint`, so every call the agent makes is a traced turn of
the task (drift check, turns frame), and the rewards are assigned as AReaL's
``InteractionCache`` assigns them: newest to oldest, ``reward = own * 1 + later * discount``
(an unset reward counts 0).

An agent that returns an ``int``, a ``bool`` or ``None`` fails its task (``agent_error``), as
AReaL raises ``ValueError`` for anything but a float or a dict; return ``float(reward)``. So
does an agent that made no chat call, or a dict naming a completion it never received.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Literal

from .._config import GenerationConfig
from .._errors import AgentError, ConfigError
from .._workflows.base import RolloutWorkflow
from ..agents import AgentClient
from ._tensors import concat_padded_tensors, require_torch

if TYPE_CHECKING:
    from ..agents import AgentEndpoint, Turn
    from ..engines import InferenceEngine

Trajectory = Literal["turns", "tensors"]


def discounted(own: list[float | None], discount: float) -> list[float]:
    """AReaL's ``InteractionCache.apply_reward_discount``: oldest-first rewards, each plus the
    next one's discounted total (``None`` counts 0)."""
    out = [0.0] * len(own)
    later = 0.0
    for i in range(len(own) - 1, -1, -1):
        later = later * discount + (own[i] or 0.0)
        out[i] = later
    return out


def _row(turn: Turn, reward: float) -> dict[str, Any]:
    import torch

    seq = turn.prompt_ids + turn.completion_ids
    n_in, n_out = len(turn.prompt_ids), len(turn.completion_ids)
    row = {
        "input_ids": torch.tensor(seq, dtype=torch.int32),
        "loss_mask": torch.tensor([0] * n_in + [1] * n_out, dtype=torch.int32),
        "logprobs": torch.tensor([0.0] * n_in + turn.logprobs, dtype=torch.float32),
        "versions": torch.tensor([-1] * n_in + turn.versions, dtype=torch.int32),
        "attention_mask": torch.ones(len(seq), dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {k: v.unsqueeze(0) for k, v in row.items()}


class AReaLAgentWorkflow(RolloutWorkflow):
    """Runs an AReaL agent's ``run(data, base_url=, api_key=, http_client=)`` per task.

    Args:
        agent: an object with ``async run(data, **extra_kwargs)``.
        endpoint: the running :class:`~rollout_kit.agents.AgentEndpoint` its calls go to.
        reward_discount: AReaL's ``turn_discount``, newest to oldest completion.
        trajectory: ``"turns"`` (rollout_kit's: ``{"rewards": {id: reward}, "turns": [...]}``)
            or ``"tensors"`` (AReaL's ``individual`` export: one ``[1, L]`` row per
            completion, concatenated and padded; needs torch).
        gconfig, turn_timeout: defaults of every chat call, and the per-call time limit (as
            for :class:`~rollout_kit.agents.AgentClient`).
        http_timeout: seconds of the ``httpx`` client the agent is given.
    """

    def __init__(self, agent: Any, *, endpoint: AgentEndpoint, reward_discount: float = 1.0,
                 trajectory: Trajectory = "turns", gconfig: GenerationConfig | None = None,
                 turn_timeout: float | None = None, http_timeout: float = 600.0) -> None:
        run = getattr(agent, "run", None)
        if not callable(run) or not inspect.iscoroutinefunction(run):
            raise ConfigError(f"agent must have an async run(data, **extra_kwargs) method "
                              f"(AReaL's agent protocol), got {type(agent).__name__}")
        if not 0 < reward_discount <= 1:
            raise ConfigError(f"reward_discount must be in (0, 1], got {reward_discount!r}")
        if trajectory not in ("turns", "tensors"):
            raise ConfigError(f"trajectory must be 'turns' or 'tensors', got {trajectory!r}")
        if trajectory == "tensors":
            require_torch("AReaLAgentWorkflow(trajectory='tensors')")
        self.agent = agent
        self.endpoint = endpoint
        self.reward_discount = reward_discount
        self.trajectory = trajectory
        self.gconfig = gconfig or GenerationConfig()
        self.turn_timeout = turn_timeout
        self.http_timeout = http_timeout

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> dict[str, Any]:
        """Run the agent once, with a key of its own; reward its completions."""
        import httpx

        client = AgentClient(engine, gconfig=self.gconfig, turn_timeout=self.turn_timeout)
        key = self.endpoint.bind(client)
        try:
            async with httpx.AsyncClient(timeout=self.http_timeout) as http:
                result = await self.agent.run(data, base_url=self.endpoint.url, api_key=key,
                                              http_client=http)
        finally:
            client.close()
            self.endpoint.unbind(key)
        return self._reward(client, result)

    def _reward(self, client: AgentClient, result: Any) -> dict[str, Any]:
        turns = client.turns
        name = type(self.agent).__name__
        if not turns:
            raise AgentError(f"{name}.run returned without a chat call through base_url: no "
                             "completion to reward")
        ids = [client.completion_id(t) for t in turns]
        own: list[float | None] = [None] * len(turns)
        if isinstance(result, dict):
            where = {cid: i for i, cid in enumerate(ids)}
            unknown = [k for k in result if k not in where]
            if unknown:
                raise AgentError(f"{name}.run rewarded completion ids it never received: "
                                 f"{unknown[:3]} (its completions: {ids[:3]}…)")
            for cid, r in result.items():
                own[where[cid]] = float(r)
        elif isinstance(result, float):
            own[-1] = result
        else:
            raise AgentError(f"{name}.run returned {type(result).__name__} {result!r:.40}; "
                             "AReaL's agents return a float or {completion_id: reward} "
                             "(return float(reward))")
        rewards = discounted(own, self.reward_discount)
        for t, r in zip(turns, rewards, strict=True):
            client.annotate_turn(t, reward=r)
        if self.trajectory == "tensors":
            return concat_padded_tensors([_row(t, r) for t, r in zip(turns, rewards,
                                                                     strict=True)])
        return {"rewards": dict(zip(ids, rewards, strict=True)),
                "turns": [t.to_json() for t in turns]}
