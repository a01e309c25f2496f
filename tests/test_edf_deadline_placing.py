"""Deadline-ordered placement: stale waiting work and unmeasured estimates."""

from __future__ import annotations

import pytest

from edge_agent.placement import Placer, Policy
from tests.test_placer_quality import dev, task

SPEED = {"fast": 4000.0}  # int8 GOPS; any other name: 1000


def _placer(backend: str, devices: list[str], clock: list[float] | None = None) -> Placer:
    now = clock if clock is not None else [0.0]
    return Placer(
        [dev(d, int8=SPEED.get(d, 1000.0)) for d in devices],
        Policy.template("slo-first"),
        backend=backend,  # type: ignore[arg-type]
        explore=False,
        clock=lambda: now[0],
        deadline_order=True,
    )


def test_waiting_work_past_its_latest_start_no_longer_counts_ahead(backend: str) -> None:
    """Work still waiting when starting it could no longer meet its deadline runs last."""
    clock = [0.0]
    p = _placer(backend, ["gpu"], clock)
    s = p.preview(task(10.0)).service_s
    first = p.place_one(task(10.0, deadline_s=100 * s))  # due at 100 s, latest start 99 s
    p.place_one(task(10.0, deadline_s=150 * s))  # due at 150 s
    assert not first.late
    probe = task(10.0, deadline_s=200 * s)  # due after both: both run first
    assert p.preview(probe).latency_s == pytest.approx(3 * s, rel=1e-6)
    clock[0] = 99.5 * s  # neither started; the first can no longer meet its deadline
    assert p.preview(probe).latency_s == pytest.approx(2 * s, rel=1e-6)


def test_an_unmeasured_roofline_pair_takes_one_task_until_measured(backend: str) -> None:
    p = _placer(backend, ["gpu", "fast"])
    det = task(10.0, deadline_s=1.0, cls="det")
    first = p.place_one(det)
    assert first.device_ids == ("fast",)
    second = p.place_one(det)  # the fast pair's first result is not in yet
    assert second.device_ids == ("gpu",)
    third = p.place_one(det)
    assert third.placed  # every candidate gated: none is
    for d in (first, second, third):
        p.feedback(d, latency_s=d.service_s)
    # both pairs measured: the fast device takes tasks while others are in flight there
    assert [p.place_one(det).device_ids for _ in range(2)] == [("fast",), ("fast",)]
    other = [p.place_one(task(10.0, deadline_s=1.0, cls="other")) for _ in range(2)]
    assert [d.device_ids for d in other] == [("fast",), ("gpu",)]  # its own, unmeasured


def test_a_gate_keeps_the_callers_candidates(backend: str) -> None:
    p = _placer(backend, ["a", "b", "c"])
    first = p.place_one(task(10.0, deadline_s=1.0), candidates=["a", "b"])
    again = p.place_one(task(10.0, deadline_s=1.0), candidates=["a", "b"])
    assert {*first.device_ids, *again.device_ids} == {"a", "b"}
    assert p.place_one(task(10.0, deadline_s=1.0), candidates=["a", "b"]).device_ids != ("c",)
