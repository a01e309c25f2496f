"""Unmeasured estimates: one task at a time under a deadline policy, doubted while running.

See ``edge_agent.placement.first_flights`` (and ``test_edf_deadline_placing`` for the
roofline gate under slo-first).
"""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.placement import Placer
from edge_agent.placement.explore import POOLED
from edge_agent.resources.vocab import DeviceKind
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract
from tests.test_placer_quality import dev, placer, task


def _model(name: str, **req: Any) -> TaskContract:
    return TaskContract(
        Semantics(gflops=10.0, precision="int8"), Requirements(**req), task_class=name, model=name
    )


def _slo_first(backend: str) -> Placer:
    return placer(
        [dev("gpu", int8=1000), dev("cpu", DeviceKind.CPU_ARM, int8=4000)],
        backend,
        "slo-first",
        explore=False,
        deadline_order=True,
    )


def test_a_pair_started_from_its_devices_pooled_factor_is_gated_too(backend: str) -> None:
    """A factor learned on another model is not this model's measurement."""
    p = _slo_first(backend)
    learned = p.place_one(_model("net-a", deadline_s=1.0))
    assert learned.device_id == "cpu"
    p.feedback(learned, latency_s=learned.base_s)  # the CPU is as fast as its roofline
    first = p.place_one(_model("net-b", deadline_s=1.0))
    assert first.device_id == "cpu" and first.sources is not None and first.sources[1] == POOLED
    assert p.place_one(_model("net-b", deadline_s=1.0)).device_id == "gpu"  # not a second
    p.feedback(first, latency_s=first.base_s)
    assert p.place_one(_model("net-b", deadline_s=1.0)).device_id == "cpu"


def test_an_imported_factor_is_not_gated(backend: str) -> None:
    """A factor from ``import_corrections`` was measured elsewhere: tasks queue on it."""
    p = _slo_first(backend)
    p.import_corrections({"det": {"cpu": 1.0}})
    first = p.place_one(task(10.0, cls="det", deadline_s=1.0))
    second = p.place_one(task(10.0, cls="det", deadline_s=1.0))
    assert first.device_id == second.device_id == "cpu"


@pytest.mark.parametrize("policy", ["latency-first", "balanced"])
def test_a_running_task_on_an_unmeasured_estimate_holds_its_device_as_long_again(
    backend: str, policy: str
) -> None:
    """Past half its estimate, a first task counts what it has run again (not gated here)."""
    now = [0.0]
    p = placer([dev("gpu", int8=1000)], backend, policy, explore=False, clock=lambda: now[0])
    first = p.place_one(task(100.0, cls="det"))  # estimated 0.2 s, the bare roofline
    p.started(first)
    now[0] = 0.05  # well within: the estimate's remainder, 0.15 s
    assert p.preview(task(100.0, cls="det")).latency_s == pytest.approx(0.15 + 0.2)
    now[0] = 0.15  # 0.05 s left by the estimate, which nobody has measured: 0.15 s again
    second = p.place_one(task(100.0, cls="det"))  # latency-first still queues it here
    assert second.device_id == "gpu"
    assert second.latency_s == pytest.approx(0.15 + 0.2)
    p.feedback(first, latency_s=0.2)
    p.started(second)
    now[0] += 0.15  # measured now: its remainder only
    assert p.preview(task(100.0, cls="det")).latency_s == pytest.approx(0.05 + 0.2)


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
