"""Signing between an agent and the hub (docs/hub-protocol.md §2) and the hub's discovery proof.

The hub speaks the mesh's one signing scheme (``edge_agent.mesh.credential``): method,
path+query, body hash, timestamp, nonce and sender id under the agent's key from enrolment;
the hub refuses a nonce it has seen within its window, and signs every answer to a verified
request over that nonce, so the agent knows the answer came from the hub that holds its key.
"""

from __future__ import annotations

import hashlib
import hmac

from edge_agent.mesh.credential import (
    H_AGENT,
    H_NONCE,
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
    "HUB_RESPONDER",
    "NONCE_HEADER",
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
SIGNATURE_HEADER = H_SIGNATURE
RESPONSE_HEADER = H_RESPONSE
#: The responder id in the hub's answer signatures (the key is the agent's own, so only
#: the hub and that agent can make one; the name keeps the two directions apart).
HUB_RESPONDER = "hub"


def signed_headers(
    agent_id: str, key: str, method: str, path: str, body: bytes, now: float
) -> dict[str, str]:
    """Return the headers that sign one request from ``agent_id`` (fresh nonce each call)."""
    headers = sign_request(FleetKey(key), agent_id, method, path, body, now=now)
    headers["Content-Type"] = "application/json"
    return headers


def sign_answer(key: FleetKey, nonce: str, status: int, body: bytes) -> str:
    """Return the hub's signature on its answer to the request that carried ``nonce``."""
    return sign_response(key, HUB_RESPONDER, nonce, status, body)


def verify_answer(key: str, nonce: str, status: int, body: bytes, signature: str | None) -> None:
    """Raise AuthError unless the hub holding ``key`` signed this answer to request ``nonce``."""
    verify_response(FleetKey(key), HUB_RESPONDER, nonce, status, body, signature)


def hub_proof(join_token: str, hub_id: str, endpoint: str, nonce: str) -> str:
    """Return the hub's answer to a discovery ``nonce``: hex HMAC-SHA256 keyed with the join token.

    Before enrolment the agent shares no key with a discovered hub, only the join token;
    docs/hub-protocol.md §8 says why the proof names the hub's id and endpoint.
    """
    message = f"hetmesh-hub-proof\n{hub_id}\n{endpoint}\n{nonce}".encode()
    return hmac.new(join_token.encode(), message, hashlib.sha256).hexdigest()
