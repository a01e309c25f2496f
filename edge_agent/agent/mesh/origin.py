"""The origin side of the mesh: offloading the scheduler's tasks and settling their rows.

The scheduler offers the mesh every task no device here can run, and every task the bid
gate would ask a peer about (``MeshHandoff.take``, edge_agent/mesh/bidgate.py). The task
row turns ``offloaded``; the node asks trusted peers for bids and forwards it (idempotency
key: the task id) or runs it here after all. The row records where it ran (``ran_on``, a
peer's agent id) and the decision chain, origin → peer (``chain``). The hub's moves
(hub_moves.py) go through the same offload with their peer asked first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from edge_agent.agent.core.scheduler import decision_row
from edge_agent.agent.core.waiting import Waiting
from edge_agent.agent.mesh.serving import TaskFailed
from edge_agent.mesh.errors import MeshError
from edge_agent.mesh.offload import LOCAL
from edge_agent.placement import Decision

if TYPE_CHECKING:
    from edge_agent.agent.mesh.link import MeshLink

_log = logging.getLogger(__name__)


class MeshHandoff:
    """Hands the link's node the tasks the scheduler offers it and records their outcome."""

    def __init__(self, link: MeshLink) -> None:
        self.link = link
        self._offloads: set[asyncio.Task[None]] = set()

    def take(self, task: Waiting, decision: Decision) -> bool:
        """Scheduler hook: True when the mesh takes ``task`` (it is not dispatched here).

        Offered: a task no device here can run, or one the mesh's bid gate would ask a peer
        about (edge_agent/mesh/bidgate.py: over ``bid_above_s`` here, or a trusted peer's
        fresh summary beats the estimate here). A command task stays here (its allowlist is
        ours).
        """
        link = self.link
        if not link.started or task.command is not None or not link.node.peers.online():
            return False
        link.node.recent.note(decision.task)  # its class shows in the summary peers get
        mesh = link.node.offloader
        if decision.placed and not mesh.gate.affordable(mesh.ask(decision.task, decision)):
            return False  # no peer likely to win, or no bid budget left: it runs here
        self.spawn(task, decision_row(decision))
        return True

    def spawn(
        self, task: Waiting, local: dict[str, Any], to: str | None = None, reason: str = ""
    ) -> None:
        """Offload ``task`` in the background (``to``: the peer asked first)."""
        job = asyncio.create_task(self._offload(task, local, to, reason))
        self._offloads.add(job)
        job.add_done_callback(self._offloads.discard)

    async def cancel_all(self) -> None:
        """Stop the offloads under way (those tasks resume after a restart)."""
        for task in list(self._offloads):
            task.cancel()
        await asyncio.gather(*self._offloads, return_exceptions=True)

    async def _offload(
        self, task: Waiting, local: dict[str, Any], to: str | None = None, reason: str = ""
    ) -> None:
        agent = self.link.agent
        if not await agent.store.mark_offloaded(task.task_id, local):
            self.link.moves.cancelled(task.task_id)
            return
        agent.metrics.move(task.state, "offloaded")
        contract = task.contract_at(time.time())  # the deadline counts from now
        try:
            out = await self.link.node.submit(
                contract, {LOCAL: task.task_id}, key=task.task_id, to=to, reason=reason
            )
        except Exception as err:  # the task fails with the reason; the agent keeps going
            if not isinstance(err, (MeshError, TaskFailed)):
                _log.exception("mesh: offloading task %s failed", task.task_id)
            out = {"state": "failed", "ran_on": None, "chain": [], "error": str(err)}
        await self._settled(task.task_id, out)

    async def _settled(self, task_id: str, out: dict[str, Any]) -> None:
        """Record an offloaded task's outcome: where it ran and the decision chain."""
        agent = self.link.agent
        ran_on = out.get("ran_on")
        peer = ran_on if ran_on not in (None, self.link.agent_id) else None
        links = list(out.get("chain", []))
        done = out.get("state") == "done"
        result = out.get("result") if done else None
        error = None if done else str(out.get("error") or _last_action(out))
        state = "done" if done else "failed"
        ran_emulated = result.get("emulated") if isinstance(result, dict) else None
        outcome = {
            "state": state,
            "result": result,
            "error": error,
            "device": _peer_device(peer, links) if peer else None,
            "emulated": None if not isinstance(ran_emulated, bool) else int(ran_emulated),
        }
        if await agent.store.record_peer_result(task_id, outcome, peer, links):
            agent.metrics.move("offloaded", state)
        self.link.moves.settled(task_id, done, peer, ran_on, error)

    async def duplicate(self, key: str, attempt: int, peer: str, doc: dict[str, Any]) -> None:
        """Node hook: note on the task that a lost attempt completed on ``peer`` too (result
        unused)."""
        link = {
            "node": peer,
            "attempt": attempt,
            "action": "duplicate",
            "summary": "completed there after all while cut off; recorded, its result unused",
        }
        await self.link.agent.store.record_duplicate(key, link)


def _peer_device(peer: str, chain: list[dict[str, Any]]) -> str:
    """Return "<peer>:<its device>" from the peer's link of the decision chain."""
    for link in reversed(chain):
        devices = link.get("devices")
        if link.get("node") == peer and isinstance(devices, list) and devices:
            return f"{peer}:{devices[0]}"
    return f"{peer}:?"


def _last_action(out: dict[str, Any]) -> str:
    chain = out.get("chain") or [{}]
    last = chain[-1]
    return f"{last.get('action', 'not run')}: {last.get('summary', '')}".strip(": ")
