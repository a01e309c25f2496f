"""The one signing scheme of hetmesh: HMAC-SHA256 request and response signatures with replay
protection, for agent-to-agent (the mesh's fleet key) and agent-to-hub (each agent's key from
enrolment) alike (docs/mesh.md "Fleet key and trust", docs/hub-protocol.md §2).

A request is signed over its method, path (with query), body hash, timestamp, nonce and
sender id; the receiver rejects a bad signature, a timestamp outside the replay window,
and a nonce it has already seen in that window. A response is signed over the request's
nonce, its status and body hash, so it proves the responder holds the key *now*.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from edge_agent.mesh.errors import AuthError, FleetKeyError

SCHEME = "hetmesh-v1"
H_AGENT = "X-Hetmesh-Agent"
H_TIMESTAMP = "X-Hetmesh-Timestamp"
H_NONCE = "X-Hetmesh-Nonce"
H_SIGNATURE = "X-Hetmesh-Signature"
H_RESPONSE = "X-Hetmesh-Response-Signature"

#: Seconds a request's timestamp may differ from the receiver's clock.
REPLAY_WINDOW_S = 30.0
#: Most nonces remembered; past this, requests are refused until old ones age out.
NONCE_CACHE_MAX = 100_000
#: Most nonces remembered per sender where each sender has its own key (the hub).
NONCE_CACHE_MAX_PER_SENDER = 10_000
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
        self._secret = hashlib.sha256(f"{SCHEME}/key\0{text}".encode()).digest()
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
    method: str, path: str, digest: str, timestamp: str, nonce: str, agent: str
) -> str:
    """Return the canonical text a request signature covers."""
    return "\n".join((SCHEME, "request", method.upper(), path, digest, timestamp, nonce, agent))


def response_message(nonce: str, status: int, digest: str, agent: str) -> str:
    """Return the canonical text a response signature covers."""
    return "\n".join((SCHEME, "response", nonce, str(status), digest, agent))


def sign_request(
    key: FleetKey,
    agent: str,
    method: str,
    path: str,
    body: bytes,
    *,
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """Return the headers that authenticate one request from ``agent``."""
    ts = f"{time.time() if now is None else now:.3f}"
    nonce = nonce or secrets.token_hex(16)
    sig = key.mac(request_message(method, path, body_hash(body), ts, nonce, agent))
    return {H_AGENT: agent, H_TIMESTAMP: ts, H_NONCE: nonce, H_SIGNATURE: sig}


def sign_response(key: FleetKey, agent: str, nonce: str, status: int, body: bytes) -> str:
    """Return the signature header value for a response to the request with ``nonce``."""
    return key.mac(response_message(nonce, status, body_hash(body), agent))


def verify_response(
    key: FleetKey, agent: str, nonce: str, status: int, body: bytes, signature: str | None
) -> None:
    """Raise AuthError unless ``signature`` proves ``agent`` answered the request ``nonce``."""
    if not signature:
        raise AuthError("unsigned_response", f"response from {agent} carries no signature")
    want = sign_response(key, agent, nonce, status, body)
    if not hmac.compare_digest(want, signature):
        raise AuthError("bad_response_signature", f"response from {agent}: bad signature")


def check_request(
    key: FleetKey,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float,
    window_s: float,
) -> tuple[str, str]:
    """Return (sender, nonce) if the signature and timestamp hold; raise AuthError naming why.

    The nonce is not checked for reuse here: that is the receiver's ``NonceCache``.
    """
    agent, ts, nonce, sig = signed_fields(headers)
    try:
        sent = float(ts)
    except ValueError:
        raise AuthError("bad_timestamp", f"timestamp {ts!r} is not a number") from None
    if not abs(now - sent) <= window_s:
        raise AuthError(
            "stale",
            f"{H_TIMESTAMP} {ts} is outside the {window_s:g} s window of the receiver's clock"
            " (check the sender's clock)",
        )
    want = key.mac(request_message(method, path, body_hash(body), ts, nonce, agent))
    if not hmac.compare_digest(want, sig):
        raise AuthError("bad_signature", f"request from {agent!r}: bad signature")
    return agent, nonce


def signed_fields(headers: Mapping[str, str]) -> tuple[str, str, str, str]:
    """Return (agent, timestamp, nonce, signature) from ``headers``; AuthError if any is absent."""
    agent, ts, nonce, sig = (headers.get(h) for h in (H_AGENT, H_TIMESTAMP, H_NONCE, H_SIGNATURE))
    if agent is None or ts is None or nonce is None or sig is None:
        raise AuthError(
            "unsigned",
            f"request is not signed: send {H_AGENT}, {H_TIMESTAMP}, {H_NONCE} and {H_SIGNATURE}",
        )
    return agent, ts, nonce, sig


class NonceCache:
    """The nonces seen within the replay window; bounded, oldest expire first."""

    def __init__(self, window_s: float, cache_max: int) -> None:
        self.window_s = window_s
        self.cache_max = cache_max
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> expiry, oldest first

    def remember(self, nonce: str, now: float) -> None:
        """Record ``nonce``; raise AuthError ``replay`` if it was seen, ``busy`` if full."""
        seen = self._seen
        while seen and next(iter(seen.values())) < now:
            seen.popitem(last=False)
        if nonce in seen:
            raise AuthError(
                "replay", f"nonce {nonce[:12]}... already used: a replayed request is refused"
            )
        if len(seen) >= self.cache_max:
            raise AuthError("busy", "nonce cache full; retry shortly")
        seen[nonce] = now + 2 * self.window_s  # covers any timestamp still inside the window
        seen.move_to_end(nonce)

    def __len__(self) -> int:
        return len(self._seen)


class Verifier:
    """Checks requests signed with one key (the mesh's fleet key); one nonce cache."""

    def __init__(
        self,
        key: FleetKey,
        *,
        window_s: float = REPLAY_WINDOW_S,
        cache_max: int = NONCE_CACHE_MAX,
    ) -> None:
        self.key = key
        self.window_s = window_s
        self.cache_max = cache_max
        self._nonces = NonceCache(window_s, cache_max)

    def verify(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        now: float | None = None,
    ) -> str:
        """Return the sender's agent id (its key: ``key_for``), or raise AuthError naming why."""
        now = time.time() if now is None else now
        key = self.key_for(signed_fields(headers)[0])
        agent, nonce = check_request(
            key, method, path, body, headers, now=now, window_s=self.window_s
        )
        self._cache_for(agent).remember(nonce, now)
        return agent

    def key_for(self, sender: str) -> FleetKey:
        """Return the key ``sender`` must have signed with."""
        return self.key

    def _cache_for(self, sender: str) -> NonceCache:
        return self._nonces

    def __len__(self) -> int:
        return len(self._nonces)


class KeyedVerifier(Verifier):
    """Checks requests each signed with its sender's own key (the hub: each agent's key).

    ``key_of(sender)`` returns the sender's key text, or None for a stranger. Each sender
    has its own bounded nonce cache, so one agent's traffic cannot evict another's.
    """

    def __init__(
        self,
        key_of: Callable[[str], str | None],
        *,
        window_s: float = REPLAY_WINDOW_S,
        cache_max: int = NONCE_CACHE_MAX_PER_SENDER,
    ) -> None:
        self.key_of = key_of
        self.window_s = window_s
        self.cache_max = cache_max
        self._keys: dict[str, tuple[str, FleetKey]] = {}
        self._caches: dict[str, NonceCache] = {}

    def key_for(self, sender: str) -> FleetKey:
        """Return ``sender``'s key; AuthError ``unknown`` if it has none."""
        text = self.key_of(sender)
        if text is None:
            raise AuthError("unknown", f"{sender!r} holds no key here: enrol first")
        cached = self._keys.get(sender)
        if cached is None or cached[0] != text:  # new, or rotated by a re-enrolment
            cached = self._keys[sender] = (text, FleetKey(text))
        return cached[1]

    def _cache_for(self, sender: str) -> NonceCache:
        cache = self._caches.get(sender)
        if cache is None:  # only senders holding a key get here: bounded by enrolment
            cache = self._caches[sender] = NonceCache(self.window_s, self.cache_max)
        return cache

    def __len__(self) -> int:
        return sum(len(c) for c in self._caches.values())
