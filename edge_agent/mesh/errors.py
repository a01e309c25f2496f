"""The mesh's exceptions; the class says what the caller does next."""

from __future__ import annotations

import math

from edge_agent.errors import HetmeshError, InvalidInput


class MeshError(HetmeshError):
    """Base of every mesh error."""


class FleetKeyError(InvalidInput):
    """The fleet key given is unusable; the message says how to fix it."""


class AuthError(MeshError):
    """A signed request or response failed verification; reject it, never retry as is."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # a short metric label: bad_signature, stale, replay, ...


class ClockSkew(AuthError):
    """A genuine request whose timestamp is outside the receiver's window: a clock problem.

    The signature held, so the receiver may sign its refusal (and say its own time); the
    sender's credential is fine and must not be replaced for this.
    """

    def __init__(self, skew_s: float, window_s: float, nonce: str) -> None:
        shown = f"{skew_s:+.0f}" if math.isfinite(skew_s) else str(skew_s)
        super().__init__(
            "stale",
            f"timestamp is {shown} s from the receiver's clock, outside its {window_s:g} s"
            " window: fix the sender's (or the receiver's) clock (NTP)",
        )
        self.skew_s = skew_s  # sender's clock minus receiver's
        self.nonce = nonce


class PeerUnavailable(MeshError):
    """A peer could not be reached or did not answer in time; place the work elsewhere."""

    def __init__(self, peer: str, message: str, *, refused: bool = False) -> None:
        super().__init__(f"peer {peer}: {message}")
        self.peer = peer
        self.refused = refused  # nothing listens there: the peer process is gone


class AdvertError(InvalidInput):
    """An advertisement would be malformed or too large; names the field."""
