"""The hub protocol's shared pieces: request signing and header names (docs/hub-protocol.md).

A signed request carries ``X-Hetmesh-Agent`` (the agent id), ``X-Hetmesh-Time`` (Unix seconds)
and ``X-Hetmesh-Signature``: hex HMAC-SHA256, keyed with the agent's fleet credential, of
``METHOD\\nPATH\\nTIME\\nSHA256(body) hex``.
"""

from __future__ import annotations

import hmac
import re
import secrets

# the signing scheme is defined once, on the agent side (cloud_hub may import edge_agent)
from edge_agent.agent.hub_auth import (
    AGENT_HEADER,
    SIGNATURE_HEADER,
    TIME_HEADER,
    signature,
    signed_headers,
)

__all__ = [
    "AGENT_HEADER",
    "AGENT_ID",
    "MAX_BATCH",
    "RECORD_KINDS",
    "SIGNATURE_HEADER",
    "TIME_HEADER",
    "new_key",
    "signature",
    "signed_headers",
    "verify",
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


def verify(key: str, method: str, path: str, timestamp: str, body: bytes, given: str) -> bool:
    """Return whether ``given`` is the request's signature under ``key`` (constant time)."""
    return hmac.compare_digest(signature(key, method, path, timestamp, body), given.lower())
