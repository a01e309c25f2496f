"""Issue 8 in the simulator: peak shifting on real grid intensities, FPGA exclusive vs shared.

Run: ``python benchmarks/bench_sim_seed.py [--days D] [--seed S]``.
Prints the carbon runs per start date and the FPGA runs, then one JSON line. All figures
are simulated (ground truth: published per-model latencies, see docs/simulator.md); the
intensities are the real hourly 2022 series in benchmarks/data/carbon_intensity.
``pool_isolation_violations``: a flooding tenant against resource pools
(``benchmarks/bench_sim_pools.py`` has the full comparison).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from cloud_hub.simulator import load_fleet, load_workload
from cloud_hub.simulator.carbon_run import compare
from cloud_hub.simulator.fpga import FPGA_LABEL, compare_fpga
from edge_agent.placement import Policy

ROOT = Path(__file__).resolve().parents[1]
FLEET = ROOT / "examples" / "fleet_carbon_sites.json"
STARTS = {"2022-01-10": 216, "2022-04-01": 2160, "2022-07-01": 4344, "2022-10-01": 6552}
POLICY = Policy("carbon-aware", {"carbon": 0.4, "latency": 0.4, "balance": 0.2})


def write_trace(path: Path, days: int, seed: int) -> None:
    """Write a seeded trace: a request a minute per box, plus hourly deferrable batch jobs."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    span = days * 86400.0
    for box in ("ca", "tx"):
        for t in np.arange(rng.uniform(0, 60), span, 60.0):
            rows.append(
                {"t": float(t), "model": "mobilenet_v2", "max_latency_ms": 100, "origin": box}
            )
        for t in np.sort(rng.uniform(0, span, size=24 * days)):
            deadline = float(rng.uniform(12, 24) * 3600)
            rows.append(
                {
                    "t": float(t),
                    "model": "resnet50",
                    "work": 50000,
                    "max_latency_ms": deadline * 1e3,
                    "origin": box,
                    "deferrable": True,
                    "deadline_s": deadline,
                    "tenant": "batch",
                }
            )
    rows.sort(key=lambda r: r["t"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def carbon(days: int, seed: int, published_only: bool = False) -> dict[str, Any]:
    """Return the peak-shifting comparison for each start date, and the pooled saving."""
    doc = json.loads(FLEET.read_text(encoding="utf-8"))
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        write_trace(trace, days, seed)
        workload = load_workload(trace)
        for label, hour in STARTS.items():
            for box in doc["boxes"]:
                box["carbon_series"]["start_hour"] = hour
            fleet_path = Path(tmp) / "fleet.json"
            fleet_path.write_text(json.dumps(doc), encoding="utf-8")
            runs[label] = compare(
                load_fleet(fleet_path), workload, POLICY, seed=seed, published_only=published_only
            )
    base = sum(r["at_once"]["co2_g_deferrable"] for r in runs.values())
    shifted = sum(r["shifted"]["co2_g_deferrable"] for r in runs.values())
    return {
        "runs": runs,
        "carbon_saving_deferrable": 1.0 - shifted / base,
        "deadline_misses": sum(r["deadline_misses"] for r in runs.values()),
        "published_share": min(r["published_share"] for r in runs.values()),
        "tasks_n": sum(r["at_once"]["tasks"] for r in runs.values()),
    }


def _pools() -> dict[str, int]:
    """Return the pool isolation figures with pools and without (cloud_hub/simulator/pools)."""
    from cloud_hub.simulator.pools import compare_pools

    runs = compare_pools()
    return {
        "pool_isolation_violations": runs["pools"]["pool_isolation_violations"],
        "pool_isolation_violations_without_pools": runs["without_pools"][
            "pool_isolation_violations"
        ],
    }


def main() -> None:
    """Run the carbon and FPGA scenarios, print a summary and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fpga-tasks", type=int, default=1000)
    args = parser.parse_args()
    t0 = time.perf_counter()
    co2 = carbon(args.days, args.seed)
    print(f"peak shifting, policy {POLICY.name}, {args.days} days from each start date")
    print(f"{'start':<12}{'g at once':>12}{'g shifted':>12}{'saving':>8}{'misses':>8}{'held':>6}")
    for label, r in co2["runs"].items():
        a, s = r["at_once"], r["shifted"]
        print(
            f"{label:<12}{a['co2_g_deferrable']:>12.1f}{s['co2_g_deferrable']:>12.1f}"
            f"{r['carbon_saving_deferrable']:>8.1%}{r['deadline_misses']:>8}{s['deferred']:>6}"
        )
    co2_pub = carbon(args.days, args.seed, published_only=True)
    print(
        f"published pairs only: saving {co2_pub['carbon_saving_deferrable']:.1%}, "
        f"misses {co2_pub['deadline_misses']}"
    )
    fpga = compare_fpga(args.fpga_tasks, args.seed)
    print(f"\nFPGA, offered load {fpga['offered_load']:.0%} of the full fabric ({FPGA_LABEL})")
    for mode in ("exclusive", "shared"):
        m = fpga[mode]
        print(
            f"{mode:<10} util {m['fpga_util']:.1%}  reconfigs {m['reconfigs']:>5}  "
            f"rejected {m['rejected']}  "
            f"makespan {m['makespan_s']:.0f} s  p50 latency {m['latency_p50_s']:.2f} s"
        )
    out = {
        "carbon_saving_deferrable": round(co2["carbon_saving_deferrable"], 4),
        "deadline_misses": co2["deadline_misses"],
        "carbon_published_share": round(co2["published_share"], 3),
        "carbon_tasks_n": co2["tasks_n"],
        "published_only": {
            "carbon_saving_deferrable": round(co2_pub["carbon_saving_deferrable"], 4),
            "deadline_misses": co2_pub["deadline_misses"],
        },
        "fpga_util_exclusive": round(fpga["exclusive"]["fpga_util"], 4),
        "fpga_util_shared": round(fpga["shared"]["fpga_util"], 4),
        "fpga_label": "simulated",
        "fpga_offered_load": fpga["offered_load"],
        "fpga_rejected": fpga["exclusive"]["rejected"] + fpga["shared"]["rejected"],
        "fpga_tasks_n": args.fpga_tasks,
        "fpga_published_share": min(fpga[m]["published_share"] for m in ("exclusive", "shared")),
        **_pools(),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
