"""Deadlines and latency across unequal devices (issue 13, item 7), through the Placer API.

Run: ``python benchmarks/bench_sim_slo.py [--tasks N] [--seed S] [--quick] [--lat-seeds 1-20]``
(the installed package, native kernel: about 70 s, and about 3 min more for the seed sweep
below; ``PYTHONPATH=.`` runs the python twin, several times slower).

``lat_first_vs_oracle`` is seed ``--seed``'s alone. At 80% load one seed is a poor
estimate (a backlog from a few early decisions may stay for the whole run), so
``lat_first_vs_oracle_seeds`` gives the same figure over ``--lat-seeds`` (mean, standard
error, worst, best, each seed's) and ``lat_first_vs_oracle_seed_mean`` judges its mean
(``cloud_hub.simulator.slo_sweep``, also ``tools/lat_first_gap.py --seeds``).

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

from cloud_hub.simulator import slo_agents, slo_sweep
from cloud_hub.simulator.baselines import LeastLoadedChooser, RoundRobinChooser
from cloud_hub.simulator.engine import Chooser, FleetState
from cloud_hub.simulator.oracle import ClairvoyantOracle, DatasheetGreedy
from cloud_hub.simulator.slo_scenario import (
    CLASSES,
    Scenario,
    edge_scenario,
    published_scenario,
)
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
#: --lat-seeds' defaults: the seeds latency-first / oracle is also averaged over (about
#: 3.2 min more with the native kernel at 6000 tasks: 1.6 s a seed per scenario and load)
#: and --quick's
LAT_SEEDS, LAT_SEEDS_QUICK = "1-20", "1-2"
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


def run_one(sc: Scenario, seed: int) -> dict[str, dict[str, Any] | None]:
    """Run every policy and baseline over one scenario's tasks; return their metrics."""
    results: dict[str, dict[str, Any] | None] = {}
    for name in POLICIES:
        if name not in TEMPLATES:
            results[name] = None
            continue
        agent = slo_sweep.policy_chooser(sc, Policy.template(name), slo_agents.SloAgentChooser)
        doc = slo_sweep.run_summary(sc, agent)
        doc["corrections_at_clamp"] = agent.clamped()
        doc["deadline_retries"] = agent.deadline_retries
        doc["place_us"] = agent.place_s / max(agent.decisions, 1) * 1e6
        doc["exploration"] = agent.placer.exploration.stats.as_dict()
        results[name] = doc
    for name, make in BASELINES.items():
        results[name] = slo_sweep.run_summary(sc, make(seed))
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
        "lat_first_vs_oracle": slo_sweep.mean_latency_ratio(lf, res["oracle"]),
        "exploration_by_policy": {
            n: None if (r := res[n]) is None else r["exploration"] for n in POLICIES
        },
        "balanced_vs_least_loaded": slo_sweep.mean_latency_ratio(res["balanced"], ll),
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


def seed_sweep(
    build: Callable[[float, int, int], Scenario],
    load: float,
    n: int,
    seed: int,
    k: dict[str, Any],
    order: list[int],
    seeds: str,
) -> dict[str, Any]:
    """Return latency-first / oracle over ``order`` (``seeds``: as written), checked at ``seed``.

    The sweep's figure for the benchmark's own seed must equal ``lat_first_vs_oracle`` to the
    last digit: the two are one computation, and a difference means they drifted apart.
    """
    ratios = slo_sweep.sweep(build, load, n, order)
    if seed in order and ratios[order.index(seed)] != k["lat_first_vs_oracle"]:
        raise SystemExit(
            f"lat_first_vs_oracle_seeds: seed {seed} gives {ratios[order.index(seed)]!r} in the "
            f"sweep but {k['lat_first_vs_oracle']!r} in the single run; they must be one "
            "computation (slo_sweep.lat_first_vs_oracle against run_one)"
        )
    return slo_sweep.seed_summary(ratios, seeds)


def lat_line(seed: int, k: dict[str, Any]) -> str:
    """Return the table's line for latency-first / oracle: seed ``seed``'s and over the seeds."""
    s = k["lat_first_vs_oracle_seeds"]
    se = "-" if s["se"] is None else f"{s['se']:.4f}"
    one = k["lat_first_vs_oracle"]
    return (
        f"latency-first / oracle mean latency: seed {seed} "
        f"{'-' if one is None else f'{one:.4f}'}; seeds {s['seeds']}: mean {s['mean']:.4f} "
        f"(se {se}), worst {s['worst']:.4f}, best {s['best']:.4f}, n {s['n']}"
    )


def verdicts(by: dict[str, dict[str, dict[str, Any]]]) -> dict[str, str]:
    """Return 'met' / 'missed' / 'n/a (...)' for each target, scenario and load."""
    out: dict[str, str] = {}
    for scen, loads in by.items():
        for load, k in loads.items():
            margin = 10.0 if load == "80%" else 0.0  # points over the best baseline
            for key, op, bound in (
                ("slo_first_minus_best_points", ">=", margin),
                ("lat_first_vs_oracle", "<=", 1.05),
                ("lat_first_vs_oracle_seed_mean", "<=", 1.05),
                ("balanced_vs_least_loaded", "<=", 1.0),
                ("corrections_at_clamp", "<=", 0),
            ):
                value = k[key] if key in k else k["lat_first_vs_oracle_seeds"]["mean"]
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
    parser.add_argument(
        "--lat-seeds",
        help="latency-first / oracle over these seeds too (1-10, 1,3,8; default "
        f"{LAT_SEEDS}, with --quick {LAT_SEEDS_QUICK})",
    )
    args = parser.parse_args()
    n = 800 if args.quick else args.tasks
    lat_text = args.lat_seeds or (LAT_SEEDS_QUICK if args.quick else LAT_SEEDS)
    try:
        lat_seeds = slo_sweep.parse_seeds(lat_text)
    except ValueError as exc:
        parser.error(f"--lat-seeds: {exc}")
    t0 = time.perf_counter()
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for scen, build in SCENARIOS.items():
        by[scen] = {}
        for load in (0.5, 0.8):
            sc = build(load, n, args.seed)
            res = run_one(sc, args.seed)
            memory = slo_sweep.scenario_memory(sc)
            bound = idle_fleet_bound(sc, FleetState(sc.fleet, sc.truth, sc.feasible, memory))
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
            k = by[scen][f"{load:.0%}"] = keys(sc, res, bound)
            k["lat_first_vs_oracle_seeds"] = seed_sweep(
                build, load, n, args.seed, k, lat_seeds, lat_text
            )
            print(lat_line(args.seed, k))
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
