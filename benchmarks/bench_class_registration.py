"""Registering new model classes on fleets of identical devices; the last line printed is JSON.

    python benchmarks/bench_class_registration.py [--classes 200] [--rounds 5]

A fleet of N identical CPUs (the RK3588's, as many boxes: twins, ``pooling``), one of them
measured on a first model, then ``classes`` new models' classes (none the profile publishes)
registered one by one (``Placer.prepare``: priors, then every device's cold pair started
from its pooled factor and relabelled ``POOLED``, and the explorer told the class's
sources). Timed: the
registrations only, per class, on N = 16 and N = 64 in alternating rounds; printed: the
median per-class time of each and their ratio (4 for a cost linear in the devices; 16 for
one growing with their square). Compare the ratio within one run: this box's speed moves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench_placement import identical_cpus

from edge_agent.placement import Placer, Policy
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract


def _model_task(model: str) -> TaskContract:
    return TaskContract(
        Semantics(gflops=10.0, precision="fp32"), Requirements(), task_class=model, model=model
    )


def registration_us(n_devices: int, classes: int) -> float:
    """Return the mean time (us) to register one new model's class on ``n_devices`` twins."""
    placer = Placer(identical_cpus(n_devices), Policy.template("balanced"))
    seed = placer.place_one(_model_task("seed-net"))
    placer.feedback(seed, latency_s=3.0 * seed.base_s)  # a learned factor the others pool
    tasks = [_model_task(f"net-{k}") for k in range(classes)]
    start = time.perf_counter()
    for task in tasks:
        placer.prepare(task)
    return (time.perf_counter() - start) / classes * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    small: list[float] = []
    large: list[float] = []
    for _ in range(args.rounds):
        small.append(registration_us(16, args.classes))
        large.append(registration_us(64, args.classes))
    s16, s64 = statistics.median(small), statistics.median(large)
    print(f"per class: 16 twins {s16:.1f} us, 64 twins {s64:.1f} us, ratio {s64 / s16:.2f}")
    print(
        json.dumps(
            {
                "register16_us": round(s16, 2),
                "register64_us": round(s64, 2),
                "register64_over_16": round(s64 / s16, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
