"""A histogram kept as plain counts and read at scrape time.

Every task observes two histograms (its placement latency, its service time), and a
``prometheus_client`` ``Histogram`` takes a lock for the sum and another for the bucket,
after scanning the bounds in Python (about 4.8 µs an observation). ``PlainHistogram``
exposes the same family — ``_bucket`` (cumulative, ``le`` last), ``_count``, ``_sum``
(when the first bound is not negative) and ``_created`` (unless
``PROMETHEUS_DISABLE_CREATED_SERIES`` or ``disable_created_metrics()`` turned the
``_created`` series off, read at each scrape as the library does) — from a list of
counts per label set, the bucket found by bisection. Single process only: the
library's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) is not honoured.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client import metrics as _library
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString


class HistogramSeries:
    """One label set's bucket counts (not cumulative), sum and creation time."""

    __slots__ = ("_bounds", "buckets", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.buckets = [0.0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose bound is at least it (NaN in none)."""
        self.sum += amount
        i = bisect_left(self._bounds, amount)  # NaN: 0, and the check below leaves it out
        if amount <= self._bounds[i]:
            self.buckets[i] += 1.0


class PlainHistogram(Collector):
    """A histogram family, one ``HistogramSeries`` per label set (``labels``)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds) or len(bounds) < 1:
            raise ValueError(f"{name}: buckets must be given in ascending order")
        if "le" in labelnames:
            raise ValueError(f"{name}: 'le' is the bucket label and cannot be a label name")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._name, self._documentation = name, documentation
        self._labelnames = tuple(labelnames)
        self._bounds = tuple(bounds)
        # the library's own bound text ("0.005", "+Inf"); it carries no annotations
        self._les = tuple(floatToGoString(b) for b in bounds)  # type: ignore[no-untyped-call]
        self._series: dict[tuple[str, ...], HistogramSeries] = {}
        if not self._labelnames:
            self._series[()] = HistogramSeries(self._bounds)
        registry.register(self)

    def labels(self, *values: str) -> HistogramSeries:
        """Return the series of these label values (created on first use, as a child is)."""
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name}: expected labels {self._labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = HistogramSeries(self._bounds)
        return series

    def observe(self, amount: float) -> None:
        """Observe ``amount`` (a histogram without labels)."""
        self._series[()].observe(amount)

    def describe(self) -> Iterable[Metric]:
        """Name the family, so that the registry refuses a second one of the same name."""
        return [Metric(self._name, self._documentation, "histogram")]

    def collect(self) -> Iterable[Metric]:
        name = self._name
        metric = Metric(name, self._documentation, "histogram")
        created = _library._use_created  # the library's switch, as its Histogram reads it
        for values, series in list(self._series.items()):  # a copy: a scrape may be a thread
            labels = dict(zip(self._labelnames, values, strict=True))
            acc = 0.0
            for le, n in zip(self._les, list(series.buckets), strict=True):
                acc += n
                metric.add_sample(name + "_bucket", {**labels, "le": le}, acc)
            metric.add_sample(name + "_count", labels, acc)
            if self._bounds[0] >= 0:
                metric.add_sample(name + "_sum", labels, series.sum)
            if created:
                metric.add_sample(name + "_created", labels, series.created)
        return [metric]
