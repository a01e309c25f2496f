"""Earliest-deadline-first order of a device's waiting work, and the Placer's estimate of it."""

from __future__ import annotations

import math

import pytest

from edge_agent.placement import Placer, Policy
from edge_agent.placement.edf import (
    HARD_PASSED_FACTOR,
    MAX_PASSED,
    Waiting,
    next_index,
    pop_next,
)
from tests.test_placer_quality import dev, task


def test_a_tight_deadline_overtakes_queued_slack_and_no_deadline_work() -> None:
    waiting = [
        Waiting(0, math.inf, 0.01),  # no deadline, oldest
        Waiting(1, 5.0, 0.01),  # slack
        Waiting(2, 0.05, 0.01),  # tight, youngest
    ]
    assert [pop_next(waiting, 0.0).seq for _ in range(3)] == [2, 1, 0]


def test_a_hopeless_task_does_not_overtake_a_feasible_one() -> None:
    waiting = [Waiting(0, 0.5, 1.0), Waiting(1, 2.0, 1.0)]  # 0 cannot finish by 0.5
    assert next_index(waiting, 0.0) == 1
    # with nothing feasible left, the oldest goes first (FIFO among the rest)
    assert next_index([Waiting(0, math.inf, 1.0), Waiting(1, 0.5, 1.0)], 0.0) == 0


def test_input_not_yet_arrived_counts_against_feasibility() -> None:
    assert not Waiting(0, 1.0, 0.5, ready=0.6).feasible(0.0)
    assert Waiting(0, 1.0, 0.5, ready=0.4).feasible(0.0)


def test_no_task_is_passed_by_more_than_the_bound() -> None:
    """A no-deadline task under a stream of tight ones with room for it: after MAX_PASSED."""
    waiting = [Waiting(0, math.inf, 0.01)]
    seq = 1
    started: list[int] = []
    while 0 not in started:
        waiting.append(Waiting(seq, 0.05, 0.01))
        seq += 1
        started.append(pop_next(waiting, 0.0).seq)
    assert len(started) == MAX_PASSED + 1
    assert started[:-1] == list(range(1, MAX_PASSED + 1))


def test_a_starved_task_waits_on_while_going_first_would_cost_a_feasible_deadline() -> None:
    """Past MAX_PASSED the oldest yields to a feasible task it would make late, not beyond."""
    starved = Waiting(0, 0.5, 1.0, passed=MAX_PASSED)  # hopeless, passed to the bound
    just_in_time = Waiting(1, 1.5, 1.0)  # feasible now, late after 1 s of the starved one
    roomy = Waiting(2, 3.0, 1.0)  # feasible now and after the starved one
    assert next_index([starved, just_in_time], 0.0) == 1
    assert next_index([starved, roomy], 0.0) == 0
    # nor while it would make a later one of the deadlines that can all be met late
    second = Waiting(3, 2.4, 1.0)  # met after the first; late after the starved one too
    assert next_index([starved, Waiting(2, 2.0, 0.5), second], 0.0) == 1  # 2 is met either way
    assert next_index([starved, Waiting(2, 2.0, 0.5), Waiting(3, 3.0, 1.0)], 0.0) == 0
    # at the hard bound the oldest goes first even at that cost
    starved.passed = HARD_PASSED_FACTOR * MAX_PASSED
    assert next_index([starved, just_in_time], 0.0) == 0


def test_no_task_is_passed_by_more_than_the_hard_bound() -> None:
    """Under a stream that its run would always make late, the oldest still starts."""
    waiting = [Waiting(0, math.inf, 0.01)]
    seq = 1
    started: list[int] = []
    while 0 not in started:
        waiting.append(Waiting(seq, 0.015, 0.01))  # feasible alone, late behind the oldest
        seq += 1
        started.append(pop_next(waiting, 0.0).seq)
    assert len(started) == HARD_PASSED_FACTOR * MAX_PASSED + 1
    assert started[:-1] == list(range(1, HARD_PASSED_FACTOR * MAX_PASSED + 1))


def _placer(backend: str, deadline_order: bool) -> Placer:
    return Placer(
        [dev("gpu", int8=1000)],
        Policy.template("slo-first"),
        backend=backend,  # type: ignore[arg-type]
        explore=False,
        clock=lambda: 0.0,
        deadline_order=deadline_order,
    )


@pytest.mark.parametrize("deadline_order", [True, False])
def test_the_edf_estimate_counts_only_earlier_deadline_work(
    backend: str, deadline_order: bool
) -> None:
    p = _placer(backend, deadline_order)
    loose = p.place_one(task(10.0, deadline_s=10.0))
    service = loose.service_s
    assert loose.latency_s == pytest.approx(service, rel=1e-6)
    tight = p.preview(task(10.0, deadline_s=0.1))
    later = p.preview(task(10.0, deadline_s=20.0))
    none = p.preview(task(10.0))
    # the loose task waits behind the tight one under EDF: only FIFO counts it ahead
    ahead = 0.0 if deadline_order else service
    assert tight.latency_s == pytest.approx(ahead + service, rel=1e-6)
    assert later.latency_s == pytest.approx(2 * service, rel=1e-6)  # due later: behind it
    assert none.latency_s == pytest.approx(2 * service, rel=1e-6)  # no deadline: behind all


def test_the_edf_estimate_forgets_started_and_finished_work(backend: str) -> None:
    p = _placer(backend, True)
    loose = p.place_one(task(10.0, deadline_s=10.0))
    p.started(loose, now=0.0)  # running: never overtaken, so it is ahead of the tight task
    tight = p.preview(task(10.0, deadline_s=0.1))
    assert tight.latency_s == pytest.approx(2 * loose.service_s, rel=1e-6)
    p.feedback(loose, latency_s=loose.service_s)
    assert not p._waiting  # nothing left waiting
    assert p.preview(task(10.0, deadline_s=0.1)).latency_s == pytest.approx(loose.service_s)


def test_work_without_the_slack_to_let_a_task_pass_still_counts_ahead(backend: str) -> None:
    p = _placer(backend, True)
    service = p.preview(task(10.0)).service_s
    p.place_one(task(10.0, deadline_s=1.5 * service))  # due later, but only 0.5x slack
    tight = p.preview(task(10.0, deadline_s=1.2 * service))
    assert tight.latency_s == pytest.approx(2 * service, rel=1e-6)


def test_work_estimated_hopeless_does_not_count_ahead_of_a_feasible_task(backend: str) -> None:
    p = _placer(backend, True)
    service = p.preview(task(10.0)).service_s
    lost = p.place_one(task(10.0, deadline_s=0.5 * service))  # cannot finish in time
    assert lost.late
    tight = p.preview(task(10.0, deadline_s=2.0 * service))  # due later, but feasible
    assert tight.latency_s == pytest.approx(service, rel=1e-6)


def test_a_long_task_that_would_make_later_ones_late_is_set_aside() -> None:
    """Most deadlines met (Moore-Hodgson), not plain earliest deadline first."""
    long_one = Waiting(0, 0.5, 0.45)  # due first; run first, the two after it end late
    a, b = Waiting(1, 0.52, 0.1), Waiting(2, 0.6, 0.1)
    waiting = [long_one, a, b]
    assert next_index(waiting, 0.0) == 1  # earliest deadline first would start 0: 1 met
    order = [pop_next(waiting, 0.0).seq, pop_next(waiting, 0.1).seq]
    assert order == [1, 2]  # two met; the long one, now hopeless, runs last
    # with room for all three, plain deadline order stands
    assert next_index([Waiting(0, 0.5, 0.45), Waiting(1, 0.6, 0.1)], 0.0) == 0
