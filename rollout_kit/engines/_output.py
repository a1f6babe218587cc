"""What one generate call accumulates across continuations, its token budget, and the
server address list an engine is built from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._config import GenerationConfig
from .._errors import ConfigError
from ._backend import Segment
from ._http import server_name


@dataclass(slots=True)
class Output:
    """The tokens of one ``generate_async`` call, accumulated over continuations."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    text: str = ""
    has_text: bool = False
    first_token_ns: int | None = None
    itl: list[float] = field(default_factory=list)
    cached_tokens: int | None = None  # None: no answer reported any
    server_timing: dict[str, float] = field(default_factory=dict)
    # each answer's server_timing with its request written / last byte read (perf_counter_ns)
    answers: list[tuple[dict[str, float], int, int]] = field(default_factory=list)
    # the exchanges' times (perf_counter_ns; 0: unknown): the first request written, the
    # last answer's last byte read, and the sum of written → last byte over the answers
    first_sent_ns: int = 0
    last_done_ns: int = 0
    in_flight_ns: int = 0

    def add(self, seg: Segment, versions: list[int]) -> None:
        self.tokens.extend(seg.tokens)
        self.logprobs.extend(seg.logprobs)
        self.versions.extend(versions)
        if seg.text is not None:
            self.text += seg.text
            self.has_text = True
        if seg.chunks and self.first_token_ns is None:
            self.first_token_ns = seg.chunks[0][0]
        if len(seg.chunks) > 1:
            self.itl.extend((b[0] - a[0]) / 1e9
                            for a, b in zip(seg.chunks, seg.chunks[1:], strict=False))
        if seg.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + seg.cached_tokens
        self.server_timing.update(seg.server_timing)
        if seg.server_timing:
            self.answers.append((seg.server_timing, seg.sent_ns, seg.done_ns))
        if seg.sent_ns:
            if not self.first_sent_ns:
                self.first_sent_ns = seg.sent_ns
            self.last_done_ns = seg.done_ns
            self.in_flight_ns += seg.done_ns - seg.sent_ns


def _is_host_port(server: str) -> bool:
    host, sep, port = server.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
    if not isinstance(addresses, str | Sequence):
        raise ConfigError(f"server addresses must be 'host:port' strings, got {addresses!r}")
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    servers = [server_name(a) for a in items if isinstance(a, str) and a.strip()]
    if not servers or len(servers) != len(items) or not all(map(_is_host_port, servers)):
        raise ConfigError(f"server addresses must be non-empty 'host:port' strings, "
                          f"got {addresses!r}")
    return servers


def output_budget(gconfig: GenerationConfig, prompt_len: int) -> int:
    bound = min(gconfig.max_new_tokens, gconfig.max_tokens - prompt_len)
    if bound <= 0:
        raise ConfigError(f"the prompt has {prompt_len} tokens and max_tokens="
                          f"{gconfig.max_tokens} leaves no room for output tokens")
    return bound
