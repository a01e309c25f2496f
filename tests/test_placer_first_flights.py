"""An unmeasured estimate is not trusted twice at once, under every policy (first_flights)."""

from __future__ import annotations

import pytest

from edge_agent.placement import Placer
from edge_agent.placement.explore import POOLED
from edge_agent.resources.vocab import DeviceKind
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract
from tests.test_placer_quality import dev, placer, task


def _pair(backend: str, policy: str = "latency-first", clock: list[float] | None = None) -> Placer:
    now = clock if clock is not None else [0.0]
    return placer(
        [dev("gpu", int8=1000), dev("fast", int8=4000)],
        backend,
        policy,
        explore=False,
        clock=lambda: now[0],
    )


@pytest.mark.parametrize("policy", ["latency-first", "balanced"])
def test_an_unmeasured_pair_takes_one_task_until_measured(backend: str, policy: str) -> None:
    p = _pair(backend, policy)
    det = task(10.0, cls="det")
    first = p.place_one(det)
    assert first.device_ids == ("fast",)
    second = p.place_one(det)  # the fast pair's first result is not in yet: not queued there
    assert second.device_ids == ("gpu",)
    third = p.place_one(det)
    assert third.placed  # every candidate gated: none is
    for d in (first, second, third):
        p.feedback(d, latency_s=d.service_s)
    # both pairs measured: the fast device takes tasks while others are in flight there
    assert [p.place_one(det).device_ids for _ in range(2)] == [("fast",), ("fast",)]


def test_a_pair_started_from_its_devices_pooled_factor_is_gated_too(backend: str) -> None:
    """A factor learned on another model is not this model's measurement."""
    p = placer(
        [dev("gpu", int8=1000), dev("cpu", DeviceKind.CPU_ARM, int8=4000)],
        backend,
        explore=False,
    )

    def model(name: str) -> TaskContract:
        return TaskContract(
            Semantics(gflops=10.0, precision="int8"), Requirements(), task_class=name, model=name
        )

    learned = p.place_one(model("net-a"))
    assert learned.device_id == "cpu"
    p.feedback(learned, latency_s=learned.base_s)  # the CPU is as fast as its roofline
    first = p.place_one(model("net-b"))
    assert first.device_id == "cpu" and first.sources is not None and first.sources[1] == POOLED
    assert p.place_one(model("net-b")).device_id == "gpu"  # not a second task on the pool
    p.feedback(first, latency_s=first.base_s)
    assert p.place_one(model("net-b")).device_id == "cpu"


def test_a_measured_pair_holds_its_device_only_for_the_estimate_left(backend: str) -> None:
    """The estimate's remainder, not the unmeasured 'as long again' (test_placer_cold)."""
    now = [0.0]
    p = placer([dev("gpu", int8=1000)], backend, clock=lambda: now[0], explore=False)
    warm = p.place_one(task(100.0, cls="det"))  # estimated 0.2 s
    p.feedback(warm, latency_s=0.2)
    first = p.place_one(task(100.0, cls="det"))
    p.started(first)
    now[0] = 0.15
    assert p.preview(task(100.0, cls="det")).latency_s == pytest.approx(0.05 + 0.2)
