"""The agent side of the hub protocol, for tests, the benchmark and simulated agents.

It is the edge agent's own client (``edge_agent.agent.hub_client``), so everything that
speaks to the hub as an agent does so through one implementation of the protocol.
"""

from __future__ import annotations

from edge_agent.agent.hub_client import HubClient, HubError, HubRejected, HubUnreachable

__all__ = ["HubClient", "HubError", "HubRejected", "HubUnreachable"]
