"""The Placer learns from measured latencies per task class and releases what a task held."""

from __future__ import annotations

import pytest

from edge_agent.placement import Device
from edge_agent.resources.vocab import DeviceKind
from tests.support.placer_fleet import BACKENDS, GB, dev, placer, task

# --- feedback ------------------------------------------------------------------------


def feedback_fleet() -> list[Device]:
    return [dev("fast", int8=2000, watts=10), dev("other", int8=1000, watts=10)]  # 2x slower


@BACKENDS
def test_feedback_moves_a_slow_class_away_and_only_that_class(backend: str) -> None:
    p = placer(feedback_fleet(), backend)
    assert p.place_one(task(cls="a")).device_id == "fast"  # baseline
    p.advance(10.0)
    d = p.place_one(task(cls="a"))
    for _ in range(10):
        if d.device_id != "fast":
            break
        p.feedback(d, latency_s=5.0 * d.service_s)
        d = p.place_one(task(cls="a"))
    assert d.device_id == "other"
    p.feedback(d, latency_s=d.service_s)
    assert p.correction("a", "fast") > 2.0
    assert p.correction("a", "other") == pytest.approx(1.0)
    assert p.correction("b", "fast") == 1.0  # a class never seen
    b = p.place_one(task(cls="b"))
    assert b.device_id == "fast"
    assert p.correction("b", "fast") == 1.0


@BACKENDS
def test_feedback_correction_follows_the_measured_ratio(backend: str) -> None:
    p = placer([dev("only", int8=2000)], backend, learning_rate=1.0)
    d = p.place_one(task(cls="a"))
    p.feedback(d, latency_s=3.0 * d.service_s)
    assert p.correction("a", "only") == pytest.approx(3.0)
    again = p.place_one(task(cls="a"))
    assert again.service_s == pytest.approx(3.0 * d.service_s)
    half = placer([dev("only", int8=2000)], backend, learning_rate=0.5)
    d = half.place_one(task(cls="a"))
    half.feedback(d, latency_s=4.0 * d.service_s)
    assert half.correction("a", "only") == pytest.approx(4.0)  # the first sample replaces
    d = half.place_one(task(cls="a"))
    half.feedback(d, latency_s=d.base_s)  # measured = the uncorrected model (ratio 1)
    assert half.correction("a", "only") == pytest.approx(2.0)  # halfway in log space


@BACKENDS
def test_feedback_releases_queue_and_memory(backend: str) -> None:
    p = placer(feedback_fleet(), backend)
    d = p.place_one(task(min_memory_bytes=2 * GB))
    assert p.live("fast")["queued_s"] > 0.0
    assert p.live("fast")["memory_free_bytes"] == pytest.approx(14 * GB)
    p.feedback(d, latency_s=d.service_s)
    assert p.live("fast")["queued_s"] == pytest.approx(0.0, abs=1e-12)
    assert p.live("fast")["memory_free_bytes"] == pytest.approx(16 * GB)


@BACKENDS
def test_feedback_releases_reconfiguration_time_too(backend: str) -> None:
    fpga = dev("fpga", DeviceKind.FPGA, int8=1000, reconfig_s=0.5)
    p = placer([fpga], backend)
    d = p.place_one(task(config_id=2))
    assert d.latency_s >= 0.5  # the bitstream swap is part of the estimate
    p.feedback(d, latency_s=d.service_s)
    assert p.live("fpga")["queued_s"] == pytest.approx(0.0, abs=1e-9)


@BACKENDS
def test_releasing_a_gang_leaves_other_work_queued(backend: str) -> None:
    fleet = [dev("fast", int8=4000, mem=64 * GB), dev("slow", int8=1000, mem=64 * GB)]
    p = placer(fleet, backend)
    gang = p.place_one(task(8.0, device_count=2))
    assert set(gang.device_ids) == {"fast", "slow"}
    solo = p.place_one(task(1.0))
    assert solo.device_id == "fast"
    p.feedback(gang, latency_s=gang.service_s)
    # only the gang's own charge leaves the fast device; the solo task is still queued
    assert p.live("fast")["queued_s"] == pytest.approx(solo.service_s)
    assert p.live("slow")["queued_s"] == pytest.approx(0.0, abs=1e-12)


@BACKENDS
def test_many_task_classes_keep_their_corrections(backend: str) -> None:
    p = placer(feedback_fleet(), backend)
    d = p.place_one(task(cls="a"))
    p.feedback(d, latency_s=2.0 * d.service_s)
    learned = p.correction("a", "fast")
    for i in range(10):  # grows the correction matrix past its initial rows
        assert p.place_one(task(cls=f"new{i}")).placed
    assert p.correction("a", "fast") == learned
    assert p.correction("new9", "fast") == 1.0
