"""Origin side of offload: ask trusted peers for bids, forward to the best, recover once.

Each task carries an idempotency key; each try is an *attempt*, recorded in the ledger
before it starts. A forward that fails is settled before the task is placed again: the
peer confirms it cancelled (or already finished), or its process is gone (connection
refused), or its lease has run out (the peer abandons work past its lease on its own).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from edge_agent.mesh.bidgate import Ask, BidGate
from edge_agent.mesh.client import MeshClient, PeerRefused
from edge_agent.mesh.config import MeshConfig
from edge_agent.mesh.errors import AuthError, MeshError, PeerUnavailable
from edge_agent.mesh.ledger import Ledger
from edge_agent.mesh.peers import Peer, PeerTable
from edge_agent.placement import Decision, Placer, TaskContract

_log = logging.getLogger(__name__)

#: Peer answers after which the origin may place the task again at once.
SETTLED = frozenset({"cancelled", "fenced", "expired", "failed", "unplaced"})

#: Payload key that stays on the origin (e.g. the agent's own task id); never forwarded.
LOCAL = "_local"

RunPlaced = Callable[[TaskContract, Decision, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Bid:
    """A peer's offer: its own kernel estimate plus the measured link round trip."""

    peer: Peer
    placed: bool
    latency_s: float
    link_s: float
    summary: str

    @property
    def total_s(self) -> float:
        """Return the estimate as seen from the origin."""
        return self.latency_s + self.link_s

    def row(self) -> dict[str, Any]:
        """Return the bid as a JSON-ready row."""
        return {
            "peer": self.peer.agent_id,
            "placed": self.placed,
            "estimate_ms": round(self.latency_s * 1e3, 3) if self.placed else None,
            "link_ms": round(self.link_s * 1e3, 3),
            "summary": self.summary,
        }


def step(node: str, attempt: int, decision: Decision, action: str) -> dict[str, Any]:
    """Return one link of a task's decision chain."""
    return {
        "node": node,
        "attempt": attempt,
        "devices": list(decision.device_ids),
        "summary": decision.summary(),
        "action": action,
    }


class Offloader:
    """Places a task here or on the best trusted peer; exactly one attempt completes."""

    def __init__(
        self,
        config: MeshConfig,
        placer: Placer,
        peers: PeerTable,
        client: MeshClient,
        ledger: Ledger,
        run_placed: RunPlaced,
    ) -> None:
        self.cfg = config
        self.placer = placer
        self.peers = peers
        self.client = client
        self.ledger = ledger
        self.run_placed = run_placed
        #: whom to ask for bids, and the bid budget (bidgate.py)
        self.gate = BidGate(config)
        #: Attempts given up as ``lost`` (peer cut off), by peer: reconciled once it answers.
        self.lost: dict[str, set[tuple[str, int]]] = {}

    async def submit(
        self,
        contract: TaskContract,
        payload: dict[str, Any] | None = None,
        key: str | None = None,
        *,
        to: str | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """Run ``contract`` once, here or on a peer; return the result and decision chain.

        ``to`` names the peer to forward to (e.g. a move the hub's re-evaluation asked for):
        the first attempt asks only that peer and forwards to it whenever it can place the
        task, whatever the estimate here; ``reason`` says why in the chain. If that peer
        cannot place it or the attempt fails, the task is placed as any other (here or on
        the best other peer), under the same exactly-once rules.
        """
        key = key or uuid.uuid4().hex
        payload = payload or {}
        chain: list[dict[str, Any]] = []
        excluded: set[str] = set()
        me = self.cfg.agent_id
        for attempt in range(1, self.cfg.max_attempts + 1):
            local = self.placer.place_one(contract)
            named = to if to is not None and to not in excluded else None
            if named is not None:
                bids = await self._bids(contract, local, excluded, only=named)
                excluded.add(named)  # asked once: later attempts place it as usual
            else:
                bids = await self._bids(contract, local, excluded)
            best = min((b for b in bids if b.placed), key=lambda b: b.total_s, default=None)
            if named is not None and best is None:  # it cannot take it: place it as usual
                if local.placed:
                    self.placer.release(local)
                link = step(me, attempt, local, f"not forwarded to {named}: {reason}")
                link["bids"] = [b.row() for b in bids]
                link["summary"] = f"{named} is not online or cannot place it"
                chain.append(link)
                continue
            margin = float(self.placer.policy.rules.get("offload_margin", 0.2))
            if best is not None and (
                named is not None
                or not local.placed
                or best.total_s < local.latency_s * (1.0 - margin)
            ):
                if local.placed:
                    self.placer.release(local)
                action = f"forward to {best.peer.agent_id}"
                link = step(me, attempt, local, f"{action}: {reason}" if named else action)
                link["bids"] = [b.row() for b in bids]
                chain.append(link)
                out = await self._forward(key, attempt, contract, payload, best, chain)
                if out is not None:
                    return out
                excluded.add(best.peer.agent_id)
                continue
            if not local.placed:
                link = step(me, attempt, local, "no device here or on a trusted peer")
                link["bids"] = [b.row() for b in bids]  # who was asked, and what they said
                chain.append(link)
                await self.ledger.begin(key, "origin", attempt, me)
                await self.ledger.finish(key, "origin", attempt, "failed")
                return {"key": key, "state": "failed", "ran_on": None, "chain": chain}
            chain.append(step(me, attempt, local, "run here"))
            await self.ledger.begin(key, "origin", attempt, me)
            result = await self.run_placed(contract, local, payload)
            await self.ledger.finish(key, "origin", attempt, "done", result)
            return {"key": key, "state": "done", "ran_on": me, "result": result, "chain": chain}
        return {
            "key": key,
            "state": "failed",
            "ran_on": None,
            "chain": chain,
            "error": f"gave up after {self.cfg.max_attempts} attempts",
        }

    def _peers(self, excluded: Collection[str], only: str | None = None) -> list[Peer]:
        allowed = self.placer.policy.rules.get("allowed_peers")
        return [
            p
            for p in self.peers.online()
            if p.agent_id not in excluded
            and (allowed is None or p.agent_id in allowed)
            and (only is None or p.agent_id == only)
        ]

    def ask(self, contract: TaskContract, local: Decision, excluded: Collection[str] = ()) -> Ask:
        """Return whom the gate would ask for ``contract`` now (bidgate.py); sends nothing."""
        margin = float(self.placer.policy.rules.get("offload_margin", 0.2))
        return self.gate.choose(contract, local, self._peers(excluded), margin)

    async def _bids(
        self, contract: TaskContract, local: Decision, excluded: set[str], only: str | None = None
    ) -> list[Bid]:
        if only is not None:
            ask = Ask(tuple(self._peers(excluded, only)), f"asked to move it to {only}", True)
        else:
            ask = self.ask(contract, local, excluded)
        peers = await self.gate.admit(ask, contract.task_class)
        counters = self.peers.counters
        if len(peers) < len(ask.peers):
            counters["bids_rate_limited"] += len(ask.peers) - len(peers)
        counters["bids_sent"] += len(peers)
        doc = {"contract": contract.to_dict()}
        replies = await asyncio.gather(*(self._bid(p, doc) for p in peers), return_exceptions=True)
        return [b for b in replies if isinstance(b, Bid)]

    async def _bid(self, peer: Peer, doc: dict[str, Any]) -> Bid:
        try:
            reply = await self.client.call(
                peer.agent_id, peer.endpoint, "bid", doc, self.cfg.bid_timeout_s
            )
        except (MeshError, AuthError):
            self.peers.missed(peer.agent_id)
            raise
        self.peers.seen(peer.agent_id, reply.rtt_s)
        d = reply.doc
        placed = bool(d["placed"])  # an unplaced bid has no estimate but stays in the chain
        latency = float(d["latency_s"]) if placed else math.inf
        # the link's cost: the least of the recent round trips, this one included (a busy
        # moment on either box delays local work as much; it is not the link's)
        return Bid(peer, placed, latency, peer.base_rtt_s, str(d["summary"]))

    async def _forward(
        self,
        key: str,
        attempt: int,
        contract: TaskContract,
        payload: dict[str, Any],
        bid: Bid,
        chain: list[dict[str, Any]],
    ) -> dict[str, Any] | None:
        peer = bid.peer
        lease = max(self.cfg.lease_min_s, self.cfg.lease_factor * bid.latency_s)
        deadline = time.monotonic() + lease + self.cfg.lease_grace_s
        doc = {
            "key": key,
            "attempt": attempt,
            "contract": contract.to_dict(),
            "payload": {k: v for k, v in payload.items() if k != LOCAL},
            "lease_s": lease,
            "origin": self.cfg.agent_id,
        }
        await self.ledger.begin(key, "origin", attempt, peer.agent_id)
        try:
            reply = await self.client.call(
                peer.agent_id, peer.endpoint, "tasks", doc, lease + self.cfg.lease_grace_s
            )
            answer = reply.doc
        except (PeerUnavailable, PeerRefused, AuthError) as err:
            _log.warning("mesh: forward of %s to %s failed: %s", key, peer.agent_id, err)
            self.peers.missed(peer.agent_id)
            answer = await self._settle(peer, key, attempt, err, deadline)
        if answer.get("state") == "done":
            chain.append({**answer.get("step", {}), "node": peer.agent_id, "attempt": attempt})
            await self.ledger.finish(key, "origin", attempt, "done", answer.get("result"))
            return {
                "key": key,
                "state": "done",
                "ran_on": peer.agent_id,
                "result": answer.get("result"),
                "chain": chain,
            }
        state = str(answer.get("state", "lost"))
        if state == "lost":
            self.lost.setdefault(peer.agent_id, set()).add((key, attempt))
        chain.append(
            {
                "node": peer.agent_id,
                "attempt": attempt,
                "action": f"attempt {state}",
                "summary": str(answer.get("error", "")),
            }
        )
        await self.ledger.finish(key, "origin", attempt, state)
        return None

    async def _settle(
        self, peer: Peer, key: str, attempt: int, err: Exception, deadline: float
    ) -> dict[str, Any]:
        """Return the peer's final word on an attempt, or wait out its lease."""
        refused = isinstance(err, PeerUnavailable) and err.refused
        if not refused:
            try:
                reply = await self.client.call(
                    peer.agent_id,
                    peer.endpoint,
                    "tasks/cancel",
                    {"key": key, "attempt": attempt},
                    self.cfg.cancel_timeout_s,
                )
                if reply.doc.get("state") == "done" or reply.doc.get("state") in SETTLED:
                    return reply.doc
            except PeerUnavailable as again:
                refused = again.refused
            except (PeerRefused, AuthError) as again:
                _log.warning("mesh: cancel of %s on %s failed: %s", key, peer.agent_id, again)
        if refused:
            return {"state": "lost", "error": f"{peer.agent_id} is gone (connection refused)"}
        wait = deadline - time.monotonic()
        if wait > 0:  # the peer may still be running it: its lease ends before our deadline
            _log.warning("mesh: %s unreachable; waiting %.1fs for its lease", peer.agent_id, wait)
            await asyncio.sleep(wait)
        return {"state": "lost", "error": f"{peer.agent_id} unreachable; its lease ran out"}
