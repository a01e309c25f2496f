"""Deadlines and latency across unequal devices (issue 13, item 7), through the Placer API.

Run: ``python benchmarks/bench_sim_slo.py [--tasks N] [--seed S] [--quick]`` (the installed
package, native kernel: about 70 s; ``PYTHONPATH=.`` runs the python twin, about 3.5 min).

Three scenarios, each at 50% and 80% of its fleet's capacity (the LP capacity of
``cloud_hub/simulator/capacity_lp.py``), every task with a tight / medium / loose deadline
(3x / 5x / 10x its fastest possible time; ``slo_scenario``):

- ``edge-mixed``: the existing edge scenario (``examples/fleet_edge_mixed.json``, its mix
  and Poisson arrivals, as in ``bench_sim_edge.py`` but scaled to the LP capacity);
- ``edge-mixed-published``: the same on its pairs with a published figure alone;
- ``slo-published``: RK3588 NPU cores, a Hailo-8, two KV260 DPUs, an Orin Nano, two Pi 5s,
  timed only from the profiles' published latencies, two devices hidden-slow, bursty
  on/off arrivals (``slo_fleet``, ``arrivals``).

hetmesh policies (latency-first, balanced, energy-first and slo-first when the template
exists) decide through ``Placer`` with feedback on completion; a policy with a deadline
objective (slo-first) has its devices run waiting work earliest-deadline-first, as the
agent's do (``engine``, ``edge_agent.placement.edf``), the others FIFO; baselines: least-loaded,
datasheet-greedy, and the clairvoyant oracle (``oracle``). Prints a table per run, then
one JSON line. A figure whose policy or API does not exist yet is ``null``, never guessed.

The oracle is a clairvoyant *earliest-finish* greedy, not an optimal deadline scheduler:
another placement can meet more deadlines than it does. ``idle_fleet_bound`` is an upper
bound on any scheduler's attainment: the share of tasks whose deadline their best device
meets with nothing queued (true times, hidden slowdowns and noise included). When the best
baseline + 10 points exceeds it, that target cannot be met on that run by anyone.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloud_hub.simulator import slo_agents
from cloud_hub.simulator.baselines import LeastLoadedChooser, RoundRobinChooser
from cloud_hub.simulator.engine import Chooser, FleetState, simulate
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.oracle import ClairvoyantOracle, DatasheetGreedy
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import (
    CLASSES,
    Scenario,
    edge_scenario,
    published_scenario,
)
from cloud_hub.simulator.truth import TaskType
from edge_agent.placement import TEMPLATES, Policy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EDGE_FLEET = EXAMPLES / "fleet_edge_mixed.json"
EDGE_MIX = EXAMPLES / "workload_edge_mix.json"
POLICIES = ("latency-first", "balanced", "energy-first", "slo-first")
BASELINES: dict[str, Callable[[int], Chooser]] = {
    "least-loaded": LeastLoadedChooser,
    "round-robin": RoundRobinChooser,
    "datasheet-greedy": DatasheetGreedy,
    "oracle": ClairvoyantOracle,
}
# the baselines without clairvoyance: "best baseline" is the best of these; the oracle is
# the reference of lat_first_vs_oracle and printed beside it (oracle_attainment)
REALIZABLE = ("least-loaded", "round-robin", "datasheet-greedy")
SCENARIOS: dict[str, Callable[[float, int, int], Scenario]] = {
    "edge-mixed": functools.partial(edge_scenario, EDGE_FLEET, EDGE_MIX),
    "edge-mixed-published": functools.partial(
        edge_scenario, EDGE_FLEET, EDGE_MIX, published_only=True
    ),
    "slo-published": published_scenario,
}


def _memory(sc: Scenario) -> dict[TaskType, float]:
    return {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}


def run_one(sc: Scenario, seed: int) -> dict[str, dict[str, Any] | None]:
    """Run every policy and baseline over one scenario's tasks; return their metrics."""
    memory = _memory(sc)
    results: dict[str, dict[str, Any] | None] = {}
    names = list(CLASSES)
    for name in POLICIES:
        if name not in TEMPLATES:
            results[name] = None
            continue
        agent = slo_agents.SloAgentChooser(
            sc.fleet,
            Policy.template(name),
            deadline_aware=name == "slo-first",
            candidates=sc.feasible if sc.restricted else None,
            # a deadline policy's devices run waiting work earliest-deadline-first
            queue_order="edf" if Policy.template(name).orders_by_deadline else "fifo",
        )
        out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), agent)
        doc = deadline_summary(sc.tasks, out, sc.classes, names)
        doc["corrections_at_clamp"] = agent.clamped()
        doc["deadline_retries"] = agent.deadline_retries
        doc["place_us"] = agent.place_s / max(agent.decisions, 1) * 1e6
        doc["exploration"] = agent.placer.exploration.stats.as_dict()
        results[name] = doc
    for name, make in BASELINES.items():
        out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), make(seed))
        results[name] = deadline_summary(sc.tasks, out, sc.classes, names)
    return results


def idle_fleet_bound(sc: Scenario, state: FleetState) -> float:
    """Return the share of tasks that could meet their deadline on an idle fleet (a bound)."""
    met = 0
    for task in sc.tasks:
        best = min(
            state.finish_if(task, d, task.t)[1] - task.t
            for d in sc.feasible[(task.model, task.precision)]
        )
        met += best <= task.max_latency_s
    return met / len(sc.tasks) if sc.tasks else 0.0


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if a is None or b is None or not b["latency_ms"]["mean"]:
        return None
    return float(a["latency_ms"]["mean"] / b["latency_ms"]["mean"])


def keys(sc: Scenario, res: dict[str, dict[str, Any] | None], bound: float) -> dict[str, Any]:
    """Return the issue's figures for one scenario at one load (``bound``: idle_fleet_bound)."""
    base = {n: res[n] for n in BASELINES}
    best = max(REALIZABLE, key=lambda n: base[n]["attainment"])  # type: ignore[index]
    slo = res["slo-first"]
    best_att = base[best]["attainment"]  # type: ignore[index]
    real = max(REALIZABLE, key=lambda n: base[n]["attainment"])  # type: ignore[index]
    real_att = base[real]["attainment"]  # type: ignore[index]
    clamps = [r["corrections_at_clamp"] for n in POLICIES if (r := res[n]) is not None]
    lf, ll = res["latency-first"], res["least-loaded"]
    return {
        "slo_first_attainment": None if slo is None else slo["attainment"],
        "best_baseline_attainment": best_att,
        "best_baseline": best,
        "slo_first_minus_best_points": None
        if slo is None
        else 100 * (slo["attainment"] - best_att),
        # for information: the baselines a real scheduler could run (no clairvoyance)
        "best_realizable_baseline": real,
        "best_realizable_baseline_attainment": real_att,
        "slo_first_minus_best_realizable_points": None
        if slo is None
        else 100 * (slo["attainment"] - real_att),
        "oracle_attainment": res["oracle"]["attainment"],  # type: ignore[index]
        # an upper bound on any scheduler (the oracle is an earliest-finish greedy, not one)
        "idle_fleet_bound": bound,
        "idle_fleet_bound_n": len(sc.tasks),
        "plus_10_points_possible": best_att + 0.10 <= bound,
        "lat_first_vs_oracle": _ratio(lf, res["oracle"]),
        "exploration_by_policy": {
            n: None if (r := res[n]) is None else r["exploration"] for n in POLICIES
        },
        "balanced_vs_least_loaded": _ratio(res["balanced"], ll),
        "corrections_at_clamp": None if None in clamps else sum(clamps),
        "corrections_at_clamp_by_policy": {
            n: None if (r := res[n]) is None else r["corrections_at_clamp"] for n in POLICIES
        },
        "published_share": sc.published_share,
        "energy_j": {n: None if r is None else r["energy_j"] for n, r in res.items()},
        "balanced_energy_vs_least_loaded": None
        if res["balanced"] is None or ll is None
        else res["balanced"]["energy_j"] / ll["energy_j"],
        "slo_first_energy_vs_best_baseline": None
        if slo is None
        else slo["energy_j"] / base[best]["energy_j"],  # type: ignore[index]
        "attainment": {n: None if r is None else r["attainment"] for n, r in res.items()},
        "attainment_by_class": {n: None if r is None else r["by_class"] for n, r in res.items()},
        "by_class_n": base[best]["by_class_n"],  # type: ignore[index]
        "latency_mean_ms": {
            n: None if r is None else r["latency_ms"]["mean"] for n, r in res.items()
        },
        "latency_p99_ms": {
            n: None if r is None else r["latency_ms"]["p99"] for n, r in res.items()
        },
        "latency_n": {n: None if r is None else r["latency_n"] for n, r in res.items()},
        "capacity_tasks_per_s": sc.capacity_tasks_per_s,
        "offered_load_vs_lp_capacity": sc.offered_load,
        "deadline_retries_slo_first": None if slo is None else slo["deadline_retries"],
    }


def verdicts(by: dict[str, dict[str, dict[str, Any]]]) -> dict[str, str]:
    """Return 'met' / 'missed' / 'n/a (...)' for each target, scenario and load."""
    out: dict[str, str] = {}
    for scen, loads in by.items():
        for load, k in loads.items():
            margin = 10.0 if load == "80%" else 0.0  # points over the best baseline
            for key, op, bound in (
                ("slo_first_minus_best_points", ">=", margin),
                ("lat_first_vs_oracle", "<=", 1.05),
                ("balanced_vs_least_loaded", "<=", 1.0),
                ("corrections_at_clamp", "<=", 0),
            ):
                value = k[key]
                ok = value is not None and (value >= bound if op == ">=" else value <= bound)
                verdict = "n/a (not measurable yet)" if value is None else "met" if ok else "missed"
                if (
                    verdict == "missed"
                    and margin
                    and key.startswith("slo_first")
                    and not k["plus_10_points_possible"]
                ):  # said, not excused: the target stays missed in all_targets_met
                    verdict = "missed (impossible: the best baseline leaves under 10 points)"
                out[f"{scen}@{load} {key} {op} {bound:g}"] = verdict
    return out


def table(res: dict[str, dict[str, Any] | None]) -> str:
    """Return one run's figures as a plain-text table."""
    head = f"{'chooser':<17}{'met':>7}" + "".join(f"{c:>8}" for c in CLASSES)
    rows = [head + f"{'mean ms':>9}{'p99 ms':>9}{'n':>7}{'energy J':>10}{'clamped':>8}"]
    for name, m in res.items():
        if m is None:
            rows.append(f"{name:<17}  (no such policy in this build)")
            continue
        by = m["by_class"]
        lat = m["latency_ms"]
        clamp = m.get("corrections_at_clamp", "-")
        rows.append(
            f"{name:<17}{100 * m['attainment']:>6.1f}%"
            + "".join(f"{100 * by[c]:>7.1f}%" for c in CLASSES)
            + f"{lat['mean']:>9.2f}{lat['p99']:>9.1f}{m['latency_n']:>7}{m['energy_j']:>10.1f}"
            + f"{'-' if clamp is None else clamp:>8}"
        )
    return "\n".join(rows)


def main() -> None:
    """Run both scenarios at both loads; print the tables and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="800 tasks per run (CI smoke)")
    args = parser.parse_args()
    n = 800 if args.quick else args.tasks
    t0 = time.perf_counter()
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for scen, build in SCENARIOS.items():
        by[scen] = {}
        for load in (0.5, 0.8):
            sc = build(load, n, args.seed)
            res = run_one(sc, args.seed)
            bound = idle_fleet_bound(sc, FleetState(sc.fleet, sc.truth, sc.feasible, _memory(sc)))
            print(
                f"== {scen} at {load:.0%} load ({sc.capacity_tasks_per_s:.0f} tasks/s LP "
                f"capacity; offered {sc.offered_load:.2f} of it), {n} tasks, "
                f"{100 * sc.published_share:.0f}% published pairs"
            )
            print(table(res))
            print(
                f"idle-fleet bound (no scheduler meets more): {100 * bound:.1f}% of {n}; "
                "the oracle is an earliest-finish greedy, not optimal for deadlines"
            )
            by[scen][f"{load:.0%}"] = keys(sc, res, bound)
    verdict = verdicts(by)
    judged = [v for v in verdict.values() if not v.startswith("n/a")]
    summary: dict[str, Any] = {
        "scenarios": by,
        "verdicts": verdict,
        "all_targets_met": None if len(judged) < len(verdict) else all(v == "met" for v in judged),
        "api": {
            "slo_first": "slo-first" in TEMPLATES,
            "started": slo_agents.HAS_STARTED,
            "candidates": slo_agents.HAS_CANDIDATES,
        },
        "tasks_per_run": n,
        "seed": args.seed,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
