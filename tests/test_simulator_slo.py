"""The deadline benchmark's own correctness: oracle, attainment counting, load, truth."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from cloud_hub.simulator import parse_fleet, slo_agents
from cloud_hub.simulator.agents import feasibility
from cloud_hub.simulator.arrivals import OnOff, onoff_times
from cloud_hub.simulator.capacity_lp import mix_capacity
from cloud_hub.simulator.engine import FleetState, Outcome, simulate
from cloud_hub.simulator.mesh_sites import RULES, MeshSites
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.oracle import ClairvoyantOracle, DatasheetGreedy
from cloud_hub.simulator.slo_agents import SloAgentChooser
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, published_scenario
from cloud_hub.simulator.truth import GroundTruth
from cloud_hub.simulator.workload import Task
from edge_agent.placement import Decision, Placer, Policy

TT = ("resnet50", "int8")


def _two_pis(slow_first: float) -> tuple[FleetState, list[Task]]:
    """Two identical Pi 5 boxes (no links); the first is ``slow_first`` x slower, hidden."""
    fleet = parse_fleet(
        {
            "default_link_ms": 0,
            "boxes": [
                {"id": "slow", "profile": "rpi5", "slowdown": {"cpu": slow_first}},
                {"id": "fast", "profile": "rpi5"},
            ],
        }
    )
    truth = GroundTruth(fleet, [TT], 40, 0.1, seed=3)
    memory = {TT: model_info(TT[0]).contract(TT[1]).memory_needed()}
    state = FleetState(fleet, truth, feasibility(fleet, [TT]), memory)
    assert state.feasible[TT] == [0, 1]
    # far apart: every task finds both devices idle
    tasks = [Task(i, 2.0 * i, *TT, 1.0, 0, "default", 0) for i in range(40)]
    return state, tasks


def test_oracle_never_prefers_the_hidden_slow_device_when_an_equal_fast_one_is_free() -> None:
    state, tasks = _two_pis(slow_first=3.0)
    oracle = simulate(tasks, state, ClairvoyantOracle(1))
    assert set(oracle.device) == {1}
    # the datasheet cannot tell them apart and takes the lower index: the slow one
    state, tasks = _two_pis(slow_first=3.0)
    assert set(simulate(tasks, state, DatasheetGreedy(1)).device) == {0}


def test_oracle_counts_the_true_queue_and_not_the_tasks_own_draw() -> None:
    state, _ = _two_pis(slow_first=3.0)
    oracle = ClairvoyantOracle(1)
    task = Task(0, 0.0, *TT, 1.0, 0, "default", 0)
    mean = state.truth.base[TT][1] * math.exp(0.1**2 / 2)
    assert oracle.expected_finish(task, 1, 0.0, state) == pytest.approx(mean)
    state.free_at[1] = 1.0  # true remaining work ahead on the fast device
    assert oracle.expected_finish(task, 1, 0.0, state) == pytest.approx(1.0 + mean)
    assert oracle.choose(task, 0.0, state) == 0  # the slow one now finishes first
    # the task's own draw is not used: a different draw for task 0 changes nothing
    state.truth._noise[0, 0] *= 10.0
    assert oracle.choose(task, 0.0, state) == 0


def test_oracle_sees_the_true_remaining_time_of_a_job_another_chooser_placed() -> None:
    """After a handover the oracle's queue view is the engine's truth, whoever placed the
    work: a long-running job on the fast device (a 20x draw, placed by a first chooser)
    counts with its true remaining time, so the next task goes to the free slow one."""
    state, _ = _two_pis(slow_first=3.0)
    state.truth._noise[0, 1] = 20.0  # task 0 runs 20x its mean on the fast device
    tasks = [Task(0, 0.0, *TT, 1.0, 0, "default", 0), Task(1, 0.5, *TT, 1.0, 0, "default", 0)]
    mean_fast = state.truth.base[TT][1] * math.exp(0.1**2 / 2)
    # at 0.5 s task 0 still runs, and truly ends after task 1 would on the slow device
    assert 0.5 + 3.0 * mean_fast < 20.0 * state.truth.base[TT][1] + mean_fast

    class First(ClairvoyantOracle):
        def choose(self, task: Task, now: float, state: FleetState) -> int | None:
            if task.index == 0:
                return 1  # placed by someone else, on the fast device
            seen.append(self.expected_finish(task, 1, now, state))
            return super().choose(task, now, state)

    seen: list[float] = []
    out = simulate(tasks, state, First(1))
    assert out.device == [1, 0]
    # the fast device's view: task 0's true finish (not an estimate), then task 1's mean
    assert seen == [pytest.approx(out.finish_s[0] + mean_fast)]


def test_attainment_per_class_on_a_hand_built_trace() -> None:
    deadlines = [0.010, 0.010, 0.020, 0.020, 0.050, 0.050, 0.050]
    classes = ["tight", "tight", "medium", "medium", "loose", "loose", "loose"]
    tasks = [Task(i, 0.0, *TT, d, 0, "default", 0) for i, d in enumerate(deadlines)]
    out = Outcome(
        device=[0, 0, 1, 1, 0, -1, 1],  # task 5 left unplaced: a miss
        latency_s=[0.009, 0.011, 0.020, 0.030, 0.049, 0.0, 0.051],
        service_s=[0.0] * 7,
        energy_j=[1.0, 1.0, 2.0, 2.0, 1.0, 0.0, 2.0],
        finish_s=[0.0] * 7,
    )
    doc = deadline_summary(tasks, out, classes, list(CLASSES))
    assert doc["by_class"] == {"tight": 0.5, "medium": 0.5, "loose": pytest.approx(1 / 3)}
    assert doc["by_class_n"] == {"tight": 2, "medium": 2, "loose": 3}
    assert doc["attainment"] == pytest.approx(3 / 7) and doc["attainment_n"] == 7
    assert doc["unplaced"] == 1 and doc["latency_n"] == 6
    assert doc["energy_j"] == pytest.approx(9.0)
    assert doc["latency_ms"]["mean"] == pytest.approx(
        1e3 * (0.009 + 0.011 + 0.05 + 0.049 + 0.051) / 6
    )


def test_onoff_arrivals_hit_the_requested_rate_and_are_bursty() -> None:
    rng = np.random.default_rng(5)
    long_run = onoff_times(500.0, 200_000, OnOff(peak=1.6, on_s=0.2, off_s=0.2), rng)
    assert np.all(np.diff(long_run) > 0)
    assert len(long_run) / long_run[-1] == pytest.approx(500.0, rel=0.03)
    exact = onoff_times(500.0, 3000, OnOff(), np.random.default_rng(5), exact_mean=True)
    assert len(exact) / exact[-1] == pytest.approx(500.0, rel=1e-9)

    def dispersion(times: np.ndarray) -> float:  # variance / mean of counts per 50 ms
        counts = np.histogram(times, bins=np.arange(0.0, times[-1], 0.05))[0]
        return float(counts.var() / counts.mean())

    poisson = onoff_times(500.0, 200_000, OnOff(peak=1.0), np.random.default_rng(5))
    assert dispersion(poisson) == pytest.approx(1.0, abs=0.1)
    assert dispersion(long_run) > 3.0
    with pytest.raises(ValueError, match="peak"):
        onoff_times(500.0, 10, OnOff(peak=2.5, on_s=0.2, off_s=0.2), rng)


def test_lp_capacity_on_hand_solved_fleets() -> None:
    inf = math.inf
    assert mix_capacity([[0.01, 0.02]], [1]) == pytest.approx(150.0)  # 100/s + 50/s
    # each model has one device: the slower one's half of the mix binds
    assert mix_capacity([[0.01, inf], [inf, 0.1]], [1, 1]) == pytest.approx(20.0)
    # specialisation: device 1 takes all of model 1 (50/s), device 0 the rest
    # lam/2 - 50 of model 1 at 0.1 s and lam/2 of model 0 at 0.01 s fill device 0
    assert mix_capacity([[0.01, 0.01], [0.1, 0.02]], [1, 1]) == pytest.approx(6.0 / 0.055)
    assert mix_capacity([[inf, inf], [0.1, 0.1]], [1, 1]) == 0.0


def test_published_scenario_is_timed_only_from_published_figures_at_the_asked_load() -> None:
    sc = published_scenario(0.8, 600, seed=2)
    assert sc.published_share == 1.0 and sc.restricted
    assert sc.offered_load == pytest.approx(0.8, rel=1e-9)
    for tt, devs in sc.feasible.items():
        assert devs and all(math.isfinite(sc.truth.base[tt][d]) for d in devs)
        assert all(sc.truth.source[tt][d] == "published" for d in devs)
    slow = {sd.device.id: sd.slowdown for sd in sc.fleet.devices if sd.slowdown != 1.0}
    assert slow == {"rk3588.c2/npu": 2.0, "orin/gpu": 1.7}
    assert set(sc.classes) == set(CLASSES)
    for task, cls in zip(sc.tasks, sc.classes, strict=True):  # k x the fastest, datasheet
        fastest = min(
            sc.fleet.transfer_s(task.origin, d, sc.truth.input_bytes(tt))
            + sc.truth.base[tt][d] / sc.fleet.devices[d].slowdown
            for tt in [(task.model, task.precision)]
            for d in sc.feasible[tt]
        )
        assert task.max_latency_s == pytest.approx(CLASSES[cls] * fastest)


def test_placer_agents_stay_on_devices_with_published_times_and_learn_without_clamping() -> None:
    sc = published_scenario(0.5, 300, seed=4)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    agent = SloAgentChooser(
        sc.fleet, Policy.template("latency-first"), deadline_aware=False, candidates=sc.feasible
    )
    out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), agent)
    for task, dev in zip(sc.tasks, out.device, strict=True):
        assert dev in sc.feasible[(task.model, task.precision)]
    assert all(math.isfinite(x) for x in out.latency_s)
    assert agent.clamped() == 0


def test_started_is_reported_once_per_task_at_its_simulated_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a Placer that has ``started(decision, now=...)``, the harness calls it right."""
    started: list[tuple[Decision, float]] = []  # the objects, so no id is reused
    fed: list[Decision] = []
    feedback = Placer.feedback

    def fake_started(self: Placer, decision: Decision, now: float = -1.0) -> None:
        assert all(d is not decision for d in fed)  # started comes before feedback
        started.append((decision, now))

    def spy_feedback(self: Placer, decision: Decision, **kw: Any) -> None:
        fed.append(decision)
        feedback(self, decision, **kw)

    monkeypatch.setattr(Placer, "started", fake_started, raising=False)
    monkeypatch.setattr(Placer, "feedback", spy_feedback)
    assert slo_agents._started_clock() == "now"
    monkeypatch.setattr(slo_agents, "STARTED_CLOCK", "now")
    monkeypatch.setattr(slo_agents, "HAS_STARTED", True)
    sc = published_scenario(0.8, 200, seed=4)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    agent = SloAgentChooser(
        sc.fleet, Policy.template("latency-first"), deadline_aware=False, candidates=sc.feasible
    )
    out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), agent)
    assert len(started) == len({id(d) for d, _ in started}) == len(fed) == len(sc.tasks)
    true_starts = sorted(f - s for f, s in zip(out.finish_s, out.service_s, strict=True))
    assert sorted(t for _, t in started) == pytest.approx(true_starts)


def test_a_started_call_needing_more_than_the_decision_is_not_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def needs_more(self: Placer, decision: Decision, worker: str) -> None: ...

    def takes_at(self: Placer, decision: Decision, *, at: float = 0.0) -> None: ...

    def plain(self: Placer, decision: Decision) -> None: ...

    for fn, clock in ((needs_more, None), (takes_at, "at"), (plain, "")):
        monkeypatch.setattr(Placer, "started", fn, raising=False)
        assert slo_agents._started_clock() == clock


def test_mesh_sites_alone_stays_home_and_bids_cost_two_messages_per_peer() -> None:
    sc = published_scenario(0.5, 150, seed=6)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    boxes = len(sc.fleet.boxes)
    runs = {}
    for rule in RULES:
        sites = MeshSites(sc.fleet, Policy.template("latency-first"), rule, sc.feasible)
        out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), sites)
        runs[rule] = (sites, out)
    sites, out = runs["alone"]
    assert sites.messages == 0
    for task, dev in zip(sc.tasks, out.device, strict=True):
        home = [sd.index for sd in sc.fleet.devices_of(task.origin)]
        assert (
            dev in home if set(home) & set(sc.feasible[(task.model, task.precision)]) else dev == -1
        )
    sites, out = runs["always"]
    assert sites.messages == 2 * (boxes - 1) * len(sc.tasks)
    # today's rule asks at least for every task its own box cannot run, and places it
    sites, out = runs["threshold"]
    homeless = [
        t
        for t in sc.tasks
        if not {sd.index for sd in sc.fleet.devices_of(t.origin)}
        & set(sc.feasible[(t.model, t.precision)])
    ]
    assert homeless and sites.messages >= 2 * (boxes - 1) * len(homeless)
    assert all(out.device[t.index] >= 0 for t in sc.tasks)
