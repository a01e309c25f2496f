"""A device's queue (``JobQueue``) takes jobs in ``edf.pop_next``'s order, or the plain order.

Under a deadline policy the executor's one-slot devices use the rule the Placer's estimate
and the simulator use (``edge_agent.placement.edf``), not a copy of it: these tests run the
queue and that rule side by side on the same jobs and compare what starts when.
"""

from __future__ import annotations

import math
import random
import time

import pytest

from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.fleet import build_fleet
from edge_agent.agent.core.job_queue import JobQueue
from edge_agent.agent.core.waiting import Waiting as Task
from edge_agent.placement import Decision, Placer, Policy, Semantics, TaskContract
from edge_agent.placement.edf import MAX_PASSED, Waiting, pop_next


@pytest.fixture(scope="module")
def decisions() -> dict[int, Decision]:
    """One placed decision per priority (0..2) on an emulated RK3588."""
    fleet = build_fleet("rk3588")
    placer = Placer(fleet.devices, Policy.template("slo-first"))
    return {p: placer.place_one(TaskContract(Semantics(0.001), priority=p)) for p in range(3)}


def _job(task_id: str, decision: Decision, deadline_at: float) -> Job:
    return Job(Task(task_id, decision.task, None, 0.0, deadline_at, "queued"), decision)


class Reference:
    """The edf rule as the simulator applies it: each priority's jobs oldest first."""

    def __init__(self) -> None:
        self.levels: dict[int, list[Waiting]] = {}

    def push(self, job: Job) -> None:
        level = self.levels.setdefault(job.priority, [])
        level.append(Waiting(job.seq, job.deadline_at, job.decision.service_s, item=job))
        level.sort(key=lambda w: w.seq)

    def pop(self, now: float) -> Job:
        top = max(p for p, level in self.levels.items() if level)
        taken = pop_next(self.levels[top], now).item
        assert isinstance(taken, Job)
        return taken


def _deadline(rng: random.Random, now: float) -> float:
    """No deadline, a hopeless one, or a feasible one (far from the edge either way)."""
    kind = rng.random()
    if kind < 0.3:
        return math.inf
    if kind < 0.45:
        return now - rng.uniform(1.0, 100.0)
    return now + rng.uniform(10.0, 1000.0)


def test_under_a_deadline_policy_the_queue_starts_what_pop_next_starts(
    decisions: dict[int, Decision],
) -> None:
    rng = random.Random(15)
    now = time.time()
    queue, reference = JobQueue(), Reference()
    queue.order_by_deadline(True)
    started: list[Job | None] = []
    expected: list[Job] = []
    pushed = 0
    for i in range(1500):
        if rng.random() < 0.55 or not len(queue):
            job = _job(f"t{i}", decisions[rng.choice((0, 0, 0, 1, 2))], _deadline(rng, now))
            queue.push(job)
            reference.push(job)
            pushed += 1
        else:
            started.append(queue.pop(now))
            expected.append(reference.pop(now))
    while len(queue):
        started.append(queue.pop(now))
        expected.append(reference.pop(now))
    assert started == expected and len(started) == pushed and queue.pop(now) is None


def test_no_job_is_passed_by_more_than_the_bound(decisions: dict[int, Decision]) -> None:
    now = time.time()
    queue = JobQueue()
    queue.order_by_deadline(True)
    oldest = _job("oldest", decisions[0], math.inf)  # no deadline: every feasible one passes it
    queue.push(oldest)
    for i in range(MAX_PASSED + 10):
        queue.push(_job(f"due{i}", decisions[0], now + 100.0 + i))
    order = [queue.pop(now) for _ in range(MAX_PASSED + 11)]
    assert order.index(oldest) == MAX_PASSED


def test_switching_the_order_keeps_every_job_and_its_passes(
    decisions: dict[int, Decision],
) -> None:
    now = time.time()
    queue = JobQueue()
    queue.order_by_deadline(True)
    oldest = _job("oldest", decisions[0], math.inf)
    queue.push(oldest)
    for i in range(MAX_PASSED + 5):
        queue.push(_job(f"due{i}", decisions[0], now + 100.0 + i))
    for _ in range(MAX_PASSED - 1):  # the oldest has been passed MAX_PASSED - 1 times
        assert queue.pop(now) is not oldest
    queue.order_by_deadline(False)  # a policy without a deadline weight, then back
    queue.order_by_deadline(True)
    assert len(queue) == 7
    assert queue.pop(now) is not oldest  # the last pass the bound allows
    assert queue.pop(now) is oldest  # its count survived the switch


def test_the_plain_order_is_priority_then_deadline_then_arrival_without_cancelled(
    decisions: dict[int, Decision],
) -> None:
    now = time.time()
    rng = random.Random(3)
    jobs = [
        _job(f"t{i}", decisions[rng.choice((0, 1, 2))], _deadline(rng, now)) for i in range(300)
    ]
    queue = JobQueue()
    for job in jobs:
        queue.push(job)
    for job in jobs[::7]:
        job.cancelled = True
    taken = []
    while (job := queue.pop(now)) is not None:
        taken.append(job)
    live = [j for j in jobs if not j.cancelled]
    assert taken == sorted(live, key=lambda j: (-j.priority, j.deadline_at, j.seq))
    assert len(queue) == 0


def test_a_cancelled_job_is_dropped_from_an_edf_queue_and_can_be_queued_again(
    decisions: dict[int, Decision],
) -> None:
    now = time.time()
    queue = JobQueue()
    queue.order_by_deadline(True)
    a, b, c = (_job(n, decisions[0], now + d) for n, d in (("a", 30.0), ("b", 20.0), ("c", 10.0)))
    for job in (a, b, c):
        queue.push(job)
    c.cancelled = True
    assert queue.pop(now) is b and len(queue) == 1  # c dropped, b is the earliest live
    c.cancelled = False  # resumed (Executor.resume queues it again: older than nothing here)
    queue.push(c)
    assert [queue.pop(now), queue.pop(now)] == [c, a]
