"""The executor starts a device's queued jobs in the deadline policy's order (``edf``)."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from edge_agent.agent.core.executor import Executor, Job, Outcome
from edge_agent.agent.core.fleet import build_fleet
from edge_agent.agent.core.waiting import Waiting
from edge_agent.placement import Decision, Placer, Policy, Semantics, TaskContract

pytestmark = pytest.mark.asyncio


def _job(task_id: str, decision: Decision, deadline_at: float) -> Job:
    return Job(Waiting(task_id, decision.task, None, 0.0, deadline_at, "queued"), decision)


async def _start_order(policy: str) -> list[str]:
    """Queue four jobs behind a held one on a one-slot device; return the start order."""
    fleet = build_fleet("rk3588")
    placer = Placer(fleet.devices, Policy.template(policy))
    decision = placer.place_one(TaskContract(Semantics(0.001)))
    gate = asyncio.get_running_loop().create_future()
    started: list[str] = []
    done: list[str] = []

    class Hooks:  # the executor's JobHooks: the first job holds its slot until the gate
        def job_begins(self, job: Job, brief: bool) -> bool | None:
            return None  # these hooks await: every job takes the executor's task path

        def job_ended(self, job: Job, outcome: Outcome) -> None:
            raise AssertionError("job_begins declines: job_finished is called instead")

        async def job_starting(self, job: Job) -> bool:
            started.append(job.task_id)
            if job.task_id == "running":
                await gate
            return True

        async def job_finished(self, job: Job, outcome: Outcome) -> None:
            done.append(job.task_id)

    executor = Executor(fleet, placer, Hooks(), jitter=0.0)
    executor.start()
    executor.submit(_job("running", decision, math.inf))
    async with asyncio.timeout(5):
        while not started:
            await asyncio.sleep(0.005)
    now = time.time()
    for task_id, deadline_at in (
        ("none", math.inf),
        ("hopeless", now - 1.0),  # already late
        ("loose", now + 100.0),
        ("tight", now + 10.0),
    ):
        executor.submit(_job(task_id, decision, deadline_at))
    gate.set_result(None)
    async with asyncio.timeout(5):
        while len(done) < 5:
            await asyncio.sleep(0.005)
    await executor.stop(1.0)
    return started


async def test_a_deadline_policy_runs_feasible_deadlines_first_then_the_rest_in_order() -> None:
    # tight overtakes loose; the hopeless job overtakes nothing (FIFO after "none")
    assert await _start_order("slo-first") == ["running", "tight", "loose", "none", "hopeless"]


async def test_other_policies_keep_the_queue_order_priority_deadline_arrival() -> None:
    assert await _start_order("latency-first") == [
        "running",
        "hopeless",
        "tight",
        "loose",
        "none",
    ]
