"""The congestion charge at an unmeasured pair's pessimistic bound (latency-first).

A (class, device) estimate nobody has measured yet (the roofline, pooled or calibrated
guesses, a published figure at another precision) may be as far optimistic as exploration
thinks it may be pessimistic (``explore.optimism``). While such a pair is unmeasured the
congestion charge counts its service at that bound (``Explorer.bound_rows``, the kernel's
``hm_call.bound_rows``): a busy device whose estimate is a guess takes more work only when
it is worth that risk. Its first measurement (or an imported factor) ends it; a probe in
flight does not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_agent.errors import KernelError
from edge_agent.placement import Placer, Policy
from edge_agent.placement import layout as L
from edge_agent.placement.explore import ROOFLINE_WITHIN
from tests.support.placer_fleet import BACKENDS, dev, placer, signature, task
from tests.test_placer_congestion import loaded_fleet, without_charge

KNOWN, GUESS = "known", "guess"


def _queue(p: Placer, service: float, *, guess_behind: float) -> None:
    """Both queues deep (the charge in full); the guessed device's shorter by ``guess_behind``
    services, so that it finishes first."""
    deep = (L.CONGESTION_DEPTH + 12.0) * service
    p.update_live(KNOWN, queued_s=deep)
    p.update_live(GUESS, queued_s=deep - guess_behind * service)


@BACKENDS
def test_a_busy_unmeasured_device_pays_its_charge_at_the_bound_until_measured(
    backend: str,
) -> None:
    fleet = [dev(KNOWN, int8=1000), dev(GUESS, int8=1000)]  # the same estimate on paper
    charged, plain = placer(fleet, backend), without_charge(backend, fleet)
    for p in (charged, plain):
        p.import_corrections({"default": {KNOWN: 1.0}})  # measured elsewhere: its bound is 1
    bounds = charged.exploration.bound_rows[0]
    assert bounds.tolist() == [1.0, ROOFLINE_WITHIN]
    service = charged.preview(task(10.0), candidates=[KNOWN]).service_s
    # the guess finishes one service earlier; its charge at the bound is
    # charge x (8 - 1) services more than the known device's (7 at latency-first's 1)
    extra = Policy.template("latency-first").congestion_charge() * (ROOFLINE_WITHIN - 1.0)
    assert extra > 1.0
    for p in (charged, plain):
        _queue(p, service, guess_behind=1.0)
    assert plain.preview(task(10.0)).device_id == GUESS  # earliest finish
    assert charged.preview(task(10.0)).device_id == KNOWN
    # a finish earlier by more than the bound's extra charge still wins
    _queue(charged, service, guess_behind=extra + 0.5)
    assert charged.preview(task(10.0)).device_id == GUESS
    # its first measurement (as estimated) ends the bound: the near tie goes to the
    # earlier finish again, the charges being equal
    first = charged.place_one(task(10.0), candidates=[GUESS])
    charged.feedback(first, latency_s=first.service_s)
    assert bounds.tolist() == [1.0, 1.0]
    _queue(charged, service, guess_behind=1.0)
    assert charged.preview(task(10.0)).device_id == GUESS


@BACKENDS
def test_idle_devices_and_policies_without_the_charge_pay_nothing_for_the_bound(
    backend: str,
) -> None:
    fleet = [dev(KNOWN, int8=1000), dev(GUESS, int8=900)]
    for policy in ("latency-first", "balanced", "slo-first"):
        p = placer(fleet, backend, policy)
        p.import_corrections({"default": {KNOWN: 1.0}})
        unbound = placer(fleet, backend, policy)
        unbound.import_corrections({"default": {KNOWN: 1.0, GUESS: 1.0}})
        # idle (nothing queued anywhere): the bound changes no score
        assert signature(p.preview(task(10.0))) == signature(unbound.preview(task(10.0)))
        if policy != "latency-first":  # no charge: queued or not, the bound is never used
            for q in (p, unbound):
                q.update_live_many(queued_s=[0.2, 0.1])
            assert signature(p.preview(task(10.0))) == signature(unbound.preview(task(10.0)))


def test_a_probe_keeps_the_bound_a_measurement_or_an_import_ends_it() -> None:
    p = placer([dev(KNOWN, int8=1000), dev(GUESS, int8=1000)], "python")
    explorer = p.exploration
    assert explorer.bound_rows[0].tolist() == [ROOFLINE_WITHIN, ROOFLINE_WITHIN]
    key = object()
    explorer.probed(0, 1, key, 0.01, hopeless=False)  # a probe in flight on GUESS
    assert explorer.divisors(0)[1] == 1.0  # not explored again...
    assert explorer.bound_rows[0, 1] == ROOFLINE_WITHIN  # ...but not measured yet
    p.import_corrections({"default": {GUESS: 1.2}})
    assert explorer.bound_rows[0].tolist() == [ROOFLINE_WITHIN, 1.0]
    # a class created later starts unmeasured; its rows grow with the book
    for i in range(20):
        p.class_index(f"c{i}")
    assert explorer.bound_rows.shape[0] >= 21
    assert explorer.bound_rows[20].tolist() == [ROOFLINE_WITHIN, ROOFLINE_WITHIN]
    assert explorer.bound_rows[0].tolist() == [ROOFLINE_WITHIN, 1.0]


@BACKENDS
@pytest.mark.parametrize("bad", [0.5, math.nan, math.inf])
def test_a_bound_under_one_or_not_finite_is_refused_naming_its_entry(
    backend: str, bad: float
) -> None:
    p = placer([dev(KNOWN, int8=1000), dev(GUESS, int8=1000)], backend)
    p.update_live(KNOWN, queued_s=0.1)
    before = p._ws.devices.copy()
    p.exploration.bound_rows[0, 1] = bad
    with pytest.raises(KernelError, match=r"row 1\)"):  # class 0 x 2 devices + device 1
        p.place_one(task(10.0))
    assert np.array_equal(p._ws.devices, before)  # nothing committed


def test_native_and_twin_agree_where_the_bounds_decide() -> None:
    from edge_agent.placement import native_available

    if not native_available():
        pytest.skip("compiled kernel not built")
    fleet = loaded_fleet()
    slower = {"npu": 1.6, "gpu": 1.0, "cpu-a": 0.8, "cpu-b": 1.3}  # true / estimated
    runs: dict[tuple[str, bool], list[tuple[object, ...]]] = {}
    bounds: dict[tuple[str, bool], list[float]] = {}
    for backend in ("native", "python"):
        for bound in (True, False):
            p = placer(fleet, backend, explore=False)
            if not bound:
                p._call.bind_bounds(None)  # the charge of before: every factor 1
            inflight, seen = [], []
            for i in range(90):
                d = p.place_one(task(4.0 + (i % 5) * 3.0, "int8" if i % 3 else "fp32"))
                seen.append(signature(d))
                inflight.append(d)
                if i % 4 == 3:  # a few finish: their pairs are measured
                    done = inflight.pop(0)
                    p.feedback(done, latency_s=done.service_s * slower[done.device_id])
                if i == 8:  # some pairs measured, others still at their bound
                    bounds[backend, bound] = p.exploration.bound_rows[0].tolist()
            runs[backend, bound] = seen
    assert runs["native", True] == runs["python", True]
    assert runs["native", False] == runs["python", False]
    assert bounds["native", True] == bounds["python", True]
    assert 1.0 in bounds["native", True] and ROOFLINE_WITHIN in bounds["native", True]
    picks = {b: [s[1] for s in runs["native", b]] for b in (True, False)}
    assert picks[True] != picks[False]  # the bounds changed decisions in this sequence
