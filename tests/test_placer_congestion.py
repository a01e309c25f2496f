"""The congestion charge: busy devices pay for their service time (latency-first's default).

Earliest-finish alone sends work to an idle slower device only once the fast queue is
deeper than the slow device's whole service, and among busy devices takes the earlier
finish however much more device time it spends. The charge (rule ``congestion_charge``,
kernel weight ``W_CONGESTION``) adds, per device, charge x its service x min(1, its queue /
(CONGESTION_DEPTH x the task's fastest service)) to the latency term.
"""

from __future__ import annotations

import pytest

from edge_agent.errors import PolicyError
from edge_agent.placement import Device, Placer, Policy
from edge_agent.placement import layout as L
from tests.support.placer_fleet import BACKENDS, dev, placer, signature, task

FAST, SLOW = "fast", "slow"
MS = 1e-3


def _services(p: Placer, ids: tuple[str, ...]) -> dict[str, float]:
    return {x: p.preview(task(10.0), candidates=[x]).service_s for x in ids}


def without_charge(backend: str, fleet: list) -> Placer:
    """Return a latency-first Placer with the congestion charge off (earliest finish)."""
    plain = Policy.from_dict({"template": "latency-first", "rules": {"congestion_charge": 0}})
    return Placer(fleet, plain, backend=backend)  # type: ignore[arg-type]


@BACKENDS
def test_a_busy_fast_device_loses_a_task_to_an_idle_slower_one_sooner(backend: str) -> None:
    fleet = [dev(FAST, int8=1000), dev(SLOW, int8=400)]
    charged, plain = placer(fleet, backend), without_charge(backend, fleet)
    s = _services(charged, (FAST, SLOW))
    assert s[SLOW] == pytest.approx(2.5 * s[FAST], rel=0.01)
    # a fast queue q under 1.5 fast services: the fast device still finishes first, but it
    # is busy and the slow one idle; q is where half the charge outweighs the margin
    charge = Policy.template("latency-first").congestion_charge()
    queue = 1.5 * s[FAST] / (1.0 + charge / (2.0 * L.CONGESTION_DEPTH))
    for p in (charged, plain):
        p.update_live(FAST, queued_s=queue)
    assert charged.preview(task(10.0), candidates=[FAST]).latency_s < s[SLOW]
    assert plain.place_one(task(10.0)).device_id == FAST  # earliest finish
    assert charged.place_one(task(10.0)).device_id == SLOW
    # with nothing queued anywhere nothing is charged: the fastest device, as before
    idle_charged, idle_plain = placer(fleet, backend), without_charge(backend, fleet)
    assert signature(idle_charged.preview(task(10.0))) == signature(idle_plain.preview(task(10.0)))
    assert idle_charged.place_one(task(10.0)).device_id == FAST


@BACKENDS
def test_among_busy_devices_the_one_spending_less_time_wins_a_near_tie(backend: str) -> None:
    fleet = [dev(FAST, int8=1000), dev(SLOW, int8=500)]  # the slow one takes twice as long
    charged, plain = placer(fleet, backend), without_charge(backend, fleet)
    s = _services(charged, (FAST, SLOW))
    # both queues deep (the charge in full): the slow device finishes first by 0.2 fast
    # services, but spends a whole fast service more of its time (the charge's weight of it)
    deep = (L.CONGESTION_DEPTH + 2.0) * s[FAST]
    for p in (charged, plain):
        p.update_live(FAST, queued_s=deep)
        p.update_live(SLOW, queued_s=deep + s[FAST] - s[SLOW] - 0.2 * s[FAST])
    finish = {x: charged.preview(task(10.0), candidates=[x]).latency_s for x in (FAST, SLOW)}
    assert finish[SLOW] < finish[FAST]
    assert plain.place_one(task(10.0)).device_id == SLOW
    assert charged.place_one(task(10.0)).device_id == FAST


@BACKENDS
def test_only_latency_first_carries_the_charge_and_a_rule_sets_it(backend: str) -> None:
    assert Policy.template("latency-first").congestion_charge() == 1.0
    for name in ("balanced", "energy-first", "slo-first", "throughput-first"):
        assert Policy.template(name).congestion_charge() == 0.0
    renamed = Policy.from_dict({"template": "latency-first", "name": "site-a"})
    assert renamed.congestion_charge() == 1.0  # a renamed template keeps it
    assert Policy.blend({"latency-first": 0.5, "balanced": 0.5}).congestion_charge() == 0.5
    assert Policy.from_dict({"weights": {"latency": 1.0}}).congestion_charge() == 0.0
    with pytest.raises(PolicyError, match="congestion_charge"):
        Policy.from_dict({"template": "latency-first", "rules": {"congestion_charge": -1}})
    p = placer([dev(FAST, int8=1000)], backend)
    assert p._ws.weights[L.W_CONGESTION] == 1.0


def test_native_and_twin_agree_on_a_loaded_fleet_where_the_charge_decides() -> None:
    if not _native():
        pytest.skip("compiled kernel not built")
    fleet = loaded_fleet()
    runs: dict[tuple[str, bool], list[tuple[object, ...]]] = {}
    for backend in ("native", "python"):
        for charged in (True, False):
            p = placer(fleet, backend) if charged else without_charge(backend, fleet)
            runs[backend, charged] = [
                signature(p.place_one(task(4.0 + (i % 5) * 3.0, "int8" if i % 3 else "fp32")))
                for i in range(60)
            ]
    assert runs["native", True] == runs["python", True]
    assert runs["native", False] == runs["python", False]
    picks = {c: [s[1] for s in runs["native", c]] for c in (True, False)}
    assert picks[True] != picks[False]  # the charge changed decisions in this sequence


def loaded_fleet() -> list[Device]:
    """Four devices of unequal speed, one without fp32: the charge decides under load."""
    return [
        dev("npu", int8=4000),
        dev("gpu", int8=2500),
        dev("cpu-a", int8=600, fp32=300),
        dev("cpu-b", int8=350, fp32=200),
    ]


def _native() -> bool:
    from edge_agent.placement import native_available

    return native_available()


def test_the_charge_ramps_in_with_the_queue() -> None:
    from edge_agent.placement.reference import _congestion_s

    mins = [0.0] * L.N_OBJECTIVES
    mins[L.OBJ_THROUGHPUT] = 10 * MS
    scr = [0.0] * L.SCR_FIELDS
    scr[L.OBJ_THROUGHPUT] = 25 * MS
    row = [0.0] * L.DEV_FIELDS
    full = L.CONGESTION_DEPTH * 10 * MS  # the queue at which the charge is whole
    for queue, expected in ((0.0, 0.0), (full / 2, 12.5 * MS), (full, 25 * MS), (1.0, 25 * MS)):
        row[L.DEV_QUEUE_S] = queue
        assert _congestion_s(row, scr, mins) == pytest.approx(expected)


def _measured(backend: str, fleet: list[Device], policy: Policy) -> Placer:
    """Return a Placer whose every device has measured the test task's class (bound 1)."""
    p = Placer(fleet, policy, backend=backend)  # type: ignore[arg-type]
    for d in fleet:
        decision = p.place_one(task(10.0), candidates=[d.id])
        p.feedback(decision, latency_s=decision.base_s)
    return p


@BACKENDS
def test_under_deep_queues_a_second_of_device_time_costs_a_second_of_latency(
    backend: str,
) -> None:
    """Latency-first's charge is 1: an earlier finish must save more than the time it spends.

    Both devices deeply queued (the charge in full), both pairs measured: the slow device
    finishes 0.75 fast services sooner but spends a whole fast service more of its time.
    At a charge of 0.5 (before session 12) the earlier finish won; at 1 the device time
    spent weighs as much as the latency saved, so the efficient device keeps the task.
    """
    fleet = [dev(FAST, int8=1000), dev(SLOW, int8=500)]
    half = Policy.from_dict({"template": "latency-first", "rules": {"congestion_charge": 0.5}})
    runs = {
        "template": _measured(backend, fleet, Policy.template("latency-first")),
        "half": _measured(backend, fleet, half),
    }
    s = _services(runs["template"], (FAST, SLOW))
    assert s[SLOW] == pytest.approx(2.0 * s[FAST], rel=0.01)
    deep = (L.CONGESTION_DEPTH + 2.0) * s[FAST]
    for p in runs.values():
        p.update_live(FAST, queued_s=deep)
        p.update_live(SLOW, queued_s=deep + s[FAST] - s[SLOW] - 0.75 * s[FAST])
    p = runs["template"]
    finish = {x: p.preview(task(10.0), candidates=[x]).latency_s for x in (FAST, SLOW)}
    assert finish[SLOW] < finish[FAST]
    assert runs["half"].place_one(task(10.0)).device_id == SLOW
    assert runs["template"].place_one(task(10.0)).device_id == FAST
