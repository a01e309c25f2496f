"""One carbon what-if run: carbon-aware agents, with or without peak shifting, CO2 per task.

A task's CO2 is its true energy (max power x service time, see ``truth``) spread over its
run and multiplied hour by hour by the true intensity of its device's site.
"""

from __future__ import annotations

from typing import Any

from cloud_hub.simulator.carbon_agents import CarbonAgentChooser
from cloud_hub.simulator.deferral import PeakShifter, deadline_misses
from cloud_hub.simulator.engine import FleetState, Outcome, simulate
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.runner import prepare_run
from cloud_hub.simulator.workload import Task, Workload
from edge_agent.placement import Policy


def task_grams(fleet: Fleet, out: Outcome, i: int) -> float:
    """Return the true grams of CO2 of task ``i`` (0 when rejected)."""
    dev = out.device[i]
    if dev < 0:
        return 0.0
    site = fleet.site(fleet.devices[dev].box)
    end = out.finish_s[i]
    return site.grams(out.energy_j[i], end - out.service_s[i], end)


def run_carbon(
    fleet: Fleet,
    workload: Workload,
    policy: Policy,
    *,
    defer: bool,
    seed: int = 1,
    sigma: float = 0.1,
    max_load: float = 0.7,
    published_only: bool = False,
) -> dict[str, Any]:
    """Simulate ``workload`` under ``policy`` (deferral on or off); return CO2 and deadlines.

    ``published_only``: only the (type, device) pairs with a published figure take work.
    """
    tasks, truth, feasible, _ = prepare_run(
        fleet, workload, seed, sigma, published_only=published_only
    )
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in truth.types}
    state = FleetState(fleet, truth, feasible, memory)
    chooser = CarbonAgentChooser(fleet, policy)
    shifter = PeakShifter(fleet, chooser.estimate, max_load=max_load) if defer else None
    out = simulate(tasks, state, chooser, holder=shifter)
    return summarize_carbon(fleet, tasks, out, shifter) | {
        "published_share": truth.coverage(feasible)
    }


def summarize_carbon(
    fleet: Fleet, tasks: list[Task], out: Outcome, shifter: PeakShifter | None
) -> dict[str, Any]:
    """Return CO2 (all, deferrable), deadline misses and deferral figures of one run."""
    grams = [task_grams(fleet, out, t.index) for t in tasks]
    missed = deadline_misses(tasks, out.finish_s, out.device)
    deferrable = [t.index for t in tasks if t.deferrable]
    holds = shifter.holds if shifter is not None else []
    waits = [h.release_s - h.arrived_s for h in shifter.holds] if shifter is not None else [0.0]
    by_site: dict[str, float] = dict.fromkeys(fleet.boxes, 0.0)
    for t in tasks:
        if out.device[t.index] >= 0:
            by_site[fleet.boxes[fleet.devices[out.device[t.index]].box]] += grams[t.index]
    return {
        "tasks": len(tasks),
        "deferrable": len(deferrable),
        "rejected": sum(1 for d in out.device if d < 0),
        "co2_g": sum(grams),
        "co2_g_deferrable": sum(grams[i] for i in deferrable),
        "energy_j_deferrable": sum(out.energy_j[i] for i in deferrable),
        "deadline_misses": len(missed),
        "missed": missed,
        "deferred": sum(1 for w in waits if w > 0),
        "guaranteed": [h.task for h in holds if h.guaranteed],
        "mean_hold_h": sum(waits) / max(len(waits), 1) / 3600.0,
        "sites": {fleet.boxes[b]: fleet.site(b).label() for b in range(len(fleet.boxes))},
        "co2_g_by_site": by_site,
    }


def compare(
    fleet: Fleet,
    workload: Workload,
    policy: Policy,
    *,
    seed: int = 1,
    max_load: float = 0.7,
    published_only: bool = False,
) -> dict[str, Any]:
    """Run at once and with peak shifting; return both and the saving on deferrable work."""
    only = published_only
    now = run_carbon(fleet, workload, policy, defer=False, seed=seed, published_only=only)
    shifted = run_carbon(
        fleet, workload, policy, defer=True, seed=seed, max_load=max_load, published_only=only
    )
    base = now["co2_g_deferrable"]
    return {
        "at_once": now,
        "shifted": shifted,
        "carbon_saving_deferrable": 1.0 - shifted["co2_g_deferrable"] / base if base else 0.0,
        "deadline_misses": shifted["deadline_misses"],
        "misses_caused": len(set(shifted["missed"]) - set(now["missed"])),
        "published_share": now["published_share"],
    }
