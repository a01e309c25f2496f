"""Across the mesh (issue 13, item 6): each site alone vs offloading by bids, in the simulator.

Run: ``PYTHONPATH=. python benchmarks/bench_sim_mesh.py [--tasks N] [--seed S] [--quick]``.

The edge example's boxes are the sites (``examples/fleet_edge_mixed.json``, its mix and
Poisson arrivals at 50% / 80% of the LP capacity, deadlines as in ``bench_sim_slo.py``).
Each site's agent places on its own devices with its own Placer; ``threshold`` asks the
peers for bids only when the local estimate exceeds ``mesh_bid_above_s`` (1 s), as the
agent does today; ``always`` asks every peer for every task; ``alone`` never asks
(``cloud_hub/simulator/mesh_sites.py``). Prints a table per load and one JSON line:
``mesh_vs_alone`` and ``mesh_always_vs_alone`` (mean latency ratios) and
``bid_messages_per_task`` per rule, with sample counts beside every percentile.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from cloud_hub.simulator.engine import FleetState, simulate
from cloud_hub.simulator.mesh_sites import RULES, MeshSites
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.slo_agents import corrections_at_clamp
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, edge_scenario
from edge_agent.placement import Policy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_load(load: float, n: int, seed: int, policy: Policy) -> dict[str, dict[str, Any]]:
    """Run every rule on one load of the edge scenario; return metrics per rule."""
    sc = edge_scenario(
        EXAMPLES / "fleet_edge_mixed.json", EXAMPLES / "workload_edge_mix.json", load, n, seed
    )
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    out: dict[str, dict[str, Any]] = {}
    for rule in RULES:
        sites = MeshSites(sc.fleet, policy, rule, sc.feasible)
        res = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), sites)
        doc = deadline_summary(sc.tasks, res, sc.classes, list(CLASSES))
        doc["bid_messages_per_task"] = sites.messages / n
        doc["forwarded_share"] = sites.forwarded / n
        doc["corrections_at_clamp"] = corrections_at_clamp(sites.placers)
        out[rule] = doc
    print(f"== {sc.fleet.name} at {load:.0%} load, {n} tasks, policy {policy.name}")
    print(f"{'rule':<11}{'met':>7}{'mean ms':>10}{'p99 ms':>10}{'n':>7}{'msgs/task':>11}{'fwd':>7}")
    for rule, d in out.items():
        lat = d["latency_ms"]
        print(
            f"{rule:<11}{100 * d['attainment']:>6.1f}%{lat['mean']:>10.2f}{lat['p99']:>10.1f}"
            f"{d['latency_n']:>7}{d['bid_messages_per_task']:>11.2f}"
            f"{100 * d['forwarded_share']:>6.1f}%"
        )
    return out


def main() -> None:
    """Run both loads; print the tables and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", default="latency-first")
    parser.add_argument("--quick", action="store_true", help="600 tasks per run (CI smoke)")
    args = parser.parse_args()
    n = 600 if args.quick else args.tasks
    t0 = time.perf_counter()
    by: dict[str, Any] = {}
    for load in (0.5, 0.8):
        out = run_load(load, n, args.seed, Policy.template(args.policy))
        alone = out["alone"]["latency_ms"]["mean"]
        by[f"{load:.0%}"] = {
            "mesh_vs_alone": out["threshold"]["latency_ms"]["mean"] / alone,
            "mesh_always_vs_alone": out["always"]["latency_ms"]["mean"] / alone,
            "bid_messages_per_task": {r: d["bid_messages_per_task"] for r, d in out.items()},
            "forwarded_share": {r: d["forwarded_share"] for r, d in out.items()},
            "corrections_at_clamp": {r: d["corrections_at_clamp"] for r, d in out.items()},
            "attainment": {r: d["attainment"] for r, d in out.items()},
            "latency_mean_ms": {r: d["latency_ms"]["mean"] for r, d in out.items()},
            "latency_p99_ms": {r: d["latency_ms"]["p99"] for r, d in out.items()},
            "latency_n": {r: d["latency_n"] for r, d in out.items()},
        }
    summary = {
        "by_load": by,
        "policy": args.policy,
        "tasks_per_run": n,
        "seed": args.seed,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
