"""The bounded peer table: hints in, trust only after a challenge, liveness from heartbeats.

States: ``online`` (trusted, answering), ``suspect`` (missed a heartbeat or sent an mDNS
goodbye; still trusted, gets no new work), ``offline`` (missed ``offline_after``
heartbeats; kept for display until evicted). A hint never creates a trusted peer: the
node challenges the announced endpoint and calls ``trust`` only on a valid signed answer.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from edge_agent.mesh.advertise import Hint
from edge_agent.mesh.summary import Summary

_log = logging.getLogger(__name__)

ONLINE, SUSPECT, OFFLINE = "online", "suspect", "offline"
#: Round trips kept per peer.
RTT_SAMPLES = 8


@dataclass
class Peer:
    """A trusted fleet member and what we last heard from it."""

    agent_id: str
    address: str
    api_port: int
    version: str
    kinds: str
    state: str = ONLINE
    missed: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    rtt_s: float | None = None  # last measured round trip of a signed request
    #: the last RTT_SAMPLES round trips: their least is the path's base latency
    rtts: deque[float] = field(default_factory=lambda: deque(maxlen=RTT_SAMPLES))
    load: dict[str, Any] = field(default_factory=dict)
    summary: Summary | None = None  # its last good signed summary (summary.py)

    @property
    def base_rtt_s(self) -> float:
        """Return the least recent round trip (0 before the first): a first connection's
        setup or a busy moment does not count against the peer."""
        return min(self.rtts, default=0.0)

    @property
    def endpoint(self) -> tuple[str, int]:
        """Return (address, API port)."""
        return (self.address, self.api_port)

    def row(self) -> dict[str, Any]:
        """Return the peer as a JSON-ready row."""
        return {
            "agent_id": self.agent_id,
            "address": f"{self.address}:{self.api_port}",
            "version": self.version,
            "kinds": self.kinds,
            "state": self.state,
            "missed_heartbeats": self.missed,
            "seen_ago_s": round(time.monotonic() - self.last_seen, 3),
            "rtt_ms": None if self.rtt_s is None else round(self.rtt_s * 1e3, 3),
            "summary_age_s": None
            if self.summary is None
            else round(time.monotonic() - self.summary.received, 3),
            "summary_classes": 0 if self.summary is None else len(self.summary.classes),
        }


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class PeerTable:
    """At most ``cap`` peers; announcements rate-limited per source address."""

    def __init__(
        self,
        self_id: str,
        fingerprint: str,
        *,
        cap: int = 64,
        rate_per_s: float = 5.0,
        burst: float = 10.0,
        offline_after: int = 3,
        reject_backoff_s: float = 30.0,
    ) -> None:
        self.self_id = self_id
        self.fingerprint = fingerprint
        self.cap = cap
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.offline_after = offline_after
        self.reject_backoff_s = reject_backoff_s
        self.peers: dict[str, Peer] = {}
        self.own_endpoint: tuple[str, int] = ("", 0)  # set once our API listens
        self.counters: Counter[str] = Counter()
        self._buckets: dict[str, _Bucket] = {}
        #: (claimed id, address, port) -> retry after: a claim refused at an endpoint does not
        #: silence a member's own announcements there (anyone may name its endpoint)
        self._rejected: dict[tuple[str, str, int], float] = {}
        self._names: dict[str, str] = {}  # mDNS instance name -> agent id
        self._warned: set[str] = set()

    # --- hints ------------------------------------------------------------------------
    def admit(self, hint: Hint) -> bool:
        """Return True when ``hint`` deserves a challenge; count why not otherwise."""
        now = time.monotonic()
        if not self._allow(hint.address, now):
            self.counters["rate_limited"] += 1
            return False
        if hint.fingerprint is None:
            self._spoof("spoof_no_key", hint)
            return False
        if hint.fingerprint != self.fingerprint:
            self.counters["foreign_fleet"] += 1  # another fleet's agent: not ours, not a spoof
            return False
        if self._rejected.get((hint.agent_id, *hint.endpoint), 0.0) > now:
            self.counters["rejected_backoff"] += 1
            return False
        if hint.agent_id == self.self_id:  # ours, or a same-id claim that must prove the key
            return hint.endpoint != self.own_endpoint
        known = self.peers.get(hint.agent_id)
        if known is not None and known.endpoint == hint.endpoint and known.state == ONLINE:
            known.last_seen = now
            self._name(hint.name, hint.agent_id)
            return False
        if known is None and len(self.peers) >= self.cap and not self._evict():
            self.counters["table_full"] += 1
            return False
        return True

    def _allow(self, source: str, now: float) -> bool:
        bucket = self._buckets.get(source)
        if bucket is None:
            if len(self._buckets) >= 4 * self.cap:
                self._buckets.clear()  # bounded: a flood of sources resets the buckets
            bucket = self._buckets[source] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate_per_s)
        bucket.stamp = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _evict(self) -> bool:
        for state in (OFFLINE, SUSPECT):
            stale = [p for p in self.peers.values() if p.state == state]
            if stale:
                victim = min(stale, key=lambda p: p.last_seen)
                del self.peers[victim.agent_id]
                self.counters["evicted"] += 1
                return True
        return False

    def _spoof(self, counter: str, hint: Hint) -> None:
        self.counters[counter] += 1
        key = f"{counter}:{hint.address}:{hint.api_port}"
        level = logging.WARNING if key not in self._warned else logging.DEBUG
        self._warned.add(key)
        _log.log(level, "mesh: %s from %s (%s:%s)", counter, hint.agent_id, *hint.endpoint)

    def challenge_failed(self, hint: Hint, reason: str) -> None:
        """Record that ``hint``'s claim (its id at its endpoint) could not be proved."""
        self._rejected[(hint.agent_id, *hint.endpoint)] = time.monotonic() + self.reject_backoff_s
        if len(self._rejected) > 4 * self.cap:
            self._rejected.pop(next(iter(self._rejected)))
        self._spoof("spoof_wrong_key" if reason != "unreachable" else "challenge_unreachable", hint)

    # --- trust and liveness ------------------------------------------------------------
    def trust(
        self,
        agent_id: str,
        address: str,
        api_port: int,
        version: str,
        kinds: str,
        name: str | None = None,
        rtt_s: float | None = None,
    ) -> Peer:
        """Record a peer that proved the fleet key (a signed challenge or signed hello)."""
        peer = self.peers.get(agent_id)
        if peer is None:
            if len(self.peers) >= self.cap and not self._evict():
                self.counters["table_full"] += 1
                raise OverflowError("peer table full")
            peer = self.peers[agent_id] = Peer(agent_id, address, api_port, version, kinds)
            self.counters["trusted"] += 1
            _log.info("mesh: trusted peer %s at %s:%s", agent_id, address, api_port)
        peer.address, peer.api_port, peer.version, peer.kinds = address, api_port, version, kinds
        self.seen(agent_id, rtt_s)
        self._rejected.pop((agent_id, address, api_port), None)
        if name is not None:
            self._name(name, agent_id)
        return peer

    def _name(self, name: str, agent_id: str) -> None:
        if self._names.get(name) != agent_id:
            self._names[name] = agent_id
            self.counters["names_seen"] += 1

    def seen(self, agent_id: str, rtt_s: float | None = None) -> None:
        """Mark a peer online after a verified answer."""
        peer = self.peers.get(agent_id)
        if peer is None:
            return
        peer.state, peer.missed, peer.last_seen = ONLINE, 0, time.monotonic()
        if rtt_s is not None:
            peer.rtt_s = rtt_s
            peer.rtts.append(rtt_s)

    def missed(self, agent_id: str) -> None:
        """Count a missed heartbeat: suspect at once, offline after ``offline_after``."""
        peer = self.peers.get(agent_id)
        if peer is None:
            return
        peer.missed += 1
        before = peer.state
        peer.state = OFFLINE if peer.missed >= self.offline_after else SUSPECT
        if peer.state != before:
            _log.warning("mesh: peer %s is %s", agent_id, peer.state)

    def goodbye(self, name: str) -> str | None:
        """Handle an mDNS goodbye: the peer turns suspect until a heartbeat says otherwise."""
        agent_id = self._names.pop(name, None)
        peer = self.peers.get(agent_id) if agent_id else None
        if peer is None:
            return None
        self.counters["goodbyes"] += 1
        if peer.state == ONLINE:
            peer.state = SUSPECT
        return peer.agent_id

    def online(self) -> list[Peer]:
        """Return the peers that may receive work now."""
        return [p for p in self.peers.values() if p.state == ONLINE]

    def rows(self) -> list[dict[str, Any]]:
        """Return every peer as a row, by agent id."""
        return [self.peers[k].row() for k in sorted(self.peers)]
