"""The one signing scheme of hetmesh: HMAC-SHA256 request and response signatures bound to
their recipient, for agent-to-agent (the mesh's fleet key) and agent-to-hub (each agent's key
from enrolment) alike (docs/mesh.md "Fleet key and trust", docs/hub-protocol.md §2,
docs/security.md).

A request is signed over its method, path (with query), body hash, timestamp, nonce, sender
id and recipient id; the receiver refuses a bad signature, a request for someone else, and a
timestamp outside its window (replays within it: ``replay.Verifier``). A response is signed
over the request's nonce, its status, body hash, the responder's id and the requester's id,
so it proves the responder holds the key *now* and answered *this* request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping

from edge_agent.mesh.errors import AuthError, ClockSkew, FleetKeyError

#: What the signed messages start with; a member that speaks another scheme is refused.
SCHEME = "hetmesh-v2"
#: The key derivation's label: unchanged since v1, so the fleet key's fingerprint (announced
#: over mDNS) is too, and an older member is recognised as ours and refused as ``old_scheme``.
KEY_SCHEME = "hetmesh-v1"
H_AGENT = "X-Hetmesh-Agent"
H_RECIPIENT = "X-Hetmesh-Recipient"
H_TIMESTAMP = "X-Hetmesh-Timestamp"
H_NONCE = "X-Hetmesh-Nonce"
H_SIGNATURE = "X-Hetmesh-Signature"
H_RESPONSE = "X-Hetmesh-Response-Signature"
MIN_KEY_CHARS = 16


def body_hash(body: bytes) -> str:
    """Return the hex SHA-256 of a body."""
    return hashlib.sha256(body).hexdigest()


class FleetKey:
    """The shared secret of one fleet; never printed, only its fingerprint is public."""

    __slots__ = ("_secret", "fingerprint")

    def __init__(self, text: str) -> None:
        text = text.strip()
        if len(text) < MIN_KEY_CHARS:
            raise FleetKeyError(
                f"fleet key too short ({len(text)} characters): give at least "
                f"{MIN_KEY_CHARS}, e.g. one from FleetKey.generate()"
            )
        self._secret = hashlib.sha256(f"{KEY_SCHEME}/key\0{text}".encode()).digest()
        self.fingerprint = hashlib.sha256(b"fingerprint\0" + self._secret).hexdigest()[:16]

    @staticmethod
    def generate() -> str:
        """Return a new random fleet key text (256 bits)."""
        return secrets.token_urlsafe(32)

    def __repr__(self) -> str:
        return f"<FleetKey fingerprint={self.fingerprint} secret=***>"

    def mac(self, message: str) -> str:
        """Return the hex HMAC-SHA256 of ``message`` under this key."""
        return hmac.new(self._secret, message.encode(), hashlib.sha256).hexdigest()


def request_message(
    method: str, path: str, digest: str, timestamp: str, nonce: str, agent: str, to: str
) -> str:
    """Return the canonical text a request signature covers."""
    fields = (SCHEME, "request", method.upper(), path, digest, timestamp, nonce, agent, to)
    return "\n".join(fields)


def response_message(nonce: str, status: int, digest: str, responder: str, to: str) -> str:
    """Return the canonical text a response signature covers."""
    return "\n".join((SCHEME, "response", nonce, str(status), digest, responder, to))


def sign_request(
    key: FleetKey,
    agent: str,
    method: str,
    path: str,
    body: bytes,
    *,
    to: str,
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """Return the headers that authenticate one request from ``agent`` to ``to`` only."""
    ts = f"{time.time() if now is None else now:.3f}"
    nonce = nonce or secrets.token_hex(16)
    sig = key.mac(request_message(method, path, body_hash(body), ts, nonce, agent, to))
    return {
        H_AGENT: agent,
        H_RECIPIENT: to,
        H_TIMESTAMP: ts,
        H_NONCE: nonce,
        H_SIGNATURE: sig,
    }


def sign_response(
    key: FleetKey, responder: str, nonce: str, status: int, body: bytes, *, to: str
) -> str:
    """Return the signature header value for ``responder``'s answer to ``to``'s request."""
    return key.mac(response_message(nonce, status, body_hash(body), responder, to))


def verify_response(
    key: FleetKey,
    responder: str,
    nonce: str,
    status: int,
    body: bytes,
    signature: str | None,
    *,
    to: str,
) -> None:
    """Raise AuthError unless ``signature`` proves ``responder`` answered ``to``'s ``nonce``."""
    if not signature:
        raise AuthError("unsigned_response", f"response from {responder} carries no signature")
    want = sign_response(key, responder, nonce, status, body, to=to)
    if not hmac.compare_digest(want, signature):
        raise AuthError("bad_response_signature", f"response from {responder}: bad signature")


def check_request(
    key: FleetKey,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    me: str,
    now: float,
    window_s: float,
) -> tuple[str, str, float]:
    """Return (sender, nonce, timestamp) if the request is signed for ``me`` within the window.

    Checked in this order, so the reason is exact: the signature (``bad_signature``), then
    the recipient (``wrong_recipient``: genuine, but captured and sent to someone else), then
    the timestamp (``ClockSkew``, reason ``stale``: genuine, so its answer may be signed and
    carry the receiver's time). Nonce reuse is the receiver's ``replay.NonceCache``.
    """
    agent, to, ts, nonce, sig = signed_fields(headers)
    try:
        sent = float(ts)
    except ValueError:
        raise AuthError("bad_timestamp", f"timestamp {ts!r} is not a number") from None
    want = key.mac(request_message(method, path, body_hash(body), ts, nonce, agent, to))
    if not hmac.compare_digest(want, sig):
        raise AuthError("bad_signature", f"request from {agent!r}: bad signature")
    if to != me:
        raise AuthError(
            "wrong_recipient",
            f"request from {agent!r} is signed for {to[:64]!r}, not {me!r}: a replayed request"
            " is refused",
        )
    if not abs(now - sent) <= window_s:  # also refuses NaN
        raise ClockSkew(sent - now, window_s, nonce)
    return agent, nonce, sent


def signed_fields(headers: Mapping[str, str]) -> tuple[str, str, str, str, str]:
    """Return (agent, recipient, timestamp, nonce, signature); AuthError if any is absent."""
    agent, to, ts, nonce, sig = (
        headers.get(h) for h in (H_AGENT, H_RECIPIENT, H_TIMESTAMP, H_NONCE, H_SIGNATURE)
    )
    if agent is None or ts is None or nonce is None or sig is None:
        raise AuthError(
            "unsigned",
            f"request is not signed: send {H_AGENT}, {H_RECIPIENT}, {H_TIMESTAMP}, {H_NONCE}"
            f" and {H_SIGNATURE}",
        )
    if to is None:
        raise AuthError(
            "old_scheme",
            f"request from {agent[:64]!r} has no {H_RECIPIENT}: the sender speaks an older"
            f" signing scheme than {SCHEME}; upgrade it",
        )
    return agent, to, ts, nonce, sig
