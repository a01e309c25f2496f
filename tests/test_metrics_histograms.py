"""The histograms kept as plain counts expose what a Prometheus ``Histogram`` would."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from prometheus_client import (
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
)
from prometheus_client import metrics as library

from edge_agent.agent.web.histograms import PlainHistogram
from edge_agent.agent.web.metrics import AgentMetrics

BOUNDS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
# on a bound, between bounds, below the first, past the last, zero, exact repeats, huge
AMOUNTS = [1e-4, 3e-4, 0.0, 5.0, 5.0000001, 7.5, 1e-9, 0.05, 0.049999, 2.5, 1e300, math.inf]
AMOUNTS += [0.0123 * k for k in range(1, 60)]


@pytest.fixture
def created_series() -> Iterator[None]:
    was = library._use_created
    yield
    (enable_created_metrics if was else disable_created_metrics)()


def _lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if name in line]


def _without_created(lines: list[str]) -> list[str]:
    return [line for line in lines if "_created" not in line]


def _created(lines: list[str]) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("h_seconds_created")]


def _pair(labelnames: tuple[str, ...], bounds: tuple[float, ...] = BOUNDS):
    mine_registry, real_registry = CollectorRegistry(), CollectorRegistry()
    mine = PlainHistogram("h_seconds", "Doc", labelnames, buckets=bounds, registry=mine_registry)
    real = Histogram("h_seconds", "Doc", labelnames, buckets=bounds, registry=real_registry)
    return mine, mine_registry, real, real_registry


def test_labelled_observations_read_as_a_histogram_would(created_series: None) -> None:
    before = time.time()
    mine, mine_registry, real, real_registry = _pair(("emulated",))
    for k, amount in enumerate(AMOUNTS):
        label = "true" if k % 3 else "false"
        mine.labels(label).observe(amount)
        real.labels(label).observe(amount)
        got = _lines(generate_latest(mine_registry).decode(), "h_seconds")
        want = _lines(generate_latest(real_registry).decode(), "h_seconds")
        assert _without_created(got) == _without_created(want)
        # one _created per series, stamped when the series was made, as the library's child
        assert len(_created(got)) == len(_created(want))
        assert all(before <= t <= time.time() for t in _created(got))
    text = generate_latest(mine_registry).decode()
    assert 'h_seconds_bucket{emulated="true",le="+Inf"}' in text
    assert 'h_seconds_count{emulated="false"} ' in text


def test_unlabelled_nan_negative_and_no_created_series(created_series: None) -> None:
    disable_created_metrics()  # what PROMETHEUS_DISABLE_CREATED_SERIES=true sets at import
    mine, mine_registry, real, real_registry = _pair(())
    for amount in (math.nan, 0.3, -1.0, 0.001, math.nan):  # NaN: in no bucket, sum NaN
        mine.observe(amount)
        real.observe(amount)
        got = generate_latest(mine_registry).decode()
        assert got == generate_latest(real_registry).decode()
    assert "_created" not in got
    assert "h_seconds_count 3.0" in got  # the two NaNs counted in no bucket
    enable_created_metrics()
    assert _created(_lines(generate_latest(mine_registry).decode(), "h_seconds"))


def test_negative_first_bound_has_no_sum(created_series: None) -> None:
    disable_created_metrics()
    mine, mine_registry, real, real_registry = _pair((), (-1.0, 0.0, 1.0))
    for amount in (-2.0, -0.5, 0.5, 3.0):
        mine.observe(amount)
        real.observe(amount)
    got = generate_latest(mine_registry).decode()
    assert got == generate_latest(real_registry).decode()
    assert "_sum" not in got


def test_bad_buckets_and_labels_are_refused() -> None:
    registry = CollectorRegistry()
    with pytest.raises(ValueError, match="ascending"):
        PlainHistogram("a", "Doc", buckets=(1.0, 0.5), registry=registry)
    with pytest.raises(ValueError, match="'le'"):
        PlainHistogram("b", "Doc", ("le",), buckets=(1.0,), registry=registry)
    h = PlainHistogram("c", "Doc", ("x",), buckets=(1.0,), registry=registry)
    with pytest.raises(ValueError, match="expected labels"):
        h.labels("1", "2")
    with pytest.raises(ValueError, match="Duplicated"):  # the registry knows the family's names
        PlainHistogram("c", "Doc", buckets=(1.0,), registry=registry)


def test_the_agents_three_histograms_are_exposed(created_series: None) -> None:
    metrics = AgentMetrics()
    metrics.served(0.004, emulated=True)
    metrics.placement_seconds.observe(0.0002)
    metrics.kernel_seconds.observe(0.00001)
    text = metrics.render().decode()
    assert 'hetmesh_agent_task_service_seconds_bucket{emulated="true",le="0.005"} 1.0' in text
    assert 'hetmesh_agent_task_service_seconds_count{emulated="false"} 0.0' in text
    assert "hetmesh_agent_placement_seconds_sum 0.0002" in text
    assert 'hetmesh_agent_kernel_call_seconds_bucket{le="0.0001"} 1.0' in text
    assert "# TYPE hetmesh_agent_task_service_seconds histogram" in text
