"""Settling attempts given up as lost once their peer answers again.

An origin that cut off a forwarded attempt (the peer stopped answering) cannot know whether
it ran. When the peer is back, ``Reconciler`` asks it, attempt by attempt, through the signed
``tasks/cancel`` call: an attempt it finished anyway is recorded ``duplicate`` (the task
completed elsewhere too: visible, counted, its result unused), never a second ``done``; one
it never ran is recorded ``lost_<state>``; one still running is asked again at the next
heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from edge_agent.mesh.client import MeshClient, PeerRefused
from edge_agent.mesh.config import MeshConfig
from edge_agent.mesh.errors import AuthError, PeerUnavailable
from edge_agent.mesh.ledger import Ledger
from edge_agent.mesh.peers import PeerTable

_log = logging.getLogger(__name__)

#: Called with (key, attempt, peer, peer's answer) when a ``lost`` attempt turns out to have
#: completed on the peer after all (recorded ``duplicate``, never ``done``).
OnDuplicate = Callable[[str, int, str, dict[str, Any]], Awaitable[None]]
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class Reconciler:
    """One reconciliation at a time per peer, over the attempts lost to it."""

    def __init__(
        self,
        cfg: MeshConfig,
        peers: PeerTable,
        client: MeshClient,
        ledger: Ledger,
        lost: dict[str, set[tuple[str, int]]],
        counters: Counter[str],
    ) -> None:
        """``lost``: the offloader's attempts given up, by peer (emptied as they settle)."""
        self.cfg, self.peers, self.client, self.ledger = cfg, peers, client, ledger
        self.lost, self.counters = lost, counters
        self._running: set[str] = set()

    def start(self, agent_id: str, spawn: Spawn, on_duplicate: OnDuplicate | None) -> None:
        """Begin settling ``agent_id``'s lost attempts unless none are left or it is under way."""
        if self.lost.get(agent_id) and agent_id not in self._running:
            self._running.add(agent_id)
            spawn(self._settle(agent_id, on_duplicate), f"mesh-reconcile-{agent_id}")

    async def _settle(self, agent_id: str, on_duplicate: OnDuplicate | None) -> None:
        try:
            peer = self.peers.peers.get(agent_id)
            pending = self.lost.get(agent_id, set())
            for key, attempt in sorted(pending):
                if peer is None:
                    return
                try:
                    reply = await self.client.call(
                        agent_id,
                        peer.endpoint,
                        "tasks/cancel",
                        {"key": key, "attempt": attempt},
                        self.cfg.cancel_timeout_s,
                    )
                except (AuthError, PeerRefused, PeerUnavailable) as err:
                    _log.debug("mesh: reconciling %s with %s failed: %s", key, agent_id, err)
                    return
                state = str(reply.doc.get("state", ""))
                if state == "running":
                    continue  # not settled yet; asked again at the next heartbeat
                pending.discard((key, attempt))
                if state == "done":
                    self.counters["duplicate_runs"] += 1
                    _log.warning(
                        "mesh: task %s attempt %s also completed on %s while it was cut off; "
                        "recorded as duplicate",
                        key,
                        attempt,
                        agent_id,
                    )
                    await self.ledger.finish(key, "origin", attempt, "duplicate", reply.doc)
                    if on_duplicate is not None:
                        await on_duplicate(key, attempt, agent_id, reply.doc)
                else:
                    self.counters["lost_reconciled"] += 1
                    await self.ledger.finish(key, "origin", attempt, f"lost_{state or 'unknown'}")
        finally:
            self._running.discard(agent_id)
