"""Parse a server's ``GET /metrics`` (Prometheus text exposition format) into samples.

``prometheus_client``'s parser reads the text; each sample line ``name{labels} value
[timestamp]`` becomes one :class:`Sample` named as written (``…_total``, ``…_bucket``), in
the order of the text; timestamps are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric sample: name, labels and value."""

    metric: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str) -> list[Sample]:
    """Parse Prometheus text into samples.

    Raises:
        ValueError: the text does not follow the format.
    """
    try:
        return [Sample(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text)
                for s in family.samples]
    except (IndexError, KeyError, TypeError) as exc:  # the parser's rarer failures
        raise ValueError(f"not Prometheus text: {exc!r}") from None
