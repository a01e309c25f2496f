"""Mesh settings: one frozen dataclass; protocol timers are fields so tests can shorten them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


def new_agent_id() -> str:
    """Return a fresh random agent id (a DNS label)."""
    return f"agent-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class MeshConfig:
    """How one node advertises, trusts, watches and offloads."""

    agent_id: str = field(default_factory=new_agent_id)
    version: str = "0.1.0"
    interfaces: tuple[str, ...] = ("127.0.0.1",)  # addresses mDNS binds to
    address: str = "127.0.0.1"  # the address peers reach our API on
    heartbeat_s: float = 2.0
    offline_after: int = 3  # missed heartbeats
    peer_cap: int = 64
    announce_rate_per_s: float = 5.0  # per source address
    announce_burst: float = 10.0
    reject_backoff_s: float = 30.0  # a failed challenge is not retried before this
    challenge_timeout_s: float = 2.0
    bid_timeout_s: float = 0.5
    bid_above_s: float = 0.0  # ask every peer for bids when the local estimate exceeds this
    # below it, a peer is asked when its fresh summary beats the local estimate (bidgate.py)
    bid_rate_per_s: float = 20.0  # bid messages a second this agent may send; 0: only needed
    bid_burst: float = 40.0  # bid messages it may send at once
    summary_max_age_s: float = 0.0  # a peer summary older than this is not used; 0: 3 beats
    link_bytes_per_s: float = 125e6  # assumed link speed for a task's input (1 Gbit/s)
    lease_min_s: float = 5.0  # a forwarded task's lease: max(min, factor * estimate)
    lease_factor: float = 4.0
    lease_grace_s: float = 1.0  # the origin waits this past the lease before giving up
    cancel_timeout_s: float = 1.0
    max_attempts: int = 3
    # mDNS name probing (RFC 6762 §8.1: a random 0-250 ms wait, then 3 probes 500 ms apart)
    # guards an instance name someone else may hold. Turn it off only when the agent id is
    # unique by construction (``new_agent_id``: 48 random bits): the agent is announced
    # ~1.2 s sooner. A clashing id is still caught by the signed hello (duplicate_agent_id).
    probe_name: bool = True


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Return MeshConfig fields from ``NAME=VALUE`` strings, typed like their defaults."""
    defaults = MeshConfig(agent_id="x")
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        default = getattr(defaults, name, None)
        if not sep or name in ("agent_id", "interfaces", "address") or default is None:
            raise ValueError(f"--set {pair!r}: expected NAME=VALUE with a MeshConfig timer/limit")
        try:
            if isinstance(default, bool):
                if text not in ("true", "false"):
                    raise ValueError(text)
                out[name] = text == "true"
                continue
            out[name] = type(default)(text)
        except ValueError:
            kind = type(default).__name__
            raise ValueError(f"--set {pair!r}: {text!r} is not a {kind}") from None
    return out
