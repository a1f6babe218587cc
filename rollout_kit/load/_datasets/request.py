"""One request of a load run: :class:`LoadRequest`, what every dataset loader returns.

A request holds either a text ``prompt`` (JSONL, ShareGPT) or its token ids
(``prompt_ids``: synthetic, shared-prefix and trace datasets, exact on the server), the
lengths it asks for, for trace datasets the time it is due, and how many samples of the
prompt one task generates (a recorded RL run: ``samples`` sessions, each with its own
length in ``output_lens``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._errors import ConfigError
from .common import is_int


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
        group: shared-prefix group, a trace request's first hash id, or a recorded run's
            task id.
        samples: generate requests the task sends, concurrently, one traced session each
            (the samples of one prompt, as an RL task's ``n_samples``).
        output_lens: per-sample ``output_len`` (``samples`` of them), or ``None``: every
            sample asks for ``output_len``. With it, ``output_len`` is the longest of them
            (filled in when left ``None``).

    Raises:
        ConfigError: no prompt or both, a length, ``samples`` or ``output_lens`` that is not
            a positive int (``output_lens``: one per sample, ``output_len`` their maximum).
    """

    prompt: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    prompt_len: int | None = None
    output_len: int | None = None
    ignore_eos: bool = False
    timestamp: float | None = None
    group: int | None = None
    samples: int = 1
    output_lens: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.prompt_ids is None):
            raise ConfigError("LoadRequest needs exactly one of prompt and prompt_ids")
        for name, v in (("prompt_len", self.prompt_len), ("output_len", self.output_len)):
            if v is not None and (not is_int(v) or v < 1):
                raise ConfigError(f"LoadRequest.{name} must be an int >= 1, got {v!r}")
        n = self.samples
        if not is_int(n) or n < 1:
            raise ConfigError(f"LoadRequest.samples must be an int >= 1, got {n!r}")
        lens = self.output_lens
        if lens is not None:
            if not isinstance(lens, tuple) or len(lens) != n or not all(
                    is_int(x) and x >= 1 for x in lens):
                raise ConfigError(f"LoadRequest.output_lens must be a tuple of {n} int(s) "
                                  f">= 1 (one per sample), got {lens!r}")
            longest = max(lens)
            if self.output_len is None:
                object.__setattr__(self, "output_len", longest)
            elif self.output_len != longest:
                raise ConfigError(f"LoadRequest.output_len ({self.output_len}) must be the "
                                  f"longest of output_lens ({longest}) or None")

    @property
    def input_len(self) -> int | None:
        """``prompt_len``, else the number of ``prompt_ids``, else ``None``."""
        if self.prompt_len is not None:
            return self.prompt_len
        return len(self.prompt_ids) if self.prompt_ids is not None else None
