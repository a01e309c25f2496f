"""The tasks-by-state gauge, kept as plain counts, exposes what a Prometheus ``Gauge`` would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from edge_agent.agent.core.store import STATES
from edge_agent.agent.web.metrics import AgentMetrics

MOVES = [
    (None, "queued", 5),
    ("queued", "placed", 4),
    ("placed", "running", 1),
    ("placed", "running", 1),
    ("running", "done", 1),
    ("running", "failed", 1),
    ("queued", "cancelled", 1),
    ("placed", "offloaded", 1),
    ("offloaded", "done", 1),
]


def _family(text: str) -> list[str]:
    return [line for line in text.splitlines() if "hetmesh_agent_tasks" in line]


def test_moves_and_loaded_counts_read_as_a_gauge_would() -> None:
    metrics = AgentMetrics()
    registry = CollectorRegistry()
    reference = Gauge("hetmesh_agent_tasks", "Tasks by state", ["state"], registry=registry)
    for state in STATES:
        reference.labels(state).set(0)
    metrics.load_counts({"done": 7, "queued": 2})
    reference.labels("done").set(7)
    reference.labels("queued").set(2)
    for old, new, n in MOVES:
        metrics.move(old, new, n)
        if old is not None:
            reference.labels(old).dec(n)
        reference.labels(new).inc(n)
        assert _family(metrics.render().decode()) == _family(generate_latest(registry).decode())
    text = metrics.render().decode()
    assert 'hetmesh_agent_tasks{state="done"} 9.0' in text
    assert 'hetmesh_agent_tasks{state="queued"} 2.0' in text  # 2 loaded + 5 - 4 placed - 1
    assert 'hetmesh_agent_tasks{state="interrupted"} 0.0' in text  # every state, moved or not
