"""The simulator's earliest-deadline-first devices (a deadline policy's agent)."""

from __future__ import annotations

import itertools

import pytest

from cloud_hub.simulator.engine import FleetState, Job, simulate
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.slo_agents import SloAgentChooser
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, Scenario, published_scenario
from edge_agent.placement import Policy


class _Recorder(SloAgentChooser):
    """slo-first recording each job's true start and finish on its device."""

    jobs: list[Job]

    def finished(self, job: Job, now: float) -> None:
        self.jobs.append(job)
        super().finished(job, now)


def _run(queue_order: str, sc: Scenario | None = None) -> tuple[float, list[Job]]:
    sc = sc or published_scenario(0.8, 2000, 1)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    agent = _Recorder(
        sc.fleet,
        Policy.template("slo-first"),
        deadline_aware=True,
        candidates=sc.feasible if sc.restricted else None,
        queue_order=queue_order,
    )
    agent.jobs = []
    out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), agent)
    assert -2 not in out.device  # every task ended
    met = deadline_summary(sc.tasks, out, sc.classes, list(CLASSES))["attainment"]
    return float(met), agent.jobs


def test_slo_first_with_edf_devices_meets_more_deadlines_than_fifo() -> None:
    fifo, _ = _run("fifo")
    edf, jobs = _run("edf")
    assert edf >= fifo + 0.03, (edf, fifo)
    # one task at a time per device, none started before it arrived
    by_dev: dict[int, list[Job]] = {}
    for job in jobs:
        assert job.start >= job.task.t
        by_dev.setdefault(job.dev, []).append(job)
    for runs in by_dev.values():
        runs.sort(key=lambda j: j.start)
        assert all(a.finish <= b.start + 1e-12 for a, b in itertools.pairwise(runs))
    # and the order really changed: some task started before an older one on its device
    assert any(b.task.t < a.task.t for runs in by_dev.values() for a, b in itertools.pairwise(runs))


def test_an_edf_device_takes_a_task_only_once_its_input_is_in() -> None:
    """Work-conserving, as an agent's queue: never idle for a transfer while a task waits."""
    sc = published_scenario(0.8, 1500, 2)
    _, jobs = _run("edf", sc)

    def ready(job: Job) -> float:  # placed on arrival; its input then crosses the link
        size = sc.truth.input_bytes((job.task.model, job.task.precision))
        return job.task.t + sc.fleet.transfer_s(job.task.origin, job.dev, size)

    by_dev: dict[int, list[Job]] = {}
    for job in jobs:
        by_dev.setdefault(job.dev, []).append(job)
    remote = 0
    for runs in by_dev.values():
        runs.sort(key=lambda j: j.start)
        for prev, job in itertools.pairwise(runs):
            assert job.start >= ready(job) - 1e-12
            remote += ready(job) > job.task.t
            if job.start > prev.finish + 1e-12:  # the device sat idle before this job
                assert job.start == pytest.approx(ready(job))
                # and no task whose input was already in waited through that gap
                assert all(ready(k) >= job.start - 1e-12 for k in runs if k.start > job.start)
    assert remote > 100  # the fleet really ships inputs across links
