"""The hub protocol's shared pieces: request signing and header names (docs/hub-protocol.md).

A signed request carries ``X-Hetmesh-Agent`` (the agent id), ``X-Hetmesh-Time`` (Unix seconds)
and ``X-Hetmesh-Signature``: hex HMAC-SHA256, keyed with the agent's fleet credential, of
``METHOD\\nPATH\\nTIME\\nSHA256(body) hex``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

AGENT_HEADER = "X-Hetmesh-Agent"
TIME_HEADER = "X-Hetmesh-Time"
SIGNATURE_HEADER = "X-Hetmesh-Signature"
#: Agent ids: 1-64 of letters, digits, ``.``, ``_``, ``-``.
AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Kinds of outbox records the hub accepts.
RECORD_KINDS = ("task", "decision", "telemetry")
#: Most records in one sync batch.
MAX_BATCH = 1000


def new_key() -> str:
    """Return a fresh fleet credential: 32 random bytes, hex."""
    return secrets.token_hex(32)


def signature(key: str, method: str, path: str, timestamp: str, body: bytes) -> str:
    """Return the hex HMAC-SHA256 of the canonical request under ``key``."""
    digest = hashlib.sha256(body).hexdigest()
    message = f"{method.upper()}\n{path}\n{timestamp}\n{digest}".encode()
    return hmac.new(bytes.fromhex(key), message, hashlib.sha256).hexdigest()


def signed_headers(
    agent_id: str, key: str, method: str, path: str, body: bytes, now: float
) -> dict[str, str]:
    """Return the headers that sign a request from ``agent_id``."""
    timestamp = f"{now:.3f}"
    return {
        AGENT_HEADER: agent_id,
        TIME_HEADER: timestamp,
        SIGNATURE_HEADER: signature(key, method, path, timestamp, body),
        "Content-Type": "application/json",
    }


def verify(key: str, method: str, path: str, timestamp: str, body: bytes, given: str) -> bool:
    """Return whether ``given`` is the request's signature under ``key`` (constant time)."""
    return hmac.compare_digest(signature(key, method, path, timestamp, body), given.lower())
