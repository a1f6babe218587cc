"""The server metrics a tracer holds: scraped samples in columns (:class:`MetricsBuffer`),
their numpy copy (:class:`MetricRows`, a part of a snapshot) and their record.

A row is one sample: when it was scraped (``perf_counter_ns``), its *series* (a code for
the ``(server, metric, labels)`` triple) and its value — 20 bytes (an ``array('q')``, an
``array('i')`` and an ``array('d')``), whatever the names. A run at 2 Hz against 4 servers
keeping 30 samples per scrape adds 240 rows a second: 17 MB an hour.

The record (a line of a trace file, or what ``Tracer.drain_records`` ships)::

    {"kind": "server_metrics",
     "names": {"server": [...], "metric": [...], "labels": [...]},
     "ts": [...], "server": [...], "metric": [...], "labels": [...], "value": [...]}

``ts`` are nanoseconds since the header's ``epoch_ns``; ``server`` / ``metric`` / ``labels``
index the ``names`` lists; a ``value`` that is not finite is ``null`` (NaN when read back).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the kind of a server metrics record
METRICS = "server_metrics"


class Names:
    """Strings by code, in order of first use."""

    __slots__ = ("codes", "names")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}
        for n in names:
            self.code(n)

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            c = self.codes[name] = len(self.names)
            self.names.append(name)
        return c

    def lut(self, names: Sequence[Any]) -> np.ndarray:
        """Codes here of each of ``names`` (adding those not known yet)."""
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"a server metrics name is not a string: {n!r}")
        return np.asarray([self.code(n) for n in names] or [0], dtype=np.int32)


def _empty(dtype: type) -> np.ndarray:
    return np.empty(0, dtype=dtype)


@dataclass
class MetricRows:
    """Scraped samples as numpy columns: ``ts`` (int64 ns on the tracer's clock), codes of
    ``server`` / ``metric`` / ``labels`` (int32, into the name lists) and ``value``."""

    ts: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    server: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    metric: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    labels: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    value: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    servers: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    label_sets: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    def shifted(self, shift_ns: int) -> MetricRows:
        """The same rows, times moved by ``shift_ns``."""
        if not shift_ns:
            return self
        return MetricRows(self.ts + shift_ns, self.server, self.metric, self.labels,
                          self.value, self.servers, self.metrics, self.label_sets)

    @staticmethod
    def concat(parts: Sequence[MetricRows]) -> MetricRows:
        """One set of rows of ``parts`` in order, the name lists merged."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return MetricRows()
        if len(parts) == 1:
            return parts[0]
        servers, metrics, label_sets = Names(), Names(), Names()
        cols: list[list[np.ndarray]] = [[], [], [], [], []]
        for p in parts:
            cols[0].append(p.ts)
            cols[1].append(servers.lut(p.servers)[p.server])
            cols[2].append(metrics.lut(p.metrics)[p.metric])
            cols[3].append(label_sets.lut(p.label_sets)[p.labels])
            cols[4].append(p.value)
        ts, srv, met, lab, val = (np.concatenate(c) for c in cols)
        return MetricRows(ts, srv, met, lab, val, servers.names, metrics.names,
                          label_sets.names)


class MetricsBuffer:
    """The server metrics rows of a store (see the module docstring)."""

    __slots__ = ("_series", "keys", "label_sets", "metrics", "series", "servers", "ts",
                 "value")

    def __init__(self) -> None:
        self.ts = array("q")
        self.series = array("i")
        self.value = array("d")
        self.servers, self.metrics, self.label_sets = Names(), Names(), Names()
        self.keys = array("i")  # (server, metric, labels) codes of each series, flat
        self._series: dict[tuple[int, str, str], int] = {}

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, server: str, ts_ns: int,
            samples: Iterable[tuple[str, str, float]]) -> int:
        """Append the samples of one scrape of ``server`` at ``ts_ns``; how many."""
        s = self.servers.code(server)
        codes = self._series
        series: list[int] = []
        values: list[float] = []
        for metric, labels, value in samples:
            key = (s, metric, labels)
            c = codes.get(key)
            if c is None:
                c = codes[key] = len(self.keys) // 3
                self.keys.extend((s, self.metrics.code(metric), self.label_sets.code(labels)))
            series.append(c)
            values.append(value)
        self.series.extend(series)
        self.value.extend(values)
        self.ts.extend([ts_ns] * len(series))
        return len(series)

    def _add_rows(self, ts: np.ndarray, server: np.ndarray, metric: np.ndarray,
                  labels: np.ndarray, value: np.ndarray) -> None:
        """Append rows given as code columns of this buffer's names."""
        if not len(ts):
            return
        key = (server.astype(np.int64) << 42) | (metric.astype(np.int64) << 21) | labels
        uniq, inverse = np.unique(key, return_inverse=True)
        lut = np.empty(len(uniq), dtype=np.int32)
        names_m, names_l = self.metrics.names, self.label_sets.names
        for i, k in enumerate(uniq.tolist()):
            s, m, la = k >> 42, (k >> 21) & 0x1FFFFF, k & 0x1FFFFF
            t = (s, names_m[m], names_l[la])
            c = self._series.get(t)
            if c is None:
                c = self._series[t] = len(self.keys) // 3
                self.keys.extend((s, m, la))
            lut[i] = c
        self.ts.frombytes(ts.astype(np.int64).tobytes())
        self.series.frombytes(lut[inverse.ravel()].astype(np.int32).tobytes())
        self.value.frombytes(value.astype(np.float64).tobytes())

    def rows(self, start: int = 0) -> MetricRows:
        """A numpy copy of the rows from ``start`` on (call under the owner's lock)."""
        n = len(self.ts)
        if start >= n:
            return MetricRows(servers=list(self.servers.names),
                              metrics=list(self.metrics.names),
                              label_sets=list(self.label_sets.names))
        keys = np.frombuffer(self.keys, dtype=np.int32).reshape(-1, 3)
        series = np.frombuffer(self.series, dtype=np.int32)[start:n]
        k = keys[series]
        return MetricRows(
            ts=np.frombuffer(self.ts, dtype=np.int64)[start:n].copy(),
            server=k[:, 0].copy(), metric=k[:, 1].copy(), labels=k[:, 2].copy(),
            value=np.frombuffer(self.value, dtype=np.float64)[start:n].copy(),
            servers=list(self.servers.names), metrics=list(self.metrics.names),
            label_sets=list(self.label_sets.names))

    def record(self, epoch_ns: int, start: int) -> dict[str, Any] | None:
        """The record of the rows from ``start`` on (``None``: none); numbers are numpy
        arrays (encode with ``orjson.OPT_SERIALIZE_NUMPY``)."""
        if start >= len(self.ts):
            return None
        r = self.rows(start)
        return {"kind": METRICS,
                "names": {"server": r.servers, "metric": r.metrics, "labels": r.label_sets},
                "ts": r.ts - epoch_ns, "server": r.server, "metric": r.metric,
                "labels": r.labels, "value": r.value}

    def ingest(self, rec: Mapping[str, Any], shift: int) -> int:
        """Append a record's rows, times shifted by ``shift``; how many.

        Raises:
            ValueError, TypeError, KeyError, IndexError: a malformed record.
        """
        names = rec["names"]
        ts = _ints(rec["ts"])
        n = len(ts)
        cols = []
        for key, table in (("server", self.servers), ("metric", self.metrics),
                           ("labels", self.label_sets)):
            codes = _ints(rec[key], n)
            words = names[key]
            if not isinstance(words, list):
                raise TypeError(f"names.{key} is not a list")
            if n and (codes.min() < 0 or codes.max() >= len(words)):
                raise IndexError(f"a {key} code is outside its names table")
            cols.append(table.lut(words)[codes] if n else codes.astype(np.int32))
        raw = rec["value"]
        if not isinstance(raw, list | np.ndarray) or len(raw) != n:
            raise ValueError("the value column does not match the ts column")
        if isinstance(raw, list) and None in raw:  # JSON has no NaN: orjson wrote null
            raw = [math.nan if v is None else v for v in raw]
        value = np.asarray(raw, dtype=np.float64)
        if value.ndim != 1:
            raise ValueError("the value column is not a list of numbers")
        self._add_rows(ts + shift, cols[0], cols[1], cols[2], value)
        return n

    def copy(self) -> MetricsBuffer:
        c = MetricsBuffer()
        c.ts, c.series, c.value = array("q", self.ts), array("i", self.series), \
            array("d", self.value)
        c.keys = array("i", self.keys)
        c.servers, c.metrics, c.label_sets = (Names(self.servers.names),
                                              Names(self.metrics.names),
                                              Names(self.label_sets.names))
        c._series = dict(self._series)
        return c

    def nbytes(self) -> int:
        """Bytes the rows take (the arrays' buffers)."""
        return sum(a.buffer_info()[1] * a.itemsize for a in (self.ts, self.series, self.value))


def _ints(values: Any, n: int | None = None) -> np.ndarray:
    """A list (or, in drained records, an array) of ints as int64."""
    if not isinstance(values, list | np.ndarray):
        raise TypeError(f"expected a list of ints, got {type(values).__name__}")
    arr = np.asarray(values) if len(values) else np.empty(0, dtype=np.int64)
    if arr.dtype.kind != "i" or arr.ndim != 1:
        raise TypeError(f"expected a list of ints, got {arr.dtype} values")
    if n is not None and len(arr) != n:
        raise ValueError(f"a column has {len(arr)} values, expected {n}")
    return arr.astype(np.int64, copy=False)
