"""Cold and under-estimated pairs: overrun work in the queue, pooled device factors, probes.

The learning-time part of latency-first's gap to the clairvoyant oracle (issue 13): a task
running far past its estimate, a device whose roofline is off for every model, and probes
of one slow device by every class at once.
"""

from __future__ import annotations

import dataclasses

import pytest

from edge_agent.placement import Decision, Placer, Policy
from edge_agent.placement.explore import POOLED, POOLED_WITHIN, ROOFLINE_WITHIN, Explorer
from edge_agent.placement.running import OVERRUN_EVIDENCE, remaining_s
from edge_agent.resources.device import Device
from edge_agent.resources.vocab import DeviceKind
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract
from tests.test_placer_quality import dev, placer, task


def _model_task(model: str, gflops: float = 10.0) -> TaskContract:
    """A task of the class named after ``model`` (no profile publishes it: roofline)."""
    return TaskContract(
        Semantics(gflops=gflops, precision="int8"), Requirements(), task_class=model, model=model
    )


def _twin(device_id: str) -> Device:
    """An Arm CPU of a (made-up) profile: devices of one profile and unit are identical."""
    return dataclasses.replace(dev(device_id, DeviceKind.CPU_ARM, int8=200), profile="test-board")


def test_remaining_work_is_the_overrun_again_once_past_the_charge() -> None:
    assert remaining_s(1.0, 0.25) == pytest.approx(0.75)
    assert remaining_s(1.0, 1.0) == 0.0
    assert remaining_s(1.0, 3.0) == pytest.approx(2.0)
    # an estimate nobody has measured: at least as long again as it has run
    assert remaining_s(1.0, 0.25, unmeasured=True) == pytest.approx(0.75)
    assert remaining_s(1.0, 0.75, unmeasured=True) == pytest.approx(0.75)
    assert remaining_s(1.0, 3.0, unmeasured=True) == pytest.approx(3.0)


def test_a_task_running_past_its_estimate_still_holds_its_device(backend: str) -> None:
    """Overrun 2x: the queue holds the overrun again and the class's factor rises at once.

    The pair is unmeasured (its roofline): it holds at least as long again as it has run.
    """
    now = [0.0]
    p = placer([dev("gpu", int8=1000)], backend, clock=lambda: now[0])
    first = p.place_one(task(100.0, cls="det"))  # estimated 0.2 s
    p.started(first)
    now[0] = 0.05  # well within the estimate: 0.15 s left
    assert p.preview(task(100.0, cls="det")).latency_s == pytest.approx(0.15 + 0.2)
    now[0] = 0.15  # 0.05 s left by the estimate, but nobody has measured it: 0.15 s again
    assert p.preview(task(100.0, cls="det")).latency_s == pytest.approx(0.15 + 0.2)
    assert p.correction("det", "gpu") == 1.0
    now[0] = 0.2 * (OVERRUN_EVIDENCE + 1)  # 0.6 s: far past 0.2 s, not finished
    d = p.place_one(task(100.0, cls="det"))
    # it has run 0.6 s: that much again counts ahead; the class is now >= 3x its model
    assert p.correction("det", "gpu") == pytest.approx(OVERRUN_EVIDENCE + 1)
    assert d.service_s == pytest.approx(0.6)
    assert d.latency_s == pytest.approx(0.6 + 0.6)
    other = p.preview(task(100.0, cls="other"))  # another class: no evidence about it
    assert other.service_s == pytest.approx(0.2)
    p.feedback(first, latency_s=0.7)  # its measurement settles the factor and the queue
    assert p.correction("det", "gpu") == pytest.approx(3.5)
    p.release(d)
    assert p.live("gpu")["queued_s"] == pytest.approx(0.0, abs=1e-12)


def test_a_new_model_starts_from_the_factor_its_device_showed_on_other_models(
    backend: str,
) -> None:
    """A CPU 10x slower than its roofline on one model: the next model starts there."""
    p = placer([dev("gpu", int8=1000), dev("cpu", DeviceKind.CPU_ARM, int8=2000)], backend)
    first = p.place_one(_model_task("net-a"))
    assert first.device_id == "cpu"  # its roofline says 2x faster than the GPU
    p.feedback(first, latency_s=10.0 * first.base_s)
    assert p.correction("net-a", "cpu") == pytest.approx(10.0)
    second = p.place_one(_model_task("net-b"))  # never measured anywhere
    assert second.device_id == "gpu"  # not sent to learn the same lesson again
    assert p.correction("net-b", "cpu") == pytest.approx(10.0)
    assert second.sources is not None and second.sources[1] == POOLED
    assert p.exploration.optimism_row(p.class_index("net-b"))[1] == POOLED_WITHIN
    plain = p.preview(task(10.0, cls="no-model"))  # a class that names no model: as before
    assert plain.device_id == "cpu" and p.correction("no-model", "cpu") == 1.0
    # the pair's own measurement replaces the pooled start
    own = p.place_one(_model_task("net-b"), candidates=("cpu",))
    p.feedback(own, latency_s=3.0 * own.base_s)
    assert p.correction("net-b", "cpu") == pytest.approx(3.0)
    # and pooling never overwrites a measured pair
    p.feedback(p.place_one(_model_task("net-a"), candidates=("cpu",)), latency_s=first.base_s)
    assert p.correction("net-b", "cpu") == pytest.approx(3.0)


def test_identical_hardware_shares_what_one_unit_measured(backend: str) -> None:
    p = Placer(
        [dev("gpu", int8=1000), _twin("box-1/cpu"), _twin("box-2/cpu")],
        Policy.template("latency-first"),
        backend=backend,  # type: ignore[arg-type]
    )
    d = p.place_one(_model_task("net-a"), candidates=("box-1/cpu",))
    p.feedback(d, latency_s=8.0 * d.base_s)
    p.place_one(_model_task("net-b"))  # registers the class
    assert p.correction("net-b", "box-2/cpu") == pytest.approx(8.0)  # the twin's figure
    assert p.correction("net-b", "gpu") == 1.0  # not the same hardware


def test_a_device_runs_one_probe_at_a_time_whatever_its_class() -> None:
    ex = Explorer(2)
    for _ in range(2):
        ex.add_class()
    key = object()
    ex.probed(0, 1, key, 0.01, hopeless=False)
    assert ex.optimism_row(1)[1] == 1.0  # class 1 waits for class 0's probe of device 1
    assert ex.optimism_row(1)[0] == ROOFLINE_WITHIN
    ex.finished(key, 0.5)
    assert ex.optimism_row(1)[1] == ROOFLINE_WITHIN


def test_a_class_whose_untried_devices_are_all_being_measured_defers(backend: str) -> None:
    """Two classes, one untried CPU: one class probes it, the other waits for that probe."""
    # exploration alone: with latency-first's congestion charge the GPU's growing queue
    # sends the waiting class to the idle CPU in the usual pass before it would probe it
    plain = Policy.from_dict({"template": "latency-first", "rules": {"congestion_charge": 0}})
    fleet = [dev("gpu", int8=1000), dev("cpu", DeviceKind.CPU_ARM, int8=200)]
    p = Placer(fleet, plain, backend=backend)  # type: ignore[arg-type]
    probes: list[tuple[str, Decision]] = []
    for _ in range(64):
        for cls in ("a", "b"):
            d = p.place_one(task(10.0, cls=cls))
            if d.device_id == "gpu":
                p.feedback(d, latency_s=d.base_s)  # the GPU is measured at once
            else:
                assert d.probe  # the CPU's probe stays in flight
                probes.append((cls, d))
    assert len(probes) == 1  # one class probed the CPU; the other did not probe it again
    assert p.exploration.stats.deferred >= 1  # the other class waited, and waits on
    cls, probe = probes[0]
    p.feedback(probe, latency_s=probe.base_s)
    other = "b" if cls == "a" else "a"
    later = [p.place_one(task(10.0, cls=other)) for _ in range(64)]
    assert any(d.probe and d.device_id == "cpu" for d in later)  # then it probes the CPU
