"""vLLM adapter: ``POST /v1/completions`` bodies in, :class:`~.._backend.Segment` out.

Token ids come from ``choices[0].token_ids`` (``return_token_ids``, vLLM ≥ 0.10.2) with a
fallback to the ``"token_id:N"`` strings of ``logprobs.tokens`` (``logprobs: 0`` +
``return_tokens_as_token_ids``, sent only when :attr:`GenerationConfig.logprobs` is on), which
every version supports. Prompt ids come from
``prompt_token_ids`` (per choice; top level for chat). Streaming asks for
``stream_options.include_usage`` so the final usage chunk carries the prompt length; chunk
fields may be missing or ``null`` (0.33 vs 0.10.2) and are treated alike. Server control is
the dev-mode ``/pause?mode=abort`` and ``/resume`` (vLLM ≥ 0.12, ``VLLM_SERVER_DEV_MODE=1``).
"""

from __future__ import annotations

from typing import Any

from ..._config import GenerationConfig
from .._backend import (
    Backend,
    ControlRequest,
    Segment,
    StreamParser,
    as_stop_reason,
    logprob,
    token_ids,
)
from .openai import add_openai_options, fill_usage, openai_sampling


def token_id_of(token: str) -> int:
    """The id in a ``"token_id:N"`` string (any prefix before the last ``:``)."""
    return token_ids([int(token.rsplit(":", 1)[-1])])[0]


def _choice_tokens(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    lp = choice.get("logprobs") or {}
    logprobs = [logprob(x) for x in lp.get("token_logprobs") or []]
    ids = choice.get("token_ids")
    if ids is not None:
        return token_ids(ids), logprobs
    return [token_id_of(t) for t in lp.get("tokens") or []], logprobs


def _fill_common(seg: Segment, body: dict[str, Any], choice: dict[str, Any]) -> None:
    if choice.get("finish_reason") is not None:
        seg.finish = as_stop_reason(str(choice["finish_reason"]))
    fill_usage(seg, body, choice)


class VLLMStreamParser(StreamParser):
    """Accumulates ``/v1/completions`` stream chunks (deltas) and the usage chunk.

    Per event it is on the hot path of every streamed request: a delta that carries token
    ids and nothing else (no logprobs, finish reason, prompt ids, usage or server timing)
    takes a short path; every other event goes through the general one.
    """

    def __init__(self) -> None:
        super().__init__()
        self._text: list[str] = []

    def feed(self, event: Any, t_ns: int) -> None:
        choices = event.get("choices")
        if not choices:
            fill_usage(self.segment, event)
            return
        choice = choices[0]
        ids = choice.get("token_ids")
        if ids is not None and not choice.get("logprobs"):
            self._add(token_ids(ids), [], t_ns)
        else:
            tokens, logprobs = _choice_tokens(choice)
            self._add(tokens, logprobs, t_ns)
        delta = choice.get("text")
        if isinstance(delta, str):
            self._text.append(delta)
        if (choice.get("finish_reason") is not None or choice.get("prompt_token_ids")
                or event.get("usage") is not None or "sim_timing" in event
                or "prompt_token_ids" in event):
            _fill_common(self.segment, event, choice)

    def result(self) -> Segment:
        if self._text:
            self.segment.text = "".join(self._text)
        return super().result()


class VLLMBackend(Backend):
    """vLLM's OpenAI-compatible completions API and its dev-mode control endpoints."""

    flavour = "vllm"
    server_family = "vllm"
    generate_endpoint = "/v1/completions"
    pause_request = ControlRequest("POST", "/pause", None, {"mode": "abort"})
    resume_request = ControlRequest("POST", "/resume")
    paused_probe = ControlRequest("GET", "/is_paused")
    needs_model = True
    wrong_flavour_hint = ("The address does not serve the OpenAI-compatible /v1/completions: "
                          "is it an SGLang server? Use RemoteSGLangEngine for those")

    def build_request(self, *, input_ids: list[int] | None, text: str | None,
                      gconfig: GenerationConfig, max_new_tokens: int, stream: bool,
                      model: str | None) -> dict[str, Any]:
        g = gconfig
        body = {"prompt": input_ids if input_ids else text,
                **openai_sampling(g, max_new_tokens, stream)}
        if g.logprobs:
            body["logprobs"] = 0
            body["return_tokens_as_token_ids"] = True
        return add_openai_options(body, g, model, stream)

    def parse_response(self, body: Any) -> Segment:
        if not isinstance(body, dict):
            raise TypeError(f"expected one JSON object, got {type(body).__name__}")
        choice = body["choices"][0]
        tokens, logprobs = _choice_tokens(choice)
        seg = Segment(tokens=tokens, logprobs=logprobs)
        if isinstance(choice.get("text"), str):
            seg.text = choice["text"]
        _fill_common(seg, body, choice)
        if seg.finish is None:
            raise ValueError("choices[0].finish_reason is null in a finished response")
        return seg.check()

    def stream_parser(self) -> StreamParser:
        return VLLMStreamParser()
