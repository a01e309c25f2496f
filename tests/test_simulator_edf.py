"""The simulator's earliest-deadline-first devices (a deadline policy's agent)."""

from __future__ import annotations

import itertools

from cloud_hub.simulator.engine import FleetState, Job, simulate
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.slo_agents import SloAgentChooser
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, published_scenario
from edge_agent.placement import Policy


class _Recorder(SloAgentChooser):
    """slo-first recording each job's true start and finish on its device."""

    jobs: list[Job]

    def finished(self, job: Job, now: float) -> None:
        self.jobs.append(job)
        super().finished(job, now)


def _run(queue_order: str) -> tuple[float, list[Job]]:
    sc = published_scenario(0.8, 4000, 1)  # 2000: FIFO had not yet fallen behind (3 points)
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
