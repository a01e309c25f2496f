"""Deadline scenarios: tasks with tight / medium / loose deadlines over a fleet, at a load.

A task's deadline is ``k`` x the fastest time its model can have from where it arrives:
the least, over the devices that can run it, of shipping its input there plus the
device's *datasheet* time (the published figure, or what the scenario's truth takes for
a pair without one; never the hidden slowdowns, which the operator setting deadlines
does not know either). ``k`` is 3 (tight), 5 (medium) or 10 (loose), drawn with equal shares.

Load is a fraction of ``capacity_lp.mix_capacity`` over the true mean service times
(hidden slowdowns and the noise's mean included): the most a perfect router sustains.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cloud_hub.simulator import slo_fleet
from cloud_hub.simulator.agents import feasibility
from cloud_hub.simulator.arrivals import OnOff, onoff_times
from cloud_hub.simulator.capacity_lp import mix_capacity
from cloud_hub.simulator.fleet import Fleet, load_fleet
from cloud_hub.simulator.truth import PUBLISHED, GroundTruth, TaskType
from cloud_hub.simulator.workload import Task, load_workload, materialize

CLASSES: dict[str, float] = {"tight": 3.0, "medium": 5.0, "loose": 10.0}


@dataclass(frozen=True)
class Scenario:
    """Everything one run needs; ``tasks[i].max_latency_s`` is task i's deadline."""

    name: str
    fleet: Fleet
    truth: GroundTruth
    feasible: dict[TaskType, list[int]]  # devices a task type may go to (every chooser)
    tasks: list[Task]
    classes: list[str]  # deadline class of each task
    capacity_tasks_per_s: float  # the LP capacity (see the module doc)
    offered_load: float  # arrivals per second over the run / capacity
    published_share: float  # feasible (type, device) pairs timed from published figures
    restricted: bool  # feasible is narrower than the kernel's hard constraints


def datasheet_s(truth: GroundTruth, tt: TaskType, dev: int) -> float:
    """Return the time the datasheet / published table promises (no hidden slowdown)."""
    return truth.base[tt][dev] / truth.fleet.devices[dev].slowdown


def fastest_s(task: Task, truth: GroundTruth, feasible: list[int]) -> float:
    """Return the least transfer + datasheet time of ``task`` over ``feasible`` devices."""
    tt = (task.model, task.precision)
    size = truth.input_bytes(tt)
    return min(
        truth.fleet.transfer_s(task.origin, d, size) + datasheet_s(truth, tt, d) for d in feasible
    )


def with_deadlines(
    tasks: list[Task], truth: GroundTruth, feasible: dict[TaskType, list[int]], seed: int
) -> tuple[list[Task], list[str]]:
    """Return the tasks with drawn deadline classes (deadline in ``max_latency_s``)."""
    rng = np.random.default_rng(seed + 104729)
    names = list(CLASSES)
    drawn = rng.integers(len(names), size=len(tasks)).tolist()
    out = [
        dataclasses.replace(
            t,
            max_latency_s=CLASSES[names[k]] * fastest_s(t, truth, feasible[(t.model, t.precision)]),
        )
        for t, k in zip(tasks, drawn, strict=True)
    ]
    return out, [names[k] for k in drawn]


def lp_capacity(
    truth: GroundTruth, feasible: dict[TaskType, list[int]], mix: dict[TaskType, float]
) -> float:
    """Return the LP capacity (tasks/s) of the fleet for ``mix`` over ``feasible`` pairs."""
    inflate = math.exp(truth.sigma**2 / 2)  # mean of the median-1 lognormal noise
    n = len(truth.fleet.devices)
    service = [
        [truth.base[tt][d] * inflate if d in feasible[tt] else math.inf for d in range(n)]
        for tt in mix
    ]
    return mix_capacity(service, list(mix.values()))


def published_scenario(
    load: float, n_tasks: int, seed: int, *, sigma: float = 0.1, shape: OnOff | None = None
) -> Scenario:
    """Return the new scenario: ``slo_fleet``, bursty on/off arrivals at ``load``."""
    fleet, table = slo_fleet.build_fleet()
    truth = slo_fleet.PublishedTruth(fleet, table, n_tasks, sigma, seed)
    kernel_ok = feasibility(fleet, list(table))
    feasible = {tt: [d for d in kernel_ok[tt] if math.isfinite(table[tt][d])] for tt in table}
    mix = {(m, slo_fleet.PRECISION): w for m, w in slo_fleet.MIX}
    cap = lp_capacity(truth, feasible, mix)
    rng = np.random.default_rng(seed + 7919)
    times = onoff_times(load * cap, n_tasks, shape or OnOff(), rng, exact_mean=True)
    weights = np.array(list(mix.values()))
    kinds = rng.choice(len(mix), size=n_tasks, p=weights / weights.sum()).tolist()
    origins = rng.integers(len(fleet.boxes), size=n_tasks).tolist()
    types = list(mix)
    plain = [
        Task(i, float(times[i]), types[k][0], types[k][1], 0.0, 0, "default", int(origins[i]))
        for i, k in enumerate(kinds)
    ]
    tasks, classes = with_deadlines(plain, truth, feasible, seed)
    pairs = [(tt, d) for tt, ds in feasible.items() for d in ds]
    share = sum(truth.source[tt][d] == "published" for tt, d in pairs) / len(pairs)
    offered = n_tasks / tasks[-1].t / cap if n_tasks else 0.0
    restricted = any(feasible[tt] != kernel_ok[tt] for tt in table)
    return Scenario(
        "slo-published", fleet, truth, feasible, tasks, classes, cap, offered, share, restricted
    )


def edge_scenario(
    fleet_path: Path,
    workload_path: Path,
    load: float,
    n_tasks: int,
    seed: int,
    *,
    sigma: float = 0.1,
    published_only: bool = False,
) -> Scenario:
    """Return a fleet file + generator workload (the edge example's) with deadlines.

    The fleet, mix, truth and noise draws are ``bench_sim_edge``'s; arrivals are its Poisson
    process, but at ``load`` x the LP capacity (``bench_sim_edge`` scales by the runner's
    capacity, which assumes every device serves the whole mix: about 2/3 of the LP's here).
    ``published_only`` keeps only the pairs timed from a published or measured figure.
    """
    fleet = load_fleet(fleet_path)
    spec = dataclasses.replace(load_workload(workload_path), n_tasks=n_tasks, load=load)
    types = spec.types()
    truth = GroundTruth(fleet, types, n_tasks, sigma, seed)
    kernel_ok = feasibility(fleet, types)
    # a truth that leaves pairs without a figure out says which (GroundTruth.available)
    available = getattr(truth, "available", None)
    feasible: dict[TaskType, list[int]] = available(kernel_ok) if callable(available) else kernel_ok
    if published_only:
        feasible = {
            tt: [d for d in ds if truth.source[tt][d] in PUBLISHED] for tt, ds in feasible.items()
        }
    mix: dict[TaskType, float] = {}
    for m in spec.mix:
        tt = (m["model"], m["precision"])
        mix[tt] = mix.get(tt, 0.0) + m["weight"]
    cap = lp_capacity(truth, feasible, mix)
    plain = materialize(spec, fleet, lambda _weights: cap, seed)
    tasks, classes = with_deadlines(plain, truth, feasible, seed)
    offered = n_tasks / tasks[-1].t / cap if n_tasks else 0.0
    return Scenario(
        f"{fleet.name}-published" if published_only else fleet.name,
        fleet,
        truth,
        feasible,
        tasks,
        classes,
        cap,
        offered,
        truth.coverage(feasible),
        feasible != kernel_ok,
    )
