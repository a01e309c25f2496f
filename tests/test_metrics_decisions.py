"""The decisions counter, its children looked up once, counts as a plain ``Counter`` would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from edge_agent.agent.web.metrics import AgentMetrics

CALLS = [
    ("latency-first@1", True, 3),
    ("latency-first@1", False, 1),
    ("energy-first@2", True, 1),
    ("latency-first@1", True, 2),
    ("energy-first@2", False, 4),
    ("latency-first@1", False, 1),
]


def _family(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if "hetmesh_agent_decisions" in line]
    return [line for line in lines if "_created" not in line]


def test_decided_reads_as_a_counter_given_the_same_calls() -> None:
    metrics = AgentMetrics()
    registry = CollectorRegistry()
    reference = Counter(
        "hetmesh_agent_decisions",
        "Placement decisions by policy",
        ["policy", "placed"],
        registry=registry,
    )
    for policy, placed, n in CALLS:
        metrics.decided(policy, placed, n)
        reference.labels(policy, str(placed).lower()).inc(n)
        assert _family(metrics.render().decode()) == _family(generate_latest(registry).decode())
    text = metrics.render().decode()
    assert 'hetmesh_agent_decisions_total{placed="true",policy="latency-first@1"} 5.0' in text
    assert 'hetmesh_agent_decisions_total{placed="false",policy="energy-first@2"} 4.0' in text
