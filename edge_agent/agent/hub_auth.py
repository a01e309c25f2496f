"""Signing the agent's requests to the hub (docs/hub-protocol.md §2); the one place it is done.

The hub checks ``X-Hetmesh-Signature`` = hex HMAC-SHA256(key, ``METHOD\\nPATH\\nTIME\\n``
hex SHA256(body)). The mesh signs peer requests with its own scheme for now; when the two
converge, only this module changes.
"""

from __future__ import annotations

import hashlib
import hmac

AGENT_HEADER = "X-Hetmesh-Agent"
TIME_HEADER = "X-Hetmesh-Time"
SIGNATURE_HEADER = "X-Hetmesh-Signature"


def signature(key: str, method: str, path: str, timestamp: str, body: bytes) -> str:
    """Return the hex HMAC-SHA256 of the canonical request under ``key`` (hex)."""
    digest = hashlib.sha256(body).hexdigest()
    message = f"{method.upper()}\n{path}\n{timestamp}\n{digest}".encode()
    return hmac.new(bytes.fromhex(key), message, hashlib.sha256).hexdigest()


def signed_headers(
    agent_id: str, key: str, method: str, path: str, body: bytes, now: float
) -> dict[str, str]:
    """Return the headers that sign one request from ``agent_id``."""
    timestamp = f"{now:.3f}"
    return {
        AGENT_HEADER: agent_id,
        TIME_HEADER: timestamp,
        SIGNATURE_HEADER: signature(key, method, path, timestamp, body),
        "Content-Type": "application/json",
    }
