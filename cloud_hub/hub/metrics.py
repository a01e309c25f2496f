"""Prometheus metrics of the hub, in its own registry (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from cloud_hub.hub.liveness import STATES

_FAST = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class HubMetrics:
    """The hub's instruments."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.heartbeats = Counter("hetmesh_hub_heartbeats", "Heartbeats accepted", registry=r)
        self.heartbeat_seconds = Histogram(
            "hetmesh_hub_heartbeat_seconds",
            "Heartbeat handling time: verified, stored, answered",
            buckets=_FAST,
            registry=r,
        )
        self.sync_records = Counter(
            "hetmesh_hub_sync_records",
            "Outbox records by outcome (applied, duplicate, lost)",
            ["outcome"],
            registry=r,
        )
        self.auth_failures = Counter(
            "hetmesh_hub_auth_failures", "Refused signed requests", ["reason"], registry=r
        )
        self.agents = Gauge("hetmesh_hub_agents", "Agents by liveness state", ["state"], registry=r)
        for state in STATES:
            self.agents.labels(state).set(0)
        self.stream_clients = Gauge(
            "hetmesh_hub_stream_clients", "Dashboard event-stream subscribers", registry=r
        )

    def set_states(self, counts: dict[str, int]) -> None:
        """Set the agents-by-state gauge."""
        for state in STATES:
            self.agents.labels(state).set(counts.get(state, 0))

    def render(self) -> bytes:
        """Return the exposition text."""
        return generate_latest(self.registry)
