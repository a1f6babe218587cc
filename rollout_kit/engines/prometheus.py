"""A small parser for the Prometheus text exposition format (``GET /metrics``).

``prometheus_client`` is a dev-only dependency, so the few lines needed are here. Comments
(``# HELP`` / ``# TYPE``) are skipped; each sample line ``name{labels} value [timestamp]``
becomes one :class:`Sample`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Sample", "parse_prometheus"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric sample: name, labels and value."""

    metric: str
    labels: dict[str, str]
    value: float


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_labels(text: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        eq = text.index("=", i)
        key = text[i:eq].strip()
        if eq + 1 >= n or text[eq + 1] != '"':
            raise ValueError(f"label value is not quoted in {line!r}")
        j, chars = eq + 2, []
        while j < n and text[j] != '"':
            if text[j] == "\\" and j + 1 < n:
                chars.append(_ESCAPES.get(text[j + 1], text[j + 1]))
                j += 2
            else:
                chars.append(text[j])
                j += 1
        if j >= n:
            raise ValueError(f"unterminated label value in {line!r}")
        labels[key] = "".join(chars)
        i = j + 1
    return labels


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    return float(text)


def parse_prometheus(text: str) -> list[Sample]:
    """Parse Prometheus text into samples.

    Raises:
        ValueError: a sample line does not follow the format.
    """
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            close = rest.rfind("}")
            if close < 0:
                raise ValueError(f"unterminated label set in {line!r}")
            labels = _parse_labels(rest[:close], line)
            tail = rest[close + 1:].split()
        else:
            name, *tail = line.split()
            labels = {}
        if not tail:
            raise ValueError(f"sample without a value: {line!r}")
        samples.append(Sample(name.strip(), labels, _parse_value(tail[0])))
    return samples
