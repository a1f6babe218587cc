"""Scrape the servers' ``/metrics`` during a run, into the tracer's server metrics frame.

:class:`MetricsScraper` runs one small loop per server on the event loop: every
``interval`` seconds it sends ``GET /metrics`` (SGLang needs ``--enable-metrics``), keeps
the samples named in :data:`~rollout_kit.tracing.server_metrics.KEPT_METRICS` (the lines of
other metrics are dropped before ``prometheus_client``'s parser reads the text: a real vLLM
exposition is hundreds of histogram buckets) and hands them to a sink — the tracer's
:meth:`~rollout_kit.tracing.Tracer.record_server_metrics` — stamped with the midpoint of
the request and its answer on ``perf_counter_ns``, the tracer's clock.

A scrape never delays a generation: the scraper has its own connections (its own HTTP
client), each scrape is bounded by a timeout shorter than the interval (a server that hangs
on ``/metrics`` costs one timeout per interval, counted), and its parsing is a few hundred
microseconds on the loop. What goes wrong is counted in :attr:`MetricsScraper.stats` and
never raised:

* a server without ``/metrics`` (HTTP 404: SGLang without ``--enable-metrics``) gets one
  logged warning, and its scraping stops; the other servers and the run go on;
* text that is not Prometheus exposition is counted (``malformed``) and skipped;
* timeouts and connection failures are counted (``failed``), and the next tick tries again.

Each scrape that got no samples that way is still handed to the sink, as one
:data:`~rollout_kit.tracing.server_metrics.SCRAPE_FAILED` sample (value 1, label
``reason``): the metrics frame shows when the server was not seen, so its lanes show a gap
and :func:`rollout_kit.analysis.why_slow` says so instead of quoting another moment's state.

A scrape's timeout defaults to the larger of 0.8 × the interval and :data:`MIN_TIMEOUT_S`:
a saturated server (a CPU server with its batch full) was seen to answer ``/metrics`` in well
over 0.4 s, and a scrape that times out sees nothing at the moment that matters most. A scrape
longer than the interval delays the next one (the loop never overlaps scrapes); its samples
are stamped with the midpoint of the request and its answer.

:class:`~rollout_kit.RolloutController` starts one for the servers of its engines
(``scrape_interval=``, default 0.5 s; ``None`` turns it off).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .._config import EngineConfig
from .._errors import ConfigError, EngineError, EngineStatusError, EngineTimeoutError
from ..tracing.server_metrics import KEPT_METRICS, SCRAPE_FAILED
from ._http import HttpClient
from ._prometheus import parse_prometheus

logger = logging.getLogger("rollout_kit.engines")

#: seconds between two scrapes of a server, unless configured
DEFAULT_SCRAPE_INTERVAL = 0.5
#: a scrape's timeout, as a share of the interval ...
TIMEOUT_SHARE = 0.8
#: ... but at least this many seconds (a busy server answers /metrics late)
MIN_TIMEOUT_S = 2.0

Sink = Callable[[str, list[tuple[str, str, float]], int], Any]


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One server to scrape: its ``host:port``, its metrics endpoint and the config of the
    engine that serves it (api key, transport)."""

    server: str
    endpoint: str = "/metrics"
    config: EngineConfig = dataclasses.field(default_factory=EngineConfig)


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    if len(labels) == 1:
        (k, v), = labels.items()
        return f"{k}={v}"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


class SampleParser:
    """Reads the kept samples of one server's expositions (see :func:`keep_samples`).

    Lines of other metrics are dropped before any parsing; a kept line whose label set was
    seen before is read by splitting (its value is a ``float``); the others — a new label
    set, a timestamp, anything unusual — go through ``prometheus_client``'s parser, which
    raises on text that is not Prometheus. The label sets of a server repeat on every
    scrape, so after the first scrape nearly every line is split, not parsed (about 20×
    cheaper: the parser reads labels one character at a time). An exposition without any
    kept sample is parsed whole until one such parse succeeds (a server that exposes none
    of these metrics then costs the filter only); one that fails raises ``ValueError``.
    """

    __slots__ = ("_labels", "_valid", "keep")

    def __init__(self, keep: frozenset[str] = KEPT_METRICS) -> None:
        self.keep = keep
        self._labels: dict[str, str] = {}  # "{k="v",…}" as written -> "k=v,…"
        self._valid = False  # a whole exposition without kept samples parsed once

    def __call__(self, text: str) -> list[tuple[str, str, float]]:
        keep, known = self.keep, self._labels
        out: list[tuple[str, str, float]] = []
        for line in text.split("\n"):
            if not line or line[0] == "#":
                continue
            cut = line.find("{")
            if cut >= 0:
                name = line[:cut]
                if name not in keep:
                    continue
                end = line.rfind("}")
                written, rest = line[cut:end + 1], line[end + 1:]
                labels = known.get(written) if end > cut else None
            else:
                name, _, rest = line.partition(" ")
                if name not in keep:
                    continue
                labels = ""
            if labels is not None and rest[:1] == " ":
                parts = rest.split()
                if len(parts) == 1:
                    try:
                        out.append((name, labels, float(parts[0])))
                        continue
                    except ValueError:
                        pass
            out.extend(self._parse_line(line, written if cut >= 0 else None))
        if not out and not self._valid:
            parse_prometheus(text)  # raises ValueError when it is not Prometheus text
            self._valid = True
        return out

    def _parse_line(self, line: str, written: str | None) -> list[tuple[str, str, float]]:
        got = [(x.metric, _labels(x.labels), x.value) for x in parse_prometheus(line + "\n")
               if x.metric in self.keep]
        if written is not None and len(got) == 1 and len(self._labels) < 4096:
            self._labels[written] = got[0][1]
        return got


def keep_samples(text: str, keep: frozenset[str] = KEPT_METRICS
                 ) -> list[tuple[str, str, float]]:
    """The samples of ``text`` named in ``keep``: ``(metric, labels, value)`` with the
    labels as ``k=v,k=v`` (keys sorted).

    Only the lines of kept metrics are parsed; when there are none, the whole text is
    parsed to tell a valid exposition without them from one that is not Prometheus text.

    Raises:
        ValueError: the text (its kept lines, or all of it) is not Prometheus text.
    """
    return SampleParser(keep)(text)


@dataclass(slots=True)
class _Counts:
    scrapes: int = 0  # answered and kept
    samples: int = 0
    malformed: int = 0
    failed: int = 0  # timeouts, connection failures, error statuses
    stopped: str | None = None  # why this server is no longer scraped


class MetricsScraper:
    """Scrapes every target's metrics endpoint every ``interval`` seconds into ``sink``
    (see the module docstring).

    Args:
        targets: the servers (one loop each; a server named twice is scraped once).
        sink: called with ``(server, samples, ts_ns)`` after each scrape that gave
            samples: :meth:`Tracer.record_server_metrics <rollout_kit.tracing.Tracer.
            record_server_metrics>`.
        interval: seconds between two scrapes of a server.
        timeout: seconds one scrape may take (default: the larger of ``0.8 * interval``
            and :data:`MIN_TIMEOUT_S`).
        keep: the sample names kept (default
            :data:`~rollout_kit.tracing.server_metrics.KEPT_METRICS`).

    Raises:
        ConfigError: an interval or timeout that is not a number > 0.
    """

    @staticmethod
    def check_interval(interval: object, what: str = "scrape_interval") -> float | None:
        """``interval`` as seconds (``None``: scraping off).

        Raises:
            ConfigError: not ``None`` nor a finite number > 0.
        """
        if interval is None:
            return None
        if isinstance(interval, bool) or not isinstance(interval, int | float) \
                or not math.isfinite(interval) or interval <= 0:
            raise ConfigError(f"{what} must be a number of seconds > 0, or None to scrape no "
                              f"metrics; got {interval!r}")
        return float(interval)

    def __init__(self, targets: Iterable[ScrapeTarget], sink: Sink, *,
                 interval: float = DEFAULT_SCRAPE_INTERVAL, timeout: float | None = None,
                 keep: frozenset[str] = KEPT_METRICS) -> None:
        iv = self.check_interval(interval, "interval")
        assert iv is not None
        if timeout is None:
            timeout = max(TIMEOUT_SHARE * iv, MIN_TIMEOUT_S)
        to = self.check_interval(timeout, "timeout")
        assert to is not None
        self.interval, self.timeout = iv, to
        seen: dict[str, ScrapeTarget] = {}
        for t in targets:
            seen.setdefault(t.server, t)
        self.targets: tuple[ScrapeTarget, ...] = tuple(seen.values())
        self._sink = sink
        self._keep = keep
        self._parsers: dict[str, SampleParser] = {}
        self._counts = {t.server: _Counts() for t in self.targets}
        self._clients: dict[EngineConfig, HttpClient] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def __repr__(self) -> str:
        return (f"MetricsScraper(servers={[t.server for t in self.targets]!r}, "
                f"interval={self.interval:g}, running={self.running})")

    @property
    def running(self) -> bool:
        """Whether some server's loop is still scraping."""
        return any(not t.done() for t in self._tasks)

    @property
    def stats(self) -> dict[str, dict[str, Any]]:
        """Per server: ``scrapes`` (answered and kept), ``samples``, ``malformed``,
        ``failed`` (timeouts, connection failures, error statuses) and ``stopped`` (why
        its scraping stopped, or ``None``)."""
        return {s: dataclasses.asdict(c) for s, c in self._counts.items()}

    def _client(self, config: EngineConfig) -> HttpClient:
        client = self._clients.get(config)
        if client is None:
            # its own connections: a scrape never waits for (or holds) a generation's
            client = self._clients[config] = HttpClient(
                dataclasses.replace(config, max_connections=0))
        return client

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start one loop per server on ``loop`` (default: the running one); a no-op
        while running."""
        if self._tasks:
            return
        loop = loop or asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(t), name=f"rollout_kit scrape {t.server}")
                       for t in self.targets]

    async def stop_async(self) -> None:
        """Stop scraping and close the connections; idempotent."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close_async()

    async def _run(self, target: ScrapeTarget) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        counts = self._counts[target.server]
        while counts.stopped is None:
            await self.scrape_once_async(target)
            due += self.interval
            now = loop.time()
            if due < now:  # behind (a slow answer, a busy loop): no burst to catch up
                due = now
            await asyncio.sleep(due - now)

    def _failed(self, server: str, t0: int, reason: str) -> None:
        """Hand the sink one :data:`SCRAPE_FAILED` sample for a scrape that saw nothing."""
        self._sink(server, [(SCRAPE_FAILED, f"reason={reason}", 1.0)],
                   (t0 + time.perf_counter_ns()) // 2)

    async def scrape_once_async(self, target: ScrapeTarget) -> int:
        """Scrape ``target`` once now; the number of samples handed to the sink."""
        counts = self._counts.setdefault(target.server, _Counts())
        server = target.server
        t0 = time.perf_counter_ns()
        try:
            body = await self._client(target.config).request(
                server, "GET", target.endpoint, timeout=self.timeout)
        except EngineStatusError as exc:
            counts.failed += 1
            self._failed(server, t0, f"status {exc.status}")
            if exc.status == 404:
                counts.stopped = f"{target.endpoint} answered HTTP 404"
                logger.warning(
                    "%s has no %s (HTTP 404; SGLang serves it with --enable-metrics): its "
                    "metrics are not scraped; the run goes on", server, target.endpoint)
            return 0
        except EngineTimeoutError:
            counts.failed += 1  # the next tick tries again
            self._failed(server, t0, "timeout")
            return 0
        except EngineError:
            counts.failed += 1  # a connection failure: the next tick tries again
            self._failed(server, t0, "connection")
            return 0
        t1 = time.perf_counter_ns()
        parser = self._parsers.get(server)
        if parser is None:
            parser = self._parsers[server] = SampleParser(self._keep)
        try:
            samples = parser(body.decode("utf-8", "replace"))
        except ValueError as exc:
            counts.malformed += 1
            self._failed(server, t0, "malformed")
            logger.debug("%s %s: not Prometheus text, skipped (%s)", server, target.endpoint,
                         exc)
            return 0
        counts.scrapes += 1
        if samples:
            counts.samples += len(samples)
            self._sink(server, samples, (t0 + t1) // 2)
        return len(samples)
