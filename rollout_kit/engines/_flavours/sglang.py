"""SGLang adapter: ``POST /generate`` bodies in, :class:`~.._backend.Segment` out.

Version notes (see the server-apis reference):

* token ids come from ``output_ids`` (0.5.x); 0.4.9 has none, so they fall back to
  ``meta_info.output_token_logprobs[i][1]``; logprobs are ``[i][0]``;
* a request aborted while waiting (``"Abort before prefill"`` / ``"Abort in waiting queue"``)
  returns no tokens at all, which is a valid empty segment;
* streaming: ``output_ids`` is a *delta* in 0.5.2 and with ``--incremental-streaming-output``
  but *cumulative* in 0.5.23's default; logprob lists are cumulative except in incremental mode.
  The parser does not assume either: ``meta_info.completion_tokens`` (always cumulative) tells
  how many tokens the server has produced, and a list whose length equals that count is
  cumulative (take the unseen tail) while one whose length equals the count minus the tokens
  already seen is a delta. Without ``completion_tokens`` a list that extends the tokens seen
  so far is taken as cumulative.
* ``meta_info`` carries the server's own view of the request (0.5.2x): epoch stamps
  (``request_received_ts``, ``api_server_dispatch_finish_ts``, ``forward_entry_time``,
  ``prefill_finished_time``, ``request_finished_ts``, ``response_sent_to_client_ts``), durations
  (``queue_time``, ``first_token_latency``, ``e2e_latency``) and ``num_retractions``; the
  numbers present (:data:`META_TIMINGS`) are kept in ``Segment.server_timing`` under these
  names, and ``weight_version`` there too when it is an integer (the version the client set).
  :mod:`.._server_timing` turns them into the session's ``server_*`` columns.
* ``sampling_seed`` exists only in 0.5.2x (older versions answer an unknown key with 500), so it
  is sent only when :attr:`GenerationConfig.seed` is set.
"""

from __future__ import annotations

from math import nan
from typing import Any

from ..._config import GenerationConfig
from .._backend import (
    Backend,
    ControlRequest,
    Segment,
    StreamParser,
    as_stop_reason,
    float_timings,
    logprob,
    sampling_fields,
    token_ids,
)


def _finish(meta: dict[str, Any]) -> tuple[str | None, str | None]:
    fr = meta.get("finish_reason")
    if fr is None:
        return None, None
    if isinstance(fr, str):
        return fr, None
    kind = fr["type"]
    message = fr.get("message")
    return str(kind), (str(message) if message is not None else None)


#: the numbers of ``meta_info`` kept in ``Segment.server_timing`` (SGLang's names)
META_TIMINGS = ("request_received_ts", "api_server_dispatch_finish_ts", "forward_entry_time",
                "prefill_finished_time", "request_finished_ts", "response_sent_to_client_ts",
                "queue_time", "first_token_latency", "e2e_latency", "num_retractions")


def _int_label(value: Any) -> float | None:
    """A weight version label that is an integer (``"3"``), as a float; else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return float(int(value))
    return None


def _fill_meta(seg: Segment, obj: dict[str, Any], meta: dict[str, Any]) -> None:
    kind, message = _finish(meta)
    if kind is not None:
        seg.finish = as_stop_reason(kind)
        seg.message = message
    if isinstance(obj.get("text"), str):
        seg.text = obj["text"]
    if meta.get("prompt_tokens") is not None:
        seg.prompt_tokens = int(meta["prompt_tokens"])
    if meta.get("cached_tokens") is not None:
        seg.cached_tokens = int(meta["cached_tokens"])
    ids = obj.get("prompt_token_ids")
    if isinstance(ids, list) and ids:
        seg.prompt_ids = token_ids(ids)
    timing = float_timings(meta.get("sim_timing"))
    for key in META_TIMINGS:
        v = meta.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            timing.setdefault(key, float(v))
    version = _int_label(meta.get("weight_version"))
    if version is not None:
        timing["weight_version"] = version
    seg.server_timing.update(timing)


class SGLangStreamParser(StreamParser):
    """Accumulates SGLang stream events, robust to delta and cumulative ``output_ids``."""

    def __init__(self) -> None:
        super().__init__()
        self._cumulative: bool | None = None  # unknown until a later event tells

    def _new(self, values: list[Any], completed: int | None, ids: list[int]) -> list[Any]:
        """The unseen part of ``values`` (whose token ids are ``ids``)."""
        seen = len(self.segment.tokens)
        if completed is not None:
            if len(values) == completed and completed >= seen:
                if seen and completed > seen:
                    self._cumulative = True
                return values[seen:]  # cumulative (or the first event)
            if len(values) == completed - seen:
                if values:
                    self._cumulative = False
                return values  # delta
            raise ValueError(f"stream event lists {len(values)} items but "
                             f"completion_tokens={completed} after {seen} tokens")
        if len(values) >= seen and ids[:seen] == self.segment.tokens:
            return values[seen:]
        return values

    def feed(self, event: Any, t_ns: int) -> None:
        meta = event["meta_info"]
        raw = meta.get("completion_tokens")
        completed = int(raw) if raw is not None else None
        lps = list(meta.get("output_token_logprobs") or [])
        lp_ids = token_ids(e[1] for e in lps)
        out = event.get("output_ids")
        if out is not None:
            out_ids = token_ids(out)
            new_ids = self._new(out_ids, completed, out_ids)
        else:
            new_ids = self._new(lp_ids, completed, lp_ids)
        new_lps = [logprob(e[0]) for e in self._new(lps, completed, lp_ids)] if lps else []
        self._add(new_ids, new_lps, t_ns)
        prev = self.segment.text or ""
        _fill_meta(self.segment, event, meta)
        text = event.get("text")
        if isinstance(text, str) and prev:
            cumulative = self._cumulative
            if cumulative is None:
                cumulative = text.startswith(prev)
            self.segment.text = text if cumulative else prev + text


class SGLangBackend(Backend):
    """SGLang's native API (``/generate``, ``/pause_generation``, ``/continue_generation``)."""

    flavour = "sglang"
    server_family = "sglang"
    generate_endpoint = "/generate"
    pause_request = ControlRequest("POST", "/pause_generation", {})
    resume_request = ControlRequest("POST", "/continue_generation", {})
    wrong_flavour_hint = ("The address does not serve SGLang's native /generate: is it a vLLM "
                          "(OpenAI-compatible) server? Use RemotevLLMEngine for those")

    def build_request(self, *, input_ids: list[int] | None, text: str | None,
                      gconfig: GenerationConfig, max_new_tokens: int, stream: bool,
                      model: str | None) -> dict[str, Any]:
        del model  # an SGLang server serves one model
        g = gconfig
        sp: dict[str, Any] = {"max_new_tokens": max_new_tokens, **sampling_fields(g)}
        if g.stop:
            sp["stop"] = list(g.stop)
        if g.stop_token_ids:
            sp["stop_token_ids"] = list(g.stop_token_ids)
        if g.min_new_tokens:
            sp["min_new_tokens"] = min(g.min_new_tokens, max_new_tokens)
        if g.seed is not None:
            sp["sampling_seed"] = g.seed
        body: dict[str, Any] = {"sampling_params": sp, "return_logprob": g.logprobs,
                                "stream": stream}
        if input_ids:
            body["input_ids"] = input_ids
        else:
            body["text"] = text
            body["return_prompt_token_ids"] = True
        return body

    def parse_response(self, body: Any) -> Segment:
        if not isinstance(body, dict):
            raise TypeError(f"expected one JSON object, got {type(body).__name__}")
        meta = body["meta_info"]
        lps = meta.get("output_token_logprobs") or []
        ids = body.get("output_ids")
        seg = Segment(
            tokens=token_ids(ids) if ids is not None else token_ids(e[1] for e in lps),
            logprobs=[nan if e[0] is None else float(e[0]) for e in lps],  # logprob(), inlined
        )
        _fill_meta(seg, body, meta)
        if seg.finish is None:
            raise ValueError("meta_info.finish_reason is null in a finished response")
        return seg.check()

    def stream_parser(self) -> StreamParser:
        return SGLangStreamParser()

    def weights_from_disk_request(self, path: str, version: int) -> ControlRequest:
        return ControlRequest("POST", "/update_weights_from_disk",
                              {"model_path": path, "weight_version": str(version)})
