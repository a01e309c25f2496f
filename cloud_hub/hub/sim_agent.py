"""A simulated agent on the hub protocol: bounded outbox, heartbeat loop, policy application.

Used by the tests, the heartbeat benchmark and (later) ``cloud-hub demo``; it behaves as the
real agent will once wired: records get consecutive seqs, the oldest are dropped past the
bound (and declared through ``dropped_through``), a sync resends everything after ``acked``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from edge_agent.protocol.hub_client import HubClient, HubError, HubUnreachable

_log = logging.getLogger(__name__)
#: Most records one sync request carries.
SYNC_BATCH = 500


def board_devices(board: str) -> list[dict[str, Any]]:
    """Return the devices of firmware profile ``board`` as heartbeat device entries."""
    from edge_agent.placement import devices_from_profiles

    return [
        {
            "id": d.id,
            "kind": d.kind.name.lower(),
            "name": d.name,
            "utilization": 0.0,
            "queued_s": 0.0,
            "health": "online",
        }
        for d in devices_from_profiles([board])
    ]


class SimulatedAgent:
    """An agent's hub-facing half: what it reports, what it has yet to sync."""

    def __init__(
        self,
        client: HubClient,
        devices: list[dict[str, Any]],
        outbox_limit: int = 10_000,
    ) -> None:
        self.client = client
        self.devices = devices
        self.outbox: deque[dict[str, Any]] = deque()
        self.outbox_limit = outbox_limit
        self.next_seq = 1
        self.dropped_through = 0
        self.dropped = 0
        self.acked = 0
        self.status = "ok"
        self.problem: str | None = None
        self.peers: list[str] = []
        self.slo_misses = 0
        self.policy: dict[str, Any] | None = None
        self.beats = 0
        self._task: asyncio.Task[None] | None = None

    def record(self, kind: str, payload: dict[str, Any], now: float) -> int:
        """Append a record to the outbox; return its seq (the oldest is dropped when full)."""
        seq = self.next_seq
        self.next_seq += 1
        self.outbox.append({"seq": seq, "kind": kind, "payload": payload, "created_at": now})
        while len(self.outbox) > self.outbox_limit:
            gone = self.outbox.popleft()
            self.dropped += 1
            self.dropped_through = max(self.dropped_through, int(gone["seq"]))
        return seq

    def heartbeat_doc(self) -> dict[str, Any]:
        """Return the heartbeat body describing this agent now."""
        policy = None
        if self.policy is not None:
            policy = {"name": self.policy["name"], "version": self.policy["version"]}
        return {
            "status": self.status,
            "problem": self.problem,
            "version": "sim",
            "policy": policy,
            "devices": self.devices,
            "peers": self.peers,
            "queue_depth": 0,
            "outbox": {"pending": len(self.outbox), "dropped": self.dropped},
            "slo_misses": self.slo_misses,
        }

    async def beat(self) -> dict[str, Any]:
        """Send one heartbeat and apply a policy the hub hands over."""
        answer = await self.client.heartbeat(self.heartbeat_doc())
        if answer.get("policy") is not None:
            self.policy = answer["policy"]  # applied; the next heartbeat acknowledges it
        self.beats += 1
        return answer

    async def flush(self) -> int:
        """Sync every record the hub lacks, in batches; return the hub's acked seq."""
        while True:
            batch = [r for r in self.outbox if r["seq"] > self.acked][:SYNC_BATCH]
            answer = await self.client.sync(batch, self.dropped_through)
            before, self.acked = self.acked, int(answer["acked"])
            while self.outbox and self.outbox[0]["seq"] <= self.acked:
                self.outbox.popleft()
            if self.acked == before or not any(r["seq"] > self.acked for r in self.outbox):
                return self.acked

    async def run(self, interval_s: float | None = None) -> None:
        """Heartbeat and sync every interval until cancelled; ride out hub outages."""
        while True:
            try:
                await self.beat()
                await self.flush()
            except HubUnreachable as err:
                _log.debug("%s: hub unreachable: %s", self.client.agent_id, err)
            except HubError as err:
                _log.warning("%s: hub refused: %s", self.client.agent_id, err)
            await asyncio.sleep(interval_s or self.client.heartbeat_interval_s)

    def start(self, interval_s: float | None = None) -> None:
        """Run the heartbeat loop in the background."""
        self._task = asyncio.create_task(self.run(interval_s), name=f"sim-{self.client.agent_id}")

    async def stop(self) -> None:
        """Stop the heartbeat loop (the agent falls silent, as a dead box would)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
