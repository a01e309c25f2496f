"""One what-if run: a fleet, a workload, hetmesh policies and the baselines, same tasks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from cloud_hub.simulator.agents import AgentChooser, feasibility
from cloud_hub.simulator.baselines import BASELINES
from cloud_hub.simulator.engine import Chooser, FleetState, simulate
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.metrics import summarize
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.truth import GroundTruth, TaskType
from cloud_hub.simulator.workload import Task, Workload, materialize
from edge_agent.placement import Policy

LABEL = (
    "emulation: ground-truth service times are the firmware profiles' published per-model "
    "latencies or measured rates (where a device has none for a model: another model's "
    "figure on it scaled by the published GOPs ratio, with its own noise; a device with no "
    "figure is left out), times the fleet's slowdowns and seeded lognormal noise; not a "
    "measurement"
)


def capacity(
    truth: GroundTruth,
    feasible: dict[TaskType, list[int]],
    types: list[TaskType],
    weights: Sequence[float],
) -> float:
    """Return the fleet's tasks/s if every device served the mix (its feasible part)."""
    total = 0.0
    inflate = math.exp(truth.sigma**2 / 2)  # mean of the median-1 lognormal
    for d in range(len(truth.fleet.devices)):
        mine = [
            (w, truth.base[tt][d])
            for tt, w in zip(types, weights, strict=True)
            if d in feasible[tt] and math.isfinite(truth.base[tt][d])
        ]
        wsum = sum(w for w, _ in mine)
        if wsum > 0:
            total += wsum / (sum(w * s for w, s in mine) * inflate)
    return total


def prepare_run(
    fleet: Fleet, workload: Workload, seed: int, sigma: float, *, published_only: bool = False
) -> tuple[list[Task], GroundTruth, dict[TaskType, list[int]], float]:
    """Return the tasks, the ground truth, the feasible devices per type, and the capacity.

    A (type, device) pair is feasible when it passes the kernel's hard constraints and
    has a ground-truth figure (``GroundTruth.available``); ``published_only`` also leaves
    out the pairs timed by scaling another model's figure.
    """
    types = workload.types()
    truth = GroundTruth(fleet, types, workload.count(), sigma, seed)
    feasible = truth.available(feasibility(fleet, types), published_only=published_only)
    mix_types = [(m["model"], m["precision"]) for m in workload.mix]
    cap = {"tasks_per_s": 0.0}

    def cap_of(weights: list[float]) -> float:
        cap["tasks_per_s"] = capacity(truth, feasible, mix_types, weights)
        return cap["tasks_per_s"]

    tasks = materialize(workload, fleet, cap_of, seed)
    return tasks, truth, feasible, cap["tasks_per_s"]


def choosers(
    fleet: Fleet,
    policies: Sequence[Policy],
    baselines: Sequence[str],
    seed: int,
    admission: bool,
    corrections: dict[str, dict[str, float]] | None = None,
) -> list[Chooser]:
    """Return the hetmesh agents for each policy, then the named baselines."""
    out: list[Chooser] = [
        AgentChooser(fleet, p, admission=admission, corrections=corrections) for p in policies
    ]
    return out + [BASELINES[name](seed) for name in baselines]


def run(
    fleet: Fleet,
    workload: Workload,
    policies: Sequence[Policy],
    *,
    seed: int = 1,
    sigma: float = 0.1,
    baselines: Sequence[str] = tuple(BASELINES),
    admission: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    corrections: dict[str, dict[str, float]] | None = None,
    published_only: bool = False,
) -> dict[str, Any]:
    """Simulate every policy and baseline on the same tasks; return the metrics document.

    ``corrections`` ({task class: {device id: factor}}) are imported into every agent's
    Placer before the run (agents learn from cold without them). ``published_only`` runs
    the scenario on the (type, device) pairs with a published or measured figure alone.
    """
    tasks, truth, feasible, cap = prepare_run(
        fleet, workload, seed, sigma, published_only=published_only
    )
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in truth.types}
    results: dict[str, Any] = {}
    for chooser in choosers(fleet, policies, baselines, seed, admission, corrections):
        state = FleetState(fleet, truth, feasible, memory)
        hook = None if progress is None else _hook(progress, chooser.name, len(tasks))
        out = simulate(tasks, state, chooser, hook)
        per = None
        if isinstance(chooser, AgentChooser):
            per = chooser.place_s / max(chooser.decisions, 1)
        results[chooser.name] = summarize(tasks, out, state, per)
    return {
        "ground_truth": {
            "label": LABEL,
            "published_share": truth.coverage(feasible),
            "published_only": published_only,
            "pairs": sum(len(ds) for ds in feasible.values()),
            # kernel-feasible pairs without a figure (or, published-only, a published one)
            "left_out_pairs": sum(len(ds) for ds in feasibility(fleet, truth.types).values())
            - sum(len(ds) for ds in feasible.values()),
            "noise_sigma": sigma,
        },
        "fleet": {"name": fleet.name, "boxes": len(fleet.boxes), "devices": len(fleet.devices)},
        "workload": {
            "path": workload.path,
            "tasks": len(tasks),
            "load": workload.load or None,
            "capacity_tasks_per_s": cap or None,
        },
        "seed": seed,
        "admission_control": admission,
        "imported_corrections": bool(corrections),
        "policies": results,
    }


def _hook(
    progress: Callable[[str, int, int], None], name: str, total: int
) -> Callable[[int], None]:
    return lambda done: progress(name, done, total)
