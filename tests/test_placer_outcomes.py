"""A task's outcome (started, feedback, release) leaves the same state on both kernel backends,
with the arithmetic the Placer documents (learning in log space, energy toward the measured
power, queue and memory given back)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edge_agent.placement import Placer, learning, native_available
from edge_agent.resources.vocab import DeviceKind
from tests.support.placer_fleet import BACKENDS, GB, dev, placer, task

needs_native = pytest.mark.skipif(not native_available(), reason="compiled kernel not built")


class Clock:
    """A clock the test moves: started tasks are credited by what it reads."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _fleet() -> list:
    return [
        dev("cpu", DeviceKind.CPU_ARM, int8=200, fp32=100, mem=4 * GB, watts=8),
        dev("gpu", int8=3000, fp32=800, mem=6 * GB, watts=40),
        dev("npu", DeviceKind.NPU, int8=6000, mem=3 * GB, watts=5),
        dev("gpu2", int8=2500, fp32=900, mem=6 * GB, watts=35),
    ]


def _state(p: Placer, classes: list[str]) -> tuple[object, ...]:
    live = tuple(tuple(sorted(p.live(d).items())) for d in p.device_ids)
    corrections = tuple(p.correction(c, d) for c in classes for d in p.device_ids)
    return live, corrections, p.exploration.stats.decisions


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_outcomes_leave_the_same_state_on_both_backends(seed: int) -> None:
    """Random places (gangs too), starts, feedback with and without energy, releases of
    started and unstarted work, clock moves: after every step both backends hold the same
    device rows, corrections and decisions, bit for bit."""
    clocks = {b: Clock() for b in ("native", "python")}
    placers = {b: placer(_fleet(), b, clock=clocks[b]) for b in clocks}
    classes = ["a", "b", "c"]
    contracts = [
        task(1.0 + i, "fp32" if i % 3 == 0 else "int8", cls=classes[i % 3], device_count=gang)
        for i, gang in enumerate([2, 1, 1, 1, 1, 2, 1, 1, 1])
    ]
    held: dict[str, list] = {b: [] for b in placers}
    rng = random.Random(seed)
    for step in range(400):
        op = rng.choice(["place", "place", "start", "feedback", "feedback", "release", "tick"])
        pick, scale, energy = rng.random(), rng.uniform(0.3, 4.0), rng.choice([None, 0.5, 3.0])
        seen = []
        for b, p in placers.items():
            open_ = held[b]
            if op == "place":
                d = p.place_one(contracts[int(pick * len(contracts))])
                seen.append((d.device_ids, d.latency_s, d.probe, d.estimate_source))
                if d.placed:
                    open_.append([d, False])
            elif op == "tick":
                clocks[b].now += scale * 1e-3
            elif open_:
                entry = open_[int(pick * len(open_))]
                d = entry[0]
                if op == "start" and not entry[1]:
                    p.started(d)
                    entry[1] = True
                elif op == "feedback":
                    open_.remove(entry)
                    p.feedback(d, latency_s=d.service_s * scale, energy_j=energy)
                elif op == "release":
                    open_.remove(entry)
                    p.release(d)
        if seen:
            assert seen[0] == seen[1], f"step {step}"
        assert _state(placers["native"], classes) == _state(placers["python"], classes), step
    for b, p in placers.items():  # everything let go: the queues are empty again
        for d, _ in held[b]:
            p.release(d)
        assert all(p.live(d)["queued_s"] == pytest.approx(0.0, abs=1e-9) for d in p.device_ids)


@BACKENDS
def test_feedback_moves_factor_and_power_by_the_documented_arithmetic(backend: str) -> None:
    """The correction moves ``rate`` of the way in log space (the first sample replaces it,
    then at the learning rate); the active power moves at the learning rate toward the
    measured energy / latency, per device of a gang: exactly, not approximately."""
    p = placer([dev("x", int8=2000, watts=20), dev("y", int8=2000, watts=30)], backend)
    lr = 0.3
    for k, (scale, energy) in enumerate([(2.0, 4.0), (0.5, 1.0), (3.0, None)]):
        d = p.place_one(task(4.0, cls="m", device_count=2))
        assert set(d.device_ids) == {"x", "y"}
        before = {i: (p.correction("m", i), p.live(i)["active_power_w"]) for i in d.device_ids}
        latency = d.service_s * scale
        p.feedback(d, latency_s=latency, energy_j=energy)
        rate = 1.0 if k == 0 else max(lr, 1.0 / (k + 1))
        target = latency / d.base_s
        for i in d.device_ids:
            factor, power = before[i]
            assert p.correction("m", i) == learning.toward(factor, target, rate)
            moved = power if energy is None else power + lr * (energy / 2 / latency - power)
            assert p.live(i)["active_power_w"] == float(np.float64(moved))
            assert p.live(i)["queued_s"] == 0.0
            assert p.live(i)["memory_free_bytes"] == 16 * GB


@BACKENDS
def test_release_of_a_started_task_returns_only_what_it_still_held(backend: str) -> None:
    """Started work is credited by its run time and its release gives back only the rest;
    an unstarted task gives back its whole charge; both give back their memory."""
    clock = Clock()
    p = placer([dev("only", int8=1000, mem=8 * GB)], backend, clock=clock)
    first = p.place_one(task(50.0, min_memory_bytes=2 * GB))
    p.feedback(first, latency_s=first.service_s)  # measured: no first-flight doubt
    running = p.place_one(task(50.0, min_memory_bytes=2 * GB))
    waiting = p.place_one(task(20.0, min_memory_bytes=1 * GB))
    charge = running.charges[0]
    assert p.live("only")["memory_free_bytes"] == 5 * GB
    p.started(running)
    clock.now += charge / 4
    assert p.place_one(task(1.0)).placed  # a decision credits the running work first
    queued = p.live("only")["queued_s"]
    p.release(running)
    assert p.live("only")["queued_s"] == pytest.approx(queued - 0.75 * charge)
    assert p.live("only")["memory_free_bytes"] == 7 * GB
    p.release(waiting)
    assert math.isclose(p.live("only")["queued_s"], queued - 0.75 * charge - waiting.charges[0])
    assert p.live("only")["memory_free_bytes"] == 8 * GB
