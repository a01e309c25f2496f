"""The mesh: authenticated mDNS discovery and exactly-once offload between agents."""

from __future__ import annotations

from edge_agent.mesh.config import MeshConfig, new_agent_id
from edge_agent.mesh.credential import FleetKey, sign_request
from edge_agent.mesh.errors import AuthError, FleetKeyError, MeshError, PeerUnavailable
from edge_agent.mesh.node import MeshNode
from edge_agent.mesh.replay import Verifier

__all__ = [
    "AuthError",
    "FleetKey",
    "FleetKeyError",
    "MeshConfig",
    "MeshError",
    "MeshNode",
    "PeerUnavailable",
    "Verifier",
    "new_agent_id",
    "sign_request",
]
