"""One request of a load run: :class:`LoadRequest`, what every dataset loader returns.

A request holds either a text ``prompt`` (JSONL, ShareGPT) or its token ids
(``prompt_ids``: synthetic, shared-prefix and trace datasets, exact on the server), the
lengths it asks for, and for trace datasets the time it is due.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ._common import is_int

__all__ = ["LoadRequest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadRequest:
    """One request of a load run.

    Attributes:
        prompt: the text prompt, or ``None`` when ``prompt_ids`` are given.
        prompt_ids: the prompt's token ids, or ``None``.
        prompt_len: the prompt's length in tokens, when known.
        output_len: tokens to generate (``max_new_tokens``); ``None``: the server's default.
        ignore_eos: generate exactly ``output_len`` tokens (datasets that fix lengths).
        timestamp: send time in seconds from the run's start (trace datasets, time-scaled).
        group: shared-prefix group, or a trace request's first hash id.
    """

    prompt: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    prompt_len: int | None = None
    output_len: int | None = None
    ignore_eos: bool = False
    timestamp: float | None = None
    group: int | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.prompt_ids is None):
            raise ConfigError("LoadRequest needs exactly one of prompt and prompt_ids")
        for name in ("prompt_len", "output_len"):
            v = getattr(self, name)
            if v is not None and (not is_int(v) or v < 1):
                raise ConfigError(f"LoadRequest.{name} must be an int >= 1, got {v!r}")

    @property
    def input_len(self) -> int | None:
        """``prompt_len``, else the number of ``prompt_ids``, else ``None``."""
        if self.prompt_len is not None:
            return self.prompt_len
        return len(self.prompt_ids) if self.prompt_ids is not None else None
