"""Signing between an agent and the hub (docs/hub-protocol.md §2) and the hub's discovery proof.

The hub speaks the mesh's one signing scheme (``edge_agent.mesh.credential``): method,
path+query, body hash, timestamp, nonce, sender id and recipient (the hub's id) under the
agent's key from enrolment; the hub refuses a request signed for another hub and a nonce it
has seen within its window, and signs every answer to a verified request over that nonce, as
its id to the agent's id, so the agent knows the answer came from the hub that holds its key.
"""

from __future__ import annotations

import hashlib
import hmac

from edge_agent.mesh.credential import (
    H_AGENT,
    H_NONCE,
    H_RECIPIENT,
    H_RESPONSE,
    H_SIGNATURE,
    H_TIMESTAMP,
    FleetKey,
    sign_request,
    sign_response,
    verify_response,
)

__all__ = [
    "AGENT_HEADER",
    "NONCE_HEADER",
    "RECIPIENT_HEADER",
    "RESPONSE_HEADER",
    "SIGNATURE_HEADER",
    "TIME_HEADER",
    "hub_proof",
    "sign_answer",
    "signed_headers",
    "verify_answer",
]

AGENT_HEADER = H_AGENT
TIME_HEADER = H_TIMESTAMP
NONCE_HEADER = H_NONCE
RECIPIENT_HEADER = H_RECIPIENT
SIGNATURE_HEADER = H_SIGNATURE
RESPONSE_HEADER = H_RESPONSE


def signed_headers(
    agent_id: str, key: str, hub_id: str, method: str, path: str, body: bytes, now: float
) -> dict[str, str]:
    """Return the headers that sign one request from ``agent_id`` to hub ``hub_id`` only."""
    headers = sign_request(FleetKey(key), agent_id, method, path, body, to=hub_id, now=now)
    headers["Content-Type"] = "application/json"
    return headers


def sign_answer(
    key: FleetKey, hub_id: str, agent_id: str, nonce: str, status: int, body: bytes
) -> str:
    """Return hub ``hub_id``'s signature on its answer to ``agent_id``'s request ``nonce``."""
    return sign_response(key, hub_id, nonce, status, body, to=agent_id)


def verify_answer(
    key: str,
    hub_id: str,
    agent_id: str,
    nonce: str,
    status: int,
    body: bytes,
    signature: str | None,
) -> None:
    """Raise AuthError unless hub ``hub_id`` signed this answer to ``agent_id``'s ``nonce``."""
    verify_response(FleetKey(key), hub_id, nonce, status, body, signature, to=agent_id)


def hub_proof(join_token: str, hub_id: str, endpoint: str, nonce: str) -> str:
    """Return the hub's answer to a discovery ``nonce``: hex HMAC-SHA256 keyed with the join token.

    Before enrolment the agent shares no key with a discovered hub, only the join token;
    docs/hub-protocol.md §8 says why the proof names the hub's id and endpoint.
    """
    message = f"hetmesh-hub-proof\n{hub_id}\n{endpoint}\n{nonce}".encode()
    return hmac.new(join_token.encode(), message, hashlib.sha256).hexdigest()
