"""Bounded optimism for never-measured (class, device) pairs, and the batch live update."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_agent.errors import InvalidInput
from edge_agent.placement import Placer, Policy
from edge_agent.placement.explore import EXPLORE_EVERY, ROOFLINE_WITHIN, optimism
from edge_agent.resources.vocab import DeviceKind, Health
from tests.test_placer_quality import dev, task


def _fleet(backend: str, policy: str = "latency-first") -> Placer:
    """A GPU, and a CPU whose roofline says 5x slower than the GPU for a 10 GFLOP task."""
    devices = [dev("gpu", int8=1000), dev("cpu", DeviceKind.CPU_ARM, int8=200)]
    return Placer(devices, Policy.template(policy), backend=backend)  # type: ignore[arg-type]


def _run(p: Placer, n: int, cpu_vs_roofline: float) -> list[str | None]:
    """Place ``n`` tasks, each measured at once: the GPU as its roofline, the CPU scaled."""
    chosen = []
    for _ in range(n):
        d = p.place_one(task(10.0, cls="det"))
        chosen.append(d.device_id)
        scale = cpu_vs_roofline if d.device_id == "cpu" else 1.0
        p.feedback(d, latency_s=d.base_s * scale)
    return chosen


def test_a_device_10x_faster_than_its_roofline_is_found_then_used(backend: str) -> None:
    """Truly 2x faster than the GPU (10x under its roofline): probed by the first due tick."""
    p = _fleet(backend)
    chosen = _run(p, 10 * EXPLORE_EVERY, cpu_vs_roofline=0.1)
    first = chosen.index("cpu")
    assert first < EXPLORE_EVERY  # found within the bound
    assert p.correction("det", "cpu") == pytest.approx(0.1)  # measured, not guessed
    assert chosen[first + 1 :].count("cpu") == len(chosen) - first - 1  # used from then on
    assert p.exploration.stats.probes == 1


def test_a_device_as_slow_as_its_roofline_is_probed_once(backend: str) -> None:
    """The roofline was right: one probe, whose measured cost is what the stats report."""
    p = _fleet(backend)
    gpu_s = p.preview(task(10.0, cls="det")).service_s
    n = 20 * EXPLORE_EVERY
    chosen = _run(p, n, cpu_vs_roofline=1.0)
    assert chosen.count("cpu") == 1  # the bound: each untried pair at most once
    stats = p.exploration.stats.as_dict()
    assert stats["probes"] == 1 and stats["decisions"] == n
    assert stats["probes_per_1000"] <= 1000 / EXPLORE_EVERY
    # the probe ran 5x the GPU's estimate: its cost is the 4x more
    assert stats["probe_extra_service_s"] == pytest.approx(4 * gpu_s, rel=0.02)
    assert p.correction("det", "cpu") == pytest.approx(1.0)


def test_a_device_beyond_the_optimism_bound_is_not_probed(backend: str) -> None:
    """A roofline more than ROOFLINE_WITHIN x the chosen estimate is never tried."""
    slow = 1000 / (2 * ROOFLINE_WITHIN)
    devices = [dev("gpu", int8=1000), dev("cpu", DeviceKind.CPU_ARM, int8=slow)]
    p = Placer(devices, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    chosen = _run(p, 10 * EXPLORE_EVERY, cpu_vs_roofline=0.01)
    assert "cpu" not in chosen
    assert p.exploration.stats.probes == 0
    # the extra kernel calls it cost: the interval doubles after each fruitless pass
    assert p.exploration.stats.optimistic_passes == 3  # at decisions 16, 48 and 112


def test_exploration_is_deterministic_and_the_same_on_both_backends() -> None:
    """Counters, no random draws: the two kernels probe the same pairs at the same decisions."""
    runs = []
    for backend in ("native", "python", "native"):
        p = _fleet(backend, "balanced")
        runs.append((_run(p, 5 * EXPLORE_EVERY, 0.1), p.export_corrections()))
    assert runs[0] == runs[1] == runs[2]


def test_preview_neither_probes_nor_counts(backend: str) -> None:
    p = _fleet(backend)
    for _ in range(3 * EXPLORE_EVERY):
        assert p.preview(task(10.0, cls="det")).device_id == "gpu"
    assert p.exploration.stats.decisions == 0 and p.exploration.stats.probes == 0


def test_a_published_prior_is_trusted_and_a_roofline_is_not() -> None:
    assert optimism("roofline") == ROOFLINE_WITHIN
    assert 1.0 < optimism("published, other precision (measured)") < ROOFLINE_WITHIN
    assert optimism("published int8 (vendor)") == 1.0


def test_imported_and_measured_pairs_are_not_explored(backend: str) -> None:
    p = _fleet(backend)
    p.import_corrections({"det": {"cpu": 1.0}})
    chosen = _run(p, 5 * EXPLORE_EVERY, cpu_vs_roofline=0.1)
    assert "cpu" not in chosen and p.exploration.stats.probes == 0


def _three(backend: str) -> Placer:
    devices = [dev("a", int8=1000), dev("b", int8=500), dev("c", int8=100)]
    return Placer(devices, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]


def test_update_live_many_writes_what_update_live_would(backend: str) -> None:
    one, many = _three(backend), _three(backend)
    queued, health = [0.5, 0.0, 2.0], [Health.ONLINE, Health.OFFLINE, Health.ONLINE]
    for device_id, q, h in zip(one.device_ids, queued, health, strict=True):
        one.update_live(device_id, queued_s=q, health=h, utilization=0.25)
    many.update_live_many(queued_s=queued, health=[float(h) for h in health], utilization=0.25)
    for device_id in one.device_ids:
        assert one.live(device_id) == many.live(device_id)
    assert one.place_one(task(10.0)).device_id == many.place_one(task(10.0)).device_id == "a"
    many.update_live_many(("c", "a"), queued_s=[0.0, 9.0])  # a subset, in any order
    assert many.live("a")["queued_s"] == 9.0 and many.live("c")["queued_s"] == 0.0
    assert many.place_one(task(10.0)).device_id == "c"  # the kernel saw the new state


@pytest.mark.parametrize(
    ("ids", "columns", "message"),
    [
        (None, {"queued_s": [0.1, -1.0, 0.2]}, "queued_s must be finite numbers in [0, inf]"),
        (None, {"utilization": [0.1, math.nan, 0.2]}, "utilization must be finite"),
        (None, {"health": [0.0, 7.0, 1.0]}, "health must be"),
        (None, {"queued_s": [0.1, 0.2]}, "needs one value or 3 values"),
        (None, {"slots": [1, 1, 1]}, "unknown column 'slots'"),
        (("a", "zz"), {"queued_s": [0.1, 0.2]}, "unknown device 'zz'"),
        (("a", "a"), {"queued_s": [0.1, 0.2]}, "listed twice"),
        (None, {"queued_s": ["x", 1, 2]}, "queued_s must be numbers"),
    ],
)
def test_update_live_many_rejects_bad_input_and_changes_nothing(
    ids: tuple[str, ...] | None, columns: dict[str, object], message: str
) -> None:
    p = _three("python")
    before = [p.live(d) for d in p.device_ids]
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("]", r"\]")):
        good = np.full(len(ids or p.device_ids), 0.5)  # valid, and listed first
        p.update_live_many(ids, predicted_utilization=good, **columns)  # type: ignore[arg-type]
    assert [p.live(d) for d in p.device_ids] == before
