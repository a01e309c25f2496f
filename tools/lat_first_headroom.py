"""What a perfect piece of cold-start knowledge would be worth to latency-first, paired by seed.

Run: ``python tools/lat_first_headroom.py --fix FIX [--scenario edge-mixed] [--load 0.8]
[--seeds 1-40]``. For each seed, latency-first as learned and latency-first given ``FIX``
before the run are each divided by the same clairvoyant oracle's mean latency, and the
pair's difference is summarised (``slo_sweep.paired_summary``): the headroom a realizable
change aiming at that knowledge could at most take. ``FIX``:

- ``drift``: each device's drift from its published figures (the geometric mean over its
  published pairs, any precision, of true mean / published estimate) known from the start,
  as if every such pair had been measured once (``pooling._redrift`` scales the published
  priors by it; a real measurement replaces its own pair's share). The most that learning
  a device's drift sooner (from an overrun, a twin, a faster re-pool) could give.
- ``cold:WHICH[:SOURCE]``: the cold estimates of ``lat_first_gap.set_true_cold_start`` set
  to the truth: WHICH is ``all``, ``optimistic`` or ``pessimistic``, SOURCE one of
  ``lat_first_gap.SOURCES`` (published at the task's precision, other-precision,
  calibrated, roofline); such a pair counts as measured.
- ``explored:WHICH[:SOURCE]``: the same pairs only marked explored before the run (never
  probed), their estimates left as they are: what exploring them costs.

It reads the simulator's ground truth to *measure* the Placer; the Placer never sees it in
the benchmarks. docs/simulator.md ("What the cold start's knowledge is worth, by kind")
has the figures.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import lat_first_gap as gap

from cloud_hub.simulator import slo_sweep
from cloud_hub.simulator.oracle import ClairvoyantOracle
from cloud_hub.simulator.slo_scenario import Scenario

Fix = Callable[[gap.Agent, Scenario], None]


def set_true_drift(a: gap.Agent, sc: Scenario) -> None:
    """Give each device its true drift from its published figures (module doc: ``drift``)."""
    p = a.placer
    logs: dict[int, dict[int, float]] = {}
    for _first, dev, cls, ratio, label in gap.cold_pairs(a, sc):
        if gap.cold_source(label) in ("published", "other-precision"):
            logs.setdefault(dev, {})[cls] = math.log(ratio)  # measured / published, in log
    for dev, by_class in logs.items():
        for cls, log_drift in by_class.items():
            p._set_drift(dev, cls, log_drift)
        p._redrift(dev)


def parse_fix(text: str) -> Fix:
    """Return the setter for ``--fix`` (``drift``, ``cold:...`` or ``explored:...``)."""
    if text == "drift":
        return set_true_drift
    kind, _, rest = text.partition(":")
    which, _, source = rest.partition(":")
    if kind not in ("cold", "explored") or which not in ("all", "optimistic", "pessimistic"):
        raise SystemExit(
            f"--fix: {text!r}: write drift, or cold: or explored: then all|optimistic|pessimistic"
        )
    if source and source not in gap.SOURCES:
        raise SystemExit(f"--fix: source {source!r} is not one of {', '.join(gap.SOURCES)}")
    only = kind == "explored"
    return lambda a, sc: gap.set_true_cold_start(a, sc, which, source or None, explored_only=only)


def paired(
    scenario: str, load: float, tasks: int, seeds: list[int], fix: Fix
) -> tuple[list[float], list[float]]:
    """Return latency-first / oracle per seed, as learned and given ``fix``."""
    base, fixed = [], []
    for seed in seeds:
        sc = gap.bench.SCENARIOS[scenario](load, tasks, seed)
        oracle = slo_sweep.run_summary(sc, ClairvoyantOracle(seed))
        given = gap.agent(sc)
        fix(given, sc)
        for out, chooser in ((base, gap.agent(sc)), (fixed, given)):
            ratio = slo_sweep.mean_latency_ratio(slo_sweep.run_summary(sc, chooser), oracle)
            if ratio is None:
                raise SystemExit(f"seed {seed}: the oracle placed no task; no latency ratio")
            out.append(ratio)
    return base, fixed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--fix", required=True, help="drift, cold:WHICH[:SOURCE] or explored:WHICH[:SOURCE]"
    )
    parser.add_argument("--scenario", default="edge-mixed", choices=list(gap.bench.SCENARIOS))
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--tasks", type=int, default=6000)
    parser.add_argument("--seeds", default="1-40", help="1-40, 1,3,8 (default 1-40)")
    args = parser.parse_args()
    fix = parse_fix(args.fix)
    seeds = gap.parse_seeds(args.seeds)
    base, fixed = paired(args.scenario, args.load, args.tasks, seeds, fix)
    print(f"{args.scenario} at {args.load:.0%}, as learned -> given {args.fix}:")
    print(" ".join(f"{s}:{b:.3f}->{f:.3f}" for s, b, f in zip(seeds, base, fixed, strict=True)))
    s = slo_sweep.paired_summary(base, fixed)
    se = "n/a" if s["se"] is None else f"{s['se']:.4f}"
    print(
        f"mean {s['base_mean']:.4f} -> {s['variant_mean']:.4f}  diff {s['diff']:+.4f} ± {se}  "
        f"better {s['better']} worse {s['worse']}  seeds > 1.05: "
        f"{s['over_1_05'][0]} -> {s['over_1_05'][1]}  (n {s['n']})"
    )


if __name__ == "__main__":
    main()
