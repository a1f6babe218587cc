"""``AgentWorkflow``: an agent function, written against the openai client, as a workflow.

``agent(client, data)`` gets an :class:`~._client.AgentClient` (``client.chat.completions
.create(...)`` as with ``openai.AsyncOpenAI``; ``client.tools`` the traced tools;
``client.run_tool_calls(message.tool_calls)`` runs a reply's calls) and returns the final
answer (a ``str``; ``None`` uses the last reply's content). ``n_samples`` conversations of one
data item run in parallel — one task, one session per chat call — and each is rewarded with
``reward_fn(prompt, completion, prompt_ids, completion_ids, **data)`` (the workflows' reward
signature). Per turn, the reward is the conversation's discounted back over its turns
(``reward_discount ** turns_after``), annotated on the turn's session.

The trajectory: ``{"prompt", "rewards", "conversations": [{"answer", "reward", "turns":
[Turn.to_json()...]}]}`` — every turn's prompt and completion ids, logprobs and weight
versions, its parent, drift and tool time.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._config import GenerationConfig
from .._errors import ConfigError
from .._workflows.base import RolloutWorkflow
from .._workflows.reward import RewardFn, RewardMode, RewardRunner
from .._workflows.single_turn import gather_all
from ._client import AgentClient, Render, TokenMode, ToolErrors, check_options

if TYPE_CHECKING:
    from ..engines import InferenceEngine
    from ._endpoint import AgentEndpoint

Agent = Callable[[AgentClient, Any], Awaitable[Any]]


class AgentWorkflow(RolloutWorkflow):
    """Runs ``agent`` ``n_samples`` times per data item, each on its own traced client.

    Args:
        agent: ``async agent(client, data) -> answer``.
        reward_fn: the reward of a conversation's answer (sync or async), or ``None``.
        n_samples: conversations per data item (a GRPO group).
        gconfig: default sampling values of every chat call.
        tools: functions by name, traced as ``tool.<name>`` phases (``client.tools``).
        token_mode, render, turn_timeout, tool_errors, template, template_kwargs: as for
            :class:`~._client.AgentClient`.
        endpoint: an :class:`~._endpoint.AgentEndpoint`: each client gets a key of its own
            there for the episode (``client.base_url``, ``client.api_key``), so the agent
            can run in another process or SDK.
        reward_discount: per-turn discount of the reward back over a conversation's turns.
        prompt_key: the data key of the prompt (``data`` may also be a ``str``).
        reward_timeout, reward_mode: as for :class:`~rollout_kit.SingleTurnWorkflow`.
    """

    def __init__(self, agent: Agent, reward_fn: RewardFn | None = None, *, n_samples: int = 1,
                 gconfig: GenerationConfig | None = None,
                 tools: Mapping[str, Callable[..., Any]] | None = None,
                 token_mode: TokenMode = "server", render: Render | None = None,
                 turn_timeout: float | None = None, tool_errors: ToolErrors = "message",
                 template: str | None = None, template_kwargs: dict[str, Any] | None = None,
                 endpoint: AgentEndpoint | None = None,
                 reward_discount: float = 1.0,
                 prompt_key: str = "prompt", reward_timeout: float = 60.0,
                 reward_mode: RewardMode = "auto") -> None:
        if not callable(agent) or not inspect.iscoroutinefunction(agent):
            raise ConfigError(f"agent must be an async function agent(client, data), got "
                              f"{agent!r}")
        if reward_fn is not None and not callable(reward_fn):
            raise ConfigError(f"reward_fn must be callable or None, got {reward_fn!r}")
        if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
            raise ConfigError(f"n_samples must be an int >= 1, got {n_samples!r}")
        if not 0 < reward_discount <= 1:
            raise ConfigError(f"reward_discount must be in (0, 1], got {reward_discount!r}")
        self.agent = agent
        self.n_samples = n_samples
        self.gconfig = gconfig or GenerationConfig()
        self.tools = dict(tools or {})
        self.endpoint = endpoint
        self.reward_discount = reward_discount
        self.prompt_key = prompt_key
        self.reward = None if reward_fn is None else RewardRunner(reward_fn, reward_mode,
                                                                  reward_timeout)
        self._client_kwargs: dict[str, Any] = {
            "gconfig": self.gconfig, "token_mode": token_mode, "render": render,
            "turn_timeout": turn_timeout, "tool_errors": tool_errors, "template": template,
            "template_kwargs": template_kwargs}
        check_options(**self._client_kwargs)  # bad options fail here, not in every task

    def validate(self, data: Any) -> None:
        """Refuse data without a prompt at submit time."""
        if isinstance(data, str) and data:
            return
        if isinstance(data, Mapping) and isinstance(data.get(self.prompt_key), str) \
                and data[self.prompt_key]:
            return
        raise ConfigError(f"data must be a non-empty str or a mapping with a non-empty str "
                          f"{self.prompt_key!r}, got {type(data).__name__}")

    def prompt_of(self, data: Any) -> str:
        """The data item's prompt text."""
        return data if isinstance(data, str) else str(data[self.prompt_key])

    async def arun_episode(self, engine: InferenceEngine, data: Any) -> dict[str, Any]:
        """Run the group's conversations in parallel and reward each."""
        clients = [AgentClient(engine, conversation=i, tools=self.tools, **self._client_kwargs)
                   for i in range(self.n_samples)]
        ep = self.endpoint
        keys = [ep.bind(c) for c in clients] if ep is not None else []
        try:
            convs = await gather_all([self._conversation(c, data) for c in clients])
        finally:
            for c in clients:
                c.close()
            for key in keys:
                ep.unbind(key)  # type: ignore[union-attr]
        return {"prompt": self.prompt_of(data), "rewards": [c["reward"] for c in convs],
                "conversations": convs}

    async def _conversation(self, client: AgentClient, data: Any) -> dict[str, Any]:
        answer = await self.agent(client, data)
        turns = client.turns
        if answer is None and turns:
            answer = turns[-1].message.get("content")
        text = answer if isinstance(answer, str) else "" if answer is None else str(answer)
        reward = float("nan")
        if self.reward is not None:
            last = turns[-1] if turns else None
            with client.phase("reward"):
                reward = await self.reward(
                    self.prompt_of(data), text, last.prompt_ids if last else [],
                    last.completion_ids if last else [],
                    data if isinstance(data, Mapping) else {})
            n = len(turns)
            for t in turns:
                client.annotate_turn(t, reward=reward * self.reward_discount ** (n - 1 - t.index))
        return {"answer": text, "reward": reward, "turns": [t.to_json() for t in turns]}
