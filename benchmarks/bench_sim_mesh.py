"""Across the mesh (issue 13, item 6): each site alone vs offloading by bids, in the simulator.

Run: ``PYTHONPATH=. python benchmarks/bench_sim_mesh.py [--tasks N] [--seed S] [--quick]
[--bid-rate R] [--heartbeat S]`` (the gate's defaults: the agent's 2 s / 20 bids/s at ~5 tasks/s
per site, scaled to the scenario's arrival rate).

The edge example's boxes are the sites (``examples/fleet_edge_mixed.json``, its mix and
Poisson arrivals at 50% / 80% of the LP capacity, deadlines as in ``bench_sim_slo.py``).
Each site's agent places on its own devices with its own Placer; ``threshold`` asks the
peers for bids only when the local estimate exceeds ``mesh_bid_above_s`` (1 s), the rule
before the bid gate; ``summary`` asks through the agent's bid gate (a peer whose fresh
capability summary beats local by the margin, round trip and transfer included; a token
bucket of ``--bid-rate`` bid messages a second per agent;
``cloud_hub/simulator/mesh_summaries.py``); ``always`` asks every peer for every task;
``alone`` never asks (``cloud_hub/simulator/mesh_sites.py``). Prints a table per load and
one JSON line: ``mesh_vs_alone`` (the summary gate), ``mesh_threshold_vs_alone`` and
``mesh_always_vs_alone`` (mean latency ratios), ``per_site`` (each origin site's mean
latency with the summary gate vs alone, with counts), ``bid_messages_per_task`` per rule
(a bid is two messages, request and reply) and ``bid_requests_per_s_max`` (the busiest
agent's bid requests per simulated second, beside ``gate.bid_requests_per_s_bound``, what
its token bucket allows over the run), with sample counts
beside every percentile.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from cloud_hub.simulator.engine import FleetState, simulate
from cloud_hub.simulator.mesh_sites import RULES, MeshSites
from cloud_hub.simulator.mesh_summaries import SummarySites
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.slo_agents import corrections_at_clamp
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, edge_scenario
from edge_agent.placement import Policy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def per_site(sc: Any, res: Any) -> dict[int, list[float]]:
    """Return each origin site's latencies (placed tasks)."""
    out: dict[int, list[float]] = {}
    for t in sc.tasks:
        if res.device[t.index] >= 0:
            out.setdefault(t.origin, []).append(res.latency_s[t.index])
    return out


def run_load(
    load: float, n: int, seed: int, policy: Policy, bid_rate: float | None, heartbeat: float | None
) -> dict[str, dict[str, Any]]:
    """Run every rule on one load of the edge scenario; return metrics per rule."""
    sc = edge_scenario(
        EXAMPLES / "fleet_edge_mixed.json", EXAMPLES / "workload_edge_mix.json", load, n, seed
    )
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    out: dict[str, dict[str, Any]] = {}
    span = max(t.t for t in sc.tasks) - min(t.t for t in sc.tasks)
    # the agent's defaults (2 s heartbeat, 20 bids/s) suit ~5 tasks/s per site: 10 arrivals
    # per heartbeat, 4 bid messages per arrival; scaled to this scenario's arrival rate
    site_rate = n / span / len(sc.fleet.boxes) if span > 0 else 1.0
    heartbeat_s = heartbeat or 10.0 / site_rate
    bid_rate = bid_rate or 4.0 * site_rate
    for rule in (*RULES, "summary"):
        if rule == "summary":
            sites: MeshSites = SummarySites(
                sc.fleet, policy, sc.feasible, bid_rate_per_s=bid_rate, heartbeat_s=heartbeat_s
            )
        else:
            sites = MeshSites(sc.fleet, policy, rule, sc.feasible)
        res = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), sites)
        doc = deadline_summary(sc.tasks, res, sc.classes, list(CLASSES))
        doc["bid_messages_per_task"] = sites.messages / n
        doc["forwarded_share"] = sites.forwarded / n
        doc["corrections_at_clamp"] = corrections_at_clamp(sites.placers)
        doc["per_site"] = per_site(sc, res)
        doc["bid_requests_per_s_max"] = max(sites.sent_by_site) / span if span > 0 else None
        doc["span_s"] = span
        doc["gate"] = {
            "heartbeat_s": heartbeat_s,
            "bid_rate_per_s": bid_rate,
            # the bucket's bound over the run: its burst (2 x rate) plus the rate
            "bid_requests_per_s_bound": (2 * bid_rate + bid_rate * span) / span if span else None,
            "tasks_per_s_per_site": site_rate,
        }
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
    parser.add_argument("--bid-rate", type=float, help="bid messages/s/agent (default: scaled)")
    parser.add_argument("--heartbeat", type=float, help="summary period, s (default: scaled)")
    parser.add_argument("--quick", action="store_true", help="600 tasks per run (CI smoke)")
    args = parser.parse_args()
    n = 600 if args.quick else args.tasks
    t0 = time.perf_counter()
    by: dict[str, Any] = {}
    for load in (0.5, 0.8):
        out = run_load(
            load, n, args.seed, Policy.template(args.policy), args.bid_rate, args.heartbeat
        )
        alone = out["alone"]["latency_ms"]["mean"]
        sites = {}
        for site, lat in sorted(out["summary"]["per_site"].items()):
            own = out["alone"]["per_site"].get(site, [])
            mesh_ms, alone_ms = 1e3 * sum(lat) / len(lat), 1e3 * sum(own) / max(len(own), 1)
            sites[str(site)] = {
                "mesh_ms": round(mesh_ms, 3),
                "mesh_n": len(lat),
                "alone_ms": round(alone_ms, 3) if own else None,
                "alone_n": len(own),
                "mesh_vs_alone": round(mesh_ms / alone_ms, 4) if own else None,
            }
        by[f"{load:.0%}"] = {
            "mesh_vs_alone": out["summary"]["latency_ms"]["mean"] / alone,
            "mesh_threshold_vs_alone": out["threshold"]["latency_ms"]["mean"] / alone,
            "mesh_always_vs_alone": out["always"]["latency_ms"]["mean"] / alone,
            "per_site": sites,
            "bid_requests_per_s_max": {r: d["bid_requests_per_s_max"] for r, d in out.items()},
            "simulated_s": out["alone"]["span_s"],
            "gate": out["summary"]["gate"],
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
