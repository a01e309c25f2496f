"""Deadline metrics of one run: attainment overall and per class, latency, energy.

A task meets its deadline when it was placed and finished within ``max_latency_s`` of its
arrival; a task left unplaced misses. Every percentile carries its sample count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cloud_hub.simulator.engine import Outcome
from cloud_hub.simulator.workload import Task


def deadline_summary(
    tasks: Sequence[Task], out: Outcome, classes: Sequence[str], names: Sequence[str]
) -> dict[str, Any]:
    """Return attainment (overall, per class in ``names``), latency and energy of a run."""
    if len(classes) != len(tasks):
        raise ValueError("deadline_summary: one class per task")
    placed = [i for i, t in enumerate(tasks) if out.device[t.index] >= 0]
    met = [out.latency_s[tasks[i].index] <= tasks[i].max_latency_s for i in placed]
    met_by = dict.fromkeys(names, 0)
    n_by = dict.fromkeys(names, 0)
    for c in classes:
        n_by[c] += 1
    for i, ok in zip(placed, met, strict=True):
        met_by[classes[i]] += ok
    lat = np.array([out.latency_s[tasks[i].index] for i in placed])
    return {
        "attainment": sum(met) / len(tasks) if tasks else None,
        "attainment_n": len(tasks),
        "by_class": {c: met_by[c] / n_by[c] if n_by[c] else None for c in names},
        "by_class_n": n_by,
        "unplaced": len(tasks) - len(placed),
        "latency_ms": {
            "mean": float(lat.mean()) * 1e3 if len(lat) else None,
            "p50": float(np.percentile(lat, 50)) * 1e3 if len(lat) else None,
            "p99": float(np.percentile(lat, 99)) * 1e3 if len(lat) else None,
        },
        "latency_n": len(lat),
        "energy_j": float(sum(out.energy_j[tasks[i].index] for i in placed)),
    }
