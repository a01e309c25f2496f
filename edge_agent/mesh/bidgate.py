"""Whom to ask for bids: peers whose fresh summary predicts they finish sooner than here.

The origin asks a peer for a bid when:

- nothing here can run the task (every online peer is asked), or
- the local estimate exceeds ``bid_above_s`` (every online peer: the upper override), or
- the peer's fresh summary estimates the task's class there, and that estimate plus the
  round trip and the input's transfer beats the local estimate by the policy's
  ``offload_margin`` (``predicted_s`` / ``beats``), or
- the peer's fresh summary does not know the class yet, lists a format the task accepts,
  and the round trip plus transfer is at most ``EXPLORE_LINK_SHARE`` of the local
  estimate (room for a remote run to win): asked once per (peer, class) per freshness
  window, so that its next summary carries the class.

A peer with no fresh summary is not asked below the override. Every bid message is paid
from a token bucket (``bid_rate_per_s``, per agent): an optional ask takes what is left
(none: the task runs here), a necessary one (nothing here can run it, or a named peer)
waits for its tokens; so bid traffic never exceeds the rate plus one burst. A rate of 0
turns the agent's own asks off: only a task nothing here can run (or one the hub moves)
is offered, to every online peer, unmetered.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edge_agent.mesh.config import MeshConfig
from edge_agent.mesh.peers import Peer
from edge_agent.mesh.summary import Summary
from edge_agent.placement import Decision, TaskContract

#: A class a peer's summary lacks is asked about only when the link costs at most this share
#: of the local estimate: a task of a few milliseconds is not worth a blind ask.
EXPLORE_LINK_SHARE = 0.25


def transfer_s(contract: TaskContract, bytes_per_s: float) -> float:
    """Return the time to ship the task's input to a peer at ``bytes_per_s``."""
    size = contract.semantics.input_bytes
    return size / bytes_per_s if size > 0 and bytes_per_s > 0 else 0.0


def predicted_s(estimate_s: float, rtt_s: float, transfer: float) -> float:
    """Return when a peer would finish, seen from the origin."""
    return estimate_s + rtt_s + transfer


def beats(remote_s: float, local_s: float, margin: float) -> bool:
    """Return True when ``remote_s`` beats ``local_s`` by the offload margin."""
    return remote_s < local_s * (1.0 - margin)


class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` saved."""

    def __init__(
        self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_s
        self.burst = max(1.0, burst)
        self.clock = clock
        self.tokens = self.burst
        self.stamp = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def available(self) -> float:
        """Return the tokens saved now."""
        self._refill()
        return self.tokens

    def take_up_to(self, n: int) -> int:
        """Take at most ``n`` whole tokens now; return how many were taken."""
        self._refill()
        got = min(n, int(self.tokens))
        self.tokens -= got
        return max(0, got)

    def borrow(self, n: int) -> int:
        """Take ``min(n, burst)`` tokens now, into debt if need be (later asks wait it out)."""
        self._refill()
        want = min(n, int(self.burst))
        self.tokens -= want
        return want

    async def take(self, n: int) -> int:
        """Take ``min(n, burst)`` tokens, waiting for them; return how many."""
        want = min(n, int(self.burst))
        while True:
            self._refill()
            if self.tokens >= want:
                self.tokens -= want
                return want
            await asyncio.sleep((want - self.tokens) / self.rate if self.rate > 0 else 1.0)


@dataclass(frozen=True, slots=True)
class Ask:
    """The peers to ask (best predicted first), why, and whether the ask may wait."""

    peers: tuple[Peer, ...]
    reason: str
    necessary: bool


class BidGate:
    """Decides whom to ask; pays each bid message from the agent's token bucket."""

    def __init__(self, cfg: MeshConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self.bucket = TokenBucket(cfg.bid_rate_per_s, cfg.bid_burst, clock)
        self._explored: dict[tuple[str, str], float] = {}

    @property
    def max_age_s(self) -> float:
        """Return the freshness bound of a summary."""
        return self.cfg.summary_max_age_s or 3 * self.cfg.heartbeat_s

    def choose(
        self, contract: TaskContract, local: Decision, peers: Sequence[Peer], margin: float
    ) -> Ask:
        """Return the peers worth asking for ``contract`` (none: run it here); pure."""
        if not peers:
            return Ask((), "no trusted peer online", False)
        by_rtt = tuple(sorted(peers, key=lambda p: p.base_rtt_s))
        if not local.placed:
            return Ask(by_rtt, "nothing here can run it", True)
        if self.cfg.bid_rate_per_s <= 0:
            return Ask((), "bid_rate_per_s is 0: peers are asked only what cannot run here", False)
        if local.latency_s > self.cfg.bid_above_s:
            return Ask(by_rtt, f"local estimate over bid_above_s {self.cfg.bid_above_s:g} s", False)
        now = self.clock()
        move = transfer_s(contract, self.cfg.link_bytes_per_s)
        known: list[tuple[float, Peer]] = []
        unknown: list[Peer] = []
        for peer in peers:
            summary = peer.summary
            if summary is None or not summary.fresh(now, self.max_age_s):
                continue
            rtt = peer.base_rtt_s  # optimistic: the bid's own round trip decides the forward
            estimate = summary.estimate_s(contract.task_class)
            if estimate is not None:
                remote = predicted_s(estimate, rtt, move)
                if beats(remote, local.latency_s, margin):
                    known.append((remote, peer))
            elif self._worth_exploring(contract, summary, rtt + move, local.latency_s, now, peer):
                unknown.append(peer)
        known.sort(key=lambda pair: pair[0])
        chosen = tuple(p for _, p in known) + tuple(unknown)
        if not chosen:
            return Ask((), "no fresh peer summary beats the local estimate", False)
        reason = "a peer's summary beats the local estimate" if known else "class new to peers"
        return Ask(chosen, reason, False)

    def _worth_exploring(
        self,
        contract: TaskContract,
        summary: Summary,
        link_s: float,
        local_s: float,
        now: float,
        peer: Peer,
    ) -> bool:
        formats = contract.requirements.formats()
        if formats and not set(formats) & set(summary.formats):
            return False  # none of its devices takes the task's model
        if link_s > EXPLORE_LINK_SHARE * local_s:
            return False
        last = self._explored.get((peer.agent_id, contract.task_class), -math.inf)
        return now - last > self.max_age_s

    def affordable(self, ask: Ask) -> bool:
        """Return True when ``ask`` would send a bid now (a necessary one always does)."""
        if not ask.peers:
            return False
        return ask.necessary or (self.cfg.bid_rate_per_s > 0 and self.bucket.available() >= 1)

    async def admit(self, ask: Ask, task_class: str) -> tuple[Peer, ...]:
        """Return the peers of ``ask`` that the bid budget lets us ask now (best first); a
        necessary ask waits for its tokens."""
        if not ask.peers:
            return ()
        if self.cfg.bid_rate_per_s <= 0:  # off: only what cannot run here is asked, unmetered
            return self._granted(ask, len(ask.peers) if ask.necessary else 0, task_class)
        if ask.necessary:
            n = await self.bucket.take(len(ask.peers))
        else:
            n = self.bucket.take_up_to(len(ask.peers))
        return self._granted(ask, n, task_class)

    def admit_now(self, ask: Ask, task_class: str) -> tuple[Peer, ...]:
        """``admit`` without waiting (a simulator's clock): a necessary ask borrows its
        tokens, so the bid rate still holds on average."""
        if not ask.peers:
            return ()
        n = len(ask.peers)
        n = self.bucket.borrow(n) if ask.necessary else self.bucket.take_up_to(n)
        return self._granted(ask, n, task_class)

    def _granted(self, ask: Ask, n: int, task_class: str) -> tuple[Peer, ...]:
        chosen = ask.peers[:n]
        now = self.clock()
        for peer in chosen:
            self._explored[(peer.agent_id, task_class)] = now
        if len(self._explored) > 4096:  # bounded: forget the oldest half
            for key, _ in sorted(self._explored.items(), key=lambda kv: kv[1])[:2048]:
                del self._explored[key]
        return chosen
