"""A checksum of placement decisions, to show a kernel or Placer change decides alike.

    python tools/placement_checksum.py            # the installed package
    PYTHONPATH=/tmp/old-site python tools/placement_checksum.py   # another tree's install

Runs ``place_one`` with learning (feedback from hidden per-device speed factors, some far
enough off to pin corrections at a clamp, so both kinds of exploration probe) over 3
policies x 4 candidate shapes (none, tuple, list, frozenset) on both kernel backends, and
hashes every decision's full output row, its reasons and the exploration counters. Equal
lines: the same decisions, bit for bit; the native and twin columns must also agree.
Install the other tree with ``pip install --no-deps --target /tmp/old-site <tree>``.
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_placement import fleet, workload

from edge_agent.placement import Placer, Policy

POLICIES = ("balanced", "latency-first", "slo-first")
SHAPES = ("none", "tuple", "list", "frozenset")


def run(policy: str, shape: str, backend: str, n: int) -> tuple[str, int, int]:
    """Return (hash, optimistic passes, probes) of ``n`` decisions with feedback."""
    p = Placer(fleet(64), Policy.template(policy), backend=backend, clock=lambda: 0.0)  # type: ignore[arg-type]
    ids = p.device_ids
    rng = random.Random(5)
    hidden = {i: rng.choice([0.5, 1.0, 1.0, 2.0, 100.0, 0.01]) for i in range(len(ids))}
    drawn = [rng.sample(ids, 16) for _ in range(8)]
    sets: list = {
        "tuple": [tuple(s) for s in drawn],
        "frozenset": [frozenset(s) for s in drawn],
    }.get(shape, drawn)
    tasks = [p.prepare(t) for t in workload(64)]
    h = hashlib.sha256()
    inflight = []
    for i in range(n):
        decision = p.place_one(
            tasks[i % len(tasks)], candidates=None if shape == "none" else sets[i % len(sets)]
        )
        h.update(repr(list(decision._row)).encode())
        h.update(decision.reasons or b"")
        if decision.placed:
            inflight.append(decision)
        if len(inflight) > 8 or (i % 3 == 0 and inflight):
            done = inflight.pop(0)
            factor = hidden[done.device_indices[0]] * (1 + 0.1 * ((i % 7) - 3) / 3)
            p.feedback(done, latency_s=max(done.service_s * factor, 1e-6))
    stats = p.exploration.stats.as_dict()
    h.update(repr(sorted(stats.items())).encode())
    return h.hexdigest()[:16], int(stats["optimistic_passes"]), int(stats["probes"])


def main() -> int:
    """Print one line per policy and shape, then the checksum of all lines."""
    lines = []
    for policy in POLICIES:
        for shape in SHAPES:
            native = run(policy, shape, "native", 600)
            twin = run(policy, shape, "python", 600)
            line = f"{policy:14s} {shape:9s} native={native} python={twin}"
            lines.append(line)
            print(line + ("" if native == twin else "  BACKENDS DIFFER"), flush=True)
    print("ALL", hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
