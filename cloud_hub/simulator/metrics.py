"""Scheduling-quality metrics of one run, as a JSON-ready document."""

from __future__ import annotations

from typing import Any

import numpy as np

from cloud_hub.simulator.engine import FleetState, Outcome
from cloud_hub.simulator.workload import Task


def summarize(
    tasks: list[Task], out: Outcome, state: FleetState, decision_s: float | None = None
) -> dict[str, Any]:
    """Return latency, SLO, energy, makespan, utilization and decision overhead of a run.

    ``decision_s`` is the mean time of one placement decision; the chooser's whole
    per-task time is used when it is not given.
    """
    n = len(tasks)
    placed = [i for i in range(n) if out.device[i] >= 0]
    lat = np.array([out.latency_s[i] for i in placed]) if placed else np.zeros(1)
    met = sum(1 for i in placed if out.latency_s[i] <= tasks[i].max_latency_s)
    start = min(t.t for t in tasks)
    makespan = max(out.finish_s) - start
    busy: dict[str, float] = {}
    count: dict[str, int] = {}
    for sd in state.fleet.devices:
        kind = sd.device.kind.name.lower()
        count[kind] = count.get(kind, 0) + 1
        busy.setdefault(kind, 0.0)
    for i in placed:
        kind = state.fleet.devices[out.device[i]].device.kind.name.lower()
        busy[kind] += out.service_s[i]
    med_service = float(np.median([out.service_s[i] for i in placed])) if placed else 0.0
    per_decision = decision_s if decision_s is not None else out.choose_s / max(n, 1)
    return {
        "tasks": n,
        "completed": len(placed),
        "rejected": n - len(placed),
        "latency_ms": {
            "mean": float(lat.mean()) * 1e3,
            "p50": float(np.percentile(lat, 50)) * 1e3,
            "p99": float(np.percentile(lat, 99)) * 1e3,
        },
        "slo_attainment": met / n,
        "energy_j": float(sum(out.energy_j)),
        "makespan_s": makespan,
        "utilization": {
            k: busy[k] / (count[k] * makespan) if makespan > 0 else 0.0 for k in sorted(busy)
        },
        "decision_us": per_decision * 1e6,
        "chooser_us": out.choose_s / max(n, 1) * 1e6,
        "median_service_ms": med_service * 1e3,
        "overhead_pct": 100.0 * per_decision / med_service if med_service > 0 else 0.0,
        "device_share": _share(out, state),
    }


def _share(out: Outcome, state: FleetState) -> dict[str, float]:
    """Return the fraction of placed tasks per device kind."""
    placed = [d for d in out.device if d >= 0]
    share: dict[str, float] = {}
    for d in placed:
        kind = state.fleet.devices[d].device.kind.name.lower()
        share[kind] = share.get(kind, 0.0) + 1.0 / len(placed)
    return dict(sorted(share.items()))
