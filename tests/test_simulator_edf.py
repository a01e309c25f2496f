"""The simulator's device queues: earliest-deadline-first (a deadline policy's agent) and
FIFO, both taking a task only once its input has arrived, as an agent's queue does."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from cloud_hub.simulator import parse_fleet
from cloud_hub.simulator.agents import feasibility
from cloud_hub.simulator.baselines import LeastLoadedChooser
from cloud_hub.simulator.engine import Chooser, FleetState, Job, simulate
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.oracle import ClairvoyantOracle, DatasheetGreedy
from cloud_hub.simulator.slo_agents import SloAgentChooser
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, Scenario, published_scenario
from cloud_hub.simulator.truth import GroundTruth
from cloud_hub.simulator.workload import Task
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


def _ready(sc: Scenario, job: Job) -> float:
    """When ``job``'s input reached its device: placed on arrival, then across the link."""
    size = sc.truth.input_bytes((job.task.model, job.task.precision))
    return job.task.t + sc.fleet.transfer_s(job.task.origin, job.dev, size)


def _by_device(jobs: list[Job]) -> list[list[Job]]:
    by_dev: dict[int, list[Job]] = {}
    for job in jobs:
        by_dev.setdefault(job.dev, []).append(job)
    return [sorted(runs, key=lambda j: j.start) for runs in by_dev.values()]


def _assert_work_conserving(sc: Scenario, jobs: list[Job]) -> int:
    """Assert no device idled for a transfer while an arrived task waited; return remote jobs."""
    remote = 0
    for runs in _by_device(jobs):
        for prev, job in itertools.pairwise(runs):
            assert job.start >= _ready(sc, job) - 1e-12
            remote += _ready(sc, job) > job.task.t
            if job.start > prev.finish + 1e-12:  # the device sat idle before this job
                assert job.start == pytest.approx(_ready(sc, job))
                # and no task whose input was already in waited through that gap
                later = [k for k in runs if k.start > job.start]
                assert all(_ready(sc, k) >= job.start - 1e-12 for k in later)
    return remote


def test_an_edf_device_takes_a_task_only_once_its_input_is_in() -> None:
    """Work-conserving, as an agent's queue: never idle for a transfer while a task waits."""
    sc = published_scenario(0.8, 1500, 2)
    _, jobs = _run("edf", sc)
    assert _assert_work_conserving(sc, jobs) > 100  # the fleet really ships inputs across links


class _Recording:
    """Any chooser, recording each job's true start and finish on its device."""

    def __init__(self, inner: Chooser) -> None:
        self.inner, self.name, self.jobs = inner, inner.name, list[Job]()

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        return self.inner.choose(task, now, state)

    def job_started(self, job: Job) -> None:
        started = getattr(self.inner, "job_started", None)
        if started is not None:
            started(job)

    def finished(self, job: Job, now: float) -> None:
        self.jobs.append(job)
        self.inner.finished(job, now)


def _latency_first(sc: Scenario) -> Chooser:
    cands = sc.feasible if sc.restricted else None
    return SloAgentChooser(
        sc.fleet, Policy.template("latency-first"), deadline_aware=False, candidates=cands
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda sc: LeastLoadedChooser(1),
        lambda sc: DatasheetGreedy(1),
        lambda sc: ClairvoyantOracle(1),
        _latency_first,
    ],
    ids=["least-loaded", "datasheet-greedy", "oracle", "latency-first"],
)
def test_a_fifo_device_runs_arrived_work_while_a_remote_input_is_in_transit(
    make: Callable[[Scenario], Chooser],
) -> None:
    """The baselines' FIFO devices follow the agent's rule too: queue on input arrival."""
    sc = published_scenario(0.8, 1500, 2)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    rec = _Recording(make(sc))
    out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), rec)
    assert -2 not in out.device
    assert _assert_work_conserving(sc, rec.jobs) > 100
    overtaken = 0
    for runs in _by_device(rec.jobs):
        for a, b in itertools.pairwise(runs):
            assert a.finish <= b.start + 1e-12  # one task at a time
            assert _ready(sc, a) <= _ready(sc, b) + 1e-12  # FIFO in input-arrival order
            overtaken += b.task.t < a.task.t  # committed earlier, its input came later
    assert overtaken > 0  # the rule binds: an arrived task went ahead of one in transit


def test_a_local_task_starts_ahead_of_a_remote_one_still_in_transit() -> None:
    """Two boxes 0.5 s apart: the local task runs at once; the remote one after it, on arrival."""
    fleet = parse_fleet(
        {
            "default_link_ms": 500,
            "boxes": [{"id": "a", "profile": "rpi5"}, {"id": "b", "profile": "rpi5"}],
        }
    )
    tt = ("resnet50", "int8")
    truth = GroundTruth(fleet, [tt], 2, 0.0, seed=1)
    state = FleetState(fleet, truth, feasibility(fleet, [tt]), {tt: 0.0})
    dev = next(d for d in state.feasible[tt] if fleet.devices[d].box == 1)
    service = truth.service_s(0, tt, dev)
    assert service < 0.4  # the local task is done before the remote input is in
    remote = Task(0, 0.0, *tt, 0.0, 0, "default", 0)  # arrives at box a
    local = Task(1, 0.05, *tt, 0.0, 0, "default", 1)  # arrives at box b, right after

    class Pinned(LeastLoadedChooser):
        def choose(self, task: Task, now: float, state: FleetState) -> int | None:
            if task.index == 1:  # the placers' view: the remote task counts as queued
                assert state.free_at[dev] > 0.5
                assert state.queue_len(dev) == 1 and state.queued_tasks(dev) == [remote]
            return dev

    rec = _Recording(Pinned(1))
    simulate([remote, local], state, rec)
    first, second = rec.jobs
    assert (first.task, first.start) == (local, pytest.approx(0.05))
    ready = fleet.transfer_s(0, dev, truth.input_bytes(tt))
    assert ready >= 0.5 and second.task == remote
    assert second.start == pytest.approx(max(ready, first.finish))
