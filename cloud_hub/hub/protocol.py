"""The hub protocol's shared pieces: header names, agent ids, record kinds (docs/hub-protocol.md).

Requests are signed with hetmesh's one signing scheme (``edge_agent.mesh.credential``, via
``edge_agent.agent.hub_auth``): ``X-Hetmesh-Agent``, ``-Timestamp``, ``-Nonce`` and
``-Signature``, and ``X-Hetmesh-Recipient`` (the hub's id): HMAC-SHA256 under the agent's
key over method, path+query, body hash, timestamp, nonce, agent id and hub id; answers carry
``X-Hetmesh-Response-Signature`` (over the nonce, status, body, hub id and agent id).
"""

from __future__ import annotations

import re
import secrets

# the signing scheme is defined once, on the agent side (cloud_hub may import edge_agent)
from edge_agent.agent.hub_auth import (
    AGENT_HEADER,
    NONCE_HEADER,
    RECIPIENT_HEADER,
    RESPONSE_HEADER,
    SIGNATURE_HEADER,
    TIME_HEADER,
    signed_headers,
)

__all__ = [
    "AGENT_HEADER",
    "AGENT_ID",
    "MAX_BATCH",
    "NONCE_HEADER",
    "RECIPIENT_HEADER",
    "RECORD_KINDS",
    "RESPONSE_HEADER",
    "SIGNATURE_HEADER",
    "TIME_HEADER",
    "new_key",
    "signed_headers",
]

#: Agent ids: 1-64 of letters, digits, ``.``, ``_``, ``-``.
AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Kinds of outbox records the hub accepts.
RECORD_KINDS = ("task", "decision", "telemetry")
#: Most records in one sync batch.
MAX_BATCH = 1000


def new_key() -> str:
    """Return a fresh fleet credential: 32 random bytes, hex."""
    return secrets.token_hex(32)
