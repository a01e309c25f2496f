"""What an operator reads of a device's queue is as of now, not as of the last placement.

``Placer.live()["queued_s"]`` (the agent's /v1/devices, the hub heartbeat's device entries,
the mesh summary) is computed at read time from the running-work accounting the next
placement uses; the read writes nothing, and writing the value read back changes nothing.
"""

from __future__ import annotations

import pytest

from edge_agent.agent.core.fleet import Fleet
from edge_agent.agent.hub.devices import DeviceReporter
from edge_agent.placement import Decision, Placer
from tests.support.placer_fleet import BACKENDS, GB, dev, placer, task


class Clock:
    """A clock the test moves: started tasks are credited by what it reads."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _one_device(backend: str, clock: Clock) -> tuple[Placer, Decision, float]:
    """A one-device Placer running a measured task (no first-flight doubt); its charge."""
    p = placer([dev("only", int8=1000, mem=8 * GB)], backend, clock=clock)
    first = p.place_one(task(50.0))
    p.feedback(first, latency_s=first.service_s)
    running = p.place_one(task(50.0))
    p.started(running)
    return p, running, running.charges[0]


def _heartbeat_queued(p: Placer) -> float | None:
    """The device's queued seconds as the hub heartbeat reports them."""
    reporter = DeviceReporter(Fleet(p.devices, "test"), p, lambda _: 0.0)
    (entry,) = reporter.entries()
    queued = entry["queued_s"]
    assert queued is None or isinstance(queued, float)
    return queued


@BACKENDS
def test_a_running_tasks_queue_falls_between_placements(backend: str) -> None:
    """Time passing with no placement: the queue read falls by the run time, the next
    placement sees what was read, and the read itself credited nothing."""
    clock = Clock()
    p, _, charge = _one_device(backend, clock)
    at_start = p.live("only")["queued_s"]
    assert at_start == pytest.approx(charge)
    clock.now += charge / 4
    read = p.live("only")["queued_s"]
    assert read == pytest.approx(0.75 * charge)
    assert _heartbeat_queued(p) == pytest.approx(0.75 * charge)
    assert p.live("only")["queued_s"] == read  # reading twice: the same, nothing credited
    p.preview(task(1.0))  # credits the running work (what a placement does first)
    assert p.live("only")["queued_s"] == pytest.approx(read)


@BACKENDS
def test_an_overrunning_tasks_queue_grows_between_placements(backend: str) -> None:
    """Past its charge a task holds as long again as it has overrun: the read grows."""
    clock = Clock()
    p, _, charge = _one_device(backend, clock)
    clock.now += charge  # at its estimate: nothing left
    assert p.live("only")["queued_s"] == pytest.approx(0.0, abs=1e-9)
    clock.now += charge / 2
    assert p.live("only")["queued_s"] == pytest.approx(charge / 2)
    clock.now += charge / 2
    assert p.live("only")["queued_s"] == pytest.approx(charge)
    assert _heartbeat_queued(p) == pytest.approx(charge)


@BACKENDS
def test_writing_back_the_queue_read_changes_nothing(backend: str) -> None:
    """``update_live(d, queued_s=live(d)["queued_s"])`` (the agent's preemption snapshot and
    restore) leaves the queue the next placement sees as it was: no credit twice."""
    clock = Clock()
    p, _, charge = _one_device(backend, clock)
    clock.now += charge / 4
    read = p.live("only")["queued_s"]
    p.update_live("only", queued_s=read)
    p.update_live_many(queued_s=[read])
    p.preview(task(1.0))
    assert p.live("only")["queued_s"] == pytest.approx(read)
    assert p.live("only")["queued_s"] == pytest.approx(0.75 * charge)


@BACKENDS
def test_every_devices_live_state_in_one_read_is_each_devices_own(backend: str) -> None:
    """``lives()`` (the status page, the heartbeat, the mesh summary, preemption's snapshot:
    one pass over the running work for all devices) reads what ``live`` reads per device,
    running work credited to now, in the devices' order; it writes nothing."""
    clock = Clock()
    p = placer([dev(n, int8=1000, mem=8 * GB) for n in ("a", "b", "c")], backend, clock=clock)
    for _ in range(4):
        d = p.place_one(task(50.0))
        p.feedback(d, latency_s=d.service_s)
    running = [p.place_one(task(50.0)) for _ in range(5)]
    for d in running[:3]:
        p.started(d)
    clock.now += running[0].charges[0] / 3
    every = p.lives()
    assert list(every) == list(p.device_ids)
    assert every == {d: p.live(d) for d in p.device_ids}
    assert sum(v["queued_s"] for v in every.values()) < sum(sum(d.charges) for d in running)
    assert p.lives() == every  # nothing credited by reading
