"""Task throughput and latency over a sliding window, per agent and fleet-wide.

Computed from the ``task`` records agents sync (docs/hub-protocol.md §4): each carries the
task's final ``state`` and, for a task that ran, its measured ``latency_s``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

#: Seconds of task outcomes the dashboard's throughput panel covers.
WINDOW_S = 60.0


def percentile(values: list[float], q: float) -> float | None:
    """Return the ``q`` quantile (0..1) of ``values`` by nearest rank, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _figures(states: list[str], latencies: list[float], window_s: float) -> dict[str, Any]:
    done = states.count("done")
    return {
        "done": done,
        "failed": states.count("failed"),
        "cancelled": states.count("cancelled"),
        "per_s": round(done / window_s, 3),
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p95_s": percentile(latencies, 0.95),
        "latency_mean_s": sum(latencies) / len(latencies) if latencies else None,
    }


def summarize(
    outcomes: Iterable[tuple[str, str, float | None]], window_s: float = WINDOW_S
) -> dict[str, Any]:
    """Return ``{"window_s", "fleet": figures, "agents": [{"agent_id", **figures}]}``.

    ``outcomes`` are (agent id, final state, measured latency_s or None) of the tasks that
    ended within the window; finished tasks count towards throughput, latency is over the
    ``done`` ones that report a finite latency.
    """
    states: dict[str, list[str]] = {}
    latencies: dict[str, list[float]] = {}
    for agent_id, state, latency in outcomes:
        states.setdefault(agent_id, []).append(state)
        lat = latencies.setdefault(agent_id, [])
        if state == "done" and latency is not None and math.isfinite(latency):
            lat.append(latency)
    every_state = [s for rows in states.values() for s in rows]
    every_latency = [x for rows in latencies.values() for x in rows]
    return {
        "window_s": window_s,
        "fleet": _figures(every_state, every_latency, window_s),
        "agents": [
            {"agent_id": a, **_figures(states[a], latencies[a], window_s)} for a in sorted(states)
        ],
    }
