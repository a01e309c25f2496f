"""Issue 8 in the simulator: resource pools under a flooding tenant.

Run: ``python benchmarks/bench_sim_pools.py [--seed S] [--duration D]``.
One emulated RK3588 (its CPU), a steady tenant and a tenant that floods for most of the
run, without pools, with pools, and with the flooder allowed to borrow; the pool rules are
the agent's own (``edge_agent.placement.pools``). Prints a table, then one JSON line.
``pool_isolation_violations`` (target 0) is defined in ``cloud_hub/simulator/pools.py``.
All figures are simulated: service times are the placer's roofline estimates.
"""

from __future__ import annotations

import argparse
import json
import time

from cloud_hub.simulator.pools import FloodScenario, compare_pools


def main() -> None:
    """Run the three cases, print them and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds simulated")
    args = parser.parse_args()
    t0 = time.perf_counter()
    window = (args.duration / 6, args.duration * 5 / 6)
    runs = compare_pools(
        FloodScenario(duration_s=args.duration, flood_window=window, seed=args.seed)
    )
    print(f"flood {window[0]:.0f}-{window[1]:.0f} s of {args.duration:.0f} s (simulated)")
    print(f"{'case':<22}{'violations':>11}{'steady p99 ms':>15}{'flood done':>12}{'yielded':>9}")
    for case, r in runs.items():
        print(
            f"{case:<22}{r['pool_isolation_violations']:>11}{r['steady_wait_p99_ms']:>15.1f}"
            f"{r['flood_tasks_done']:>12}{r['yielded']:>9}"
        )
    out = {
        "pool_isolation_violations": runs["pools"]["pool_isolation_violations"],
        "pool_isolation_violations_flood_borrows": runs["pools_flood_borrows"][
            "pool_isolation_violations"
        ],
        "pool_isolation_violations_without_pools": runs["without_pools"][
            "pool_isolation_violations"
        ],
        "steady_entitled": runs["pools"]["steady_entitled"],
        "steady_wait_p99_ms": runs["pools"]["steady_wait_p99_ms"],
        "steady_wait_p99_ms_without_pools": runs["without_pools"]["steady_wait_p99_ms"],
        "steady_wait_n": runs["pools"]["steady_tasks"],
        "steady_wait_n_without_pools": runs["without_pools"]["steady_tasks"],
        # service times are the Placer's estimate for identical CPU tasks: the figure is
        # queueing order under the pool rules, it does not grade the kernel's estimates
        "published_share": None,
        "entitled_wait_ms": runs["pools"]["entitled_wait_ms"],
        "label": "simulated",
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
