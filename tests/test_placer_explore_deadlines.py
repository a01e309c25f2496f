"""Exploration under deadlines: it never costs deadline work its deadline, and still finds.

A small discrete-event run through the public Placer API: tasks arrive (Poisson, seeded),
each device serves its queue in order, the true service is the roofline times a hidden
factor with 10% noise, and ``feedback`` comes at each completion.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from edge_agent.placement import Decision, Placer, Policy
from edge_agent.placement.explore import EXPLORE_EVERY, HOPELESS_EVERY
from edge_agent.resources.vocab import DeviceKind
from tests.test_placer_quality import dev, task

GFLOP = 10.0  # on the rooflines: 20 ms on the GPU, 40 ms on gpu2, 100 ms on a 200 GOPS CPU


def _fleet(
    backend: str, *, explore: bool, cpus: int = 1, cpu_gops: float = 200.0, gpu2: bool = False
) -> Placer:
    devices = [dev("gpu", int8=1000)] + [
        dev(f"cpu{i}", DeviceKind.CPU_ARM, int8=cpu_gops) for i in range(cpus)
    ]
    if gpu2:  # a second, slower GPU whose factor is known (imported): never explored
        devices.append(dev("gpu2", int8=500))
    # ``_run``'s devices run first-come-first-served: the Placer estimates that order
    p = Placer(
        devices,
        Policy.template("slo-first"),
        backend=backend,  # type: ignore[arg-type]
        explore=explore,
        deadline_order=False,
    )
    if gpu2:
        p.import_corrections({"det": {"gpu2": 1.0}})
    return p


def _run(
    p: Placer,
    *,
    n: int,
    rate: float,
    deadlines: tuple[float, ...],
    truth: dict[str, float],
    seed: int,
) -> float:
    """Place ``n`` tasks arriving at ``rate`` per second; return the share meeting its deadline.

    ``deadlines``: drawn per task (seconds); ``truth``: device -> true / roofline factor.
    """
    rng = np.random.default_rng(seed)
    free = dict.fromkeys(p.device_ids, 0.0)
    running: list[tuple[float, int, Decision, float]] = []
    now, met = 0.0, 0
    for i in range(n):
        now += float(rng.exponential(1.0 / rate))
        while running and running[0][0] <= now:
            _, _, done, service = heapq.heappop(running)
            p.feedback(done, latency_s=service)
        deadline = deadlines[int(rng.integers(len(deadlines)))]
        d = p.place_one(task(GFLOP, cls="det", deadline_s=deadline))
        assert d.placed
        device = d.device_ids[0]
        service = d.base_s * truth[device] * math.exp(0.1 * float(rng.standard_normal()))
        finish = max(now, free[device]) + service
        free[device] = finish
        heapq.heappush(running, (finish, i, d, service))
        met += finish - now <= deadline
    return met / n


@pytest.mark.parametrize(("seed", "rate"), [(0, 40.0), (1, 40.0), (2, 55.0), (3, 55.0)])
def test_with_nothing_to_find_exploration_costs_at_most_a_point(
    backend: str, seed: int, rate: float
) -> None:
    """Every roofline is right (three untried CPUs at 400 ms, the GPU at 20 ms; 80% and 110%
    of the GPU's rate; deadlines 3x, 5x and 30x the GPU's time): the probes (1 to 3) cost
    at most one point of deadlines met against the same run without exploration."""
    truth = {"gpu": 1.0, "cpu0": 1.0, "cpu1": 1.0, "cpu2": 1.0}
    kw = {"n": 600, "rate": rate, "deadlines": (0.06, 0.1, 0.6), "truth": truth, "seed": seed}
    with_probes = _fleet(backend, explore=True, cpus=3, cpu_gops=50.0)
    explored = _run(with_probes, **kw)  # type: ignore[arg-type]
    plain = _run(_fleet(backend, explore=False, cpus=3, cpu_gops=50.0), **kw)  # type: ignore[arg-type]
    assert explored >= plain - 0.01
    assert 1 <= with_probes.exploration.stats.probes <= 3  # tried, each pair at most once


@pytest.mark.parametrize("seed", range(3))
def test_a_fast_untried_device_is_found_by_deadline_work(backend: str, seed: int) -> None:
    """The CPU is truly 2x faster than the GPU (10 ms), its roofline says 400 ms: every
    deadline (30 ms) is missed by that estimate, and with a second, known GPU the usual
    choice reaches it only once queues are long. At 1.9x what the GPUs serve, tasks no
    device can finish in time come; they carry the probe (the optimistic pass: 50 ms) and
    find it early, so many more deadlines are met than without exploration."""
    truth = {"gpu": 1.0, "gpu2": 1.0, "cpu0": 0.025}
    kw = {"n": 300, "rate": 140.0, "deadlines": (0.03,), "truth": truth, "seed": seed}
    p = _fleet(backend, explore=True, cpu_gops=50.0, gpu2=True)
    explored = _run(p, **kw)  # type: ignore[arg-type]
    plain = _run(_fleet(backend, explore=False, cpu_gops=50.0, gpu2=True), **kw)  # type: ignore[arg-type]
    stats = p.exploration.stats
    # carried by hopeless tasks only; each untried pair (the GPU's, the CPU's) at most once
    assert 1 <= stats.probes == stats.hopeless_probes <= 2
    assert p.correction("det", "cpu0") == pytest.approx(0.025, rel=0.35)  # measured
    assert explored >= plain + 0.2, (explored, plain)


def test_a_probe_that_would_miss_a_deadline_the_usual_choice_meets_is_deferred(
    backend: str,
) -> None:
    """Idle fleet, deadline 1.5x the GPU's time: the CPU's roofline (5x) would miss it, so no
    probe is made; the due probe is deferred each time, and its interval does not grow."""
    p = _fleet(backend, explore=True)
    n = 10 * EXPLORE_EVERY
    for _ in range(n):
        d = p.place_one(task(GFLOP, cls="det", deadline_s=0.03))
        assert d.device_ids == ("gpu",) and not d.late and not d.probe
        p.feedback(d, latency_s=d.base_s)
    stats = p.exploration.stats
    assert stats.probes == 0
    assert stats.deferred == stats.optimistic_passes == n // EXPLORE_EVERY


def test_without_a_deadline_the_same_probe_is_made(backend: str) -> None:
    p = _fleet(backend, explore=True)
    chosen = []
    for _ in range(2 * EXPLORE_EVERY):
        d = p.place_one(task(GFLOP, cls="det"))
        chosen.append(d.device_ids[0])
        p.feedback(d, latency_s=d.base_s * (0.1 if d.device_ids[0] == "cpu0" else 1.0))
    assert p.exploration.stats.probes == 1 and "cpu0" in chosen[:EXPLORE_EVERY]


def test_explore_false_never_probes(backend: str) -> None:
    """The per-Placer switch: the CPU is truly faster, but never tried, and no extra passes."""
    p = _fleet(backend, explore=False)
    for _ in range(10 * EXPLORE_EVERY):
        d = p.place_one(task(GFLOP, cls="det"))
        assert d.device_ids == ("gpu",) and not d.probe
        p.feedback(d, latency_s=d.base_s)
    stats = p.exploration.stats
    assert stats.probes == stats.optimistic_passes == 0
    assert stats.decisions == 10 * EXPLORE_EVERY


@pytest.mark.parametrize("drop", [False, True])
def test_a_hopeless_task_in_a_batch_does_not_block_a_feasible_one(backend: str, drop: bool) -> None:
    """One GPU (20 ms a task). The hopeless task (5 ms deadline) comes first by deadline,
    but the feasible one (25 ms) is decided first: it meets its deadline; the hopeless one
    is placed after it on the earliest finish, flagged late (or dropped, drop_if_late)."""
    p = Placer([dev("gpu", int8=1000)], Policy.template("slo-first"), backend=backend)  # type: ignore[arg-type]
    hopeless = task(GFLOP, cls="det", deadline_s=0.005, drop_if_late=drop)
    feasible = task(GFLOP, cls="det", deadline_s=0.025)
    first, second = p.place([hopeless, feasible])
    assert second.placed and not second.late
    assert second.latency_s == pytest.approx(0.02, rel=0.01)  # nothing queued before it
    if drop:
        assert not first.placed
    else:
        assert first.placed and first.late
        assert first.latency_s == pytest.approx(0.04, rel=0.01)  # after the feasible one
    assert p.live("gpu")["queued_s"] == pytest.approx(0.02 if drop else 0.04, rel=0.01)


def test_a_batch_of_feasible_tasks_keeps_its_deadline_order(backend: str) -> None:
    """Two tasks that fit stay in deadline order (a at 20 ms, b at 40 ms); the hopeless one
    (1 ms), first by deadline, goes last (60 ms), so neither of the others is late."""
    a, b, c = (task(GFLOP, cls="det", deadline_s=d) for d in (0.03, 0.05, 0.001))
    p = Placer([dev("gpu", int8=1000)], Policy.template("slo-first"), backend=backend)  # type: ignore[arg-type]
    out = p.place([b, a, c])
    assert [round(d.latency_s, 3) for d in out] == [0.04, 0.02, 0.06]
    assert [d.late for d in out] == [False, False, True]


def test_a_congested_class_explores_every_few_decisions(backend: str) -> None:
    """No deadlines. While the GPU is idle the CPU (400 ms roofline) is out of reach and the
    class backs off (an optimistic pass in 16, 32, 64, ... decisions). Once the GPU has
    200 ms queued, each decision waits mostly in the queue (congested; the usual choice is
    still the GPU, 220 ms < 400 ms): the probe is due within HOPELESS_EVERY decisions
    instead of the backed-off interval, and finds the CPU."""
    p = _fleet(backend, explore=True, cpu_gops=50.0)
    for _ in range(240):  # passes at 16, 48, 112, 240: the interval is now 256
        d = p.place_one(task(GFLOP, cls="det"))
        assert d.device_ids == ("gpu",)
        p.feedback(d, latency_s=d.base_s)
    assert p.exploration.stats.optimistic_passes == 4 and p.exploration.stats.probes == 0
    p.update_live("gpu", queued_s=0.2)
    decided = [p.place_one(task(GFLOP, cls="det")) for _ in range(HOPELESS_EVERY + 1)]
    assert [d.device_ids[0] for d in decided if d.probe] == ["cpu0"]
    assert all(d.device_ids == ("gpu",) for d in decided if not d.probe)
    assert p.exploration.stats.probes == 1
