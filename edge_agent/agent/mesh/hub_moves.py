"""Carrying out the hub's re-evaluation moves through the mesh, and reporting their outcomes.

The hub's fleet re-evaluation names tasks to forward to a given peer in its heartbeat
answers (``HubMoves.execute``, docs/hub-protocol.md §12). A queued task goes now, a deferred
one at the target's clean hour (``Deferrer.moved``: never after its latest safe start),
through the same exactly-once offload with that peer asked first (``MeshNode.submit(to=...)``);
the chain says "moved by hub re-evaluation (saving X g)". A move that cannot be carried out
(the task ran or was cancelled meanwhile, the peer is not a trusted online one) is refused
with the reason. Outcomes go back in the next heartbeats (``HubMoves.report``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edge_agent.agent.core.deferral import Deferral
from edge_agent.agent.core.scheduler import decision_row
from edge_agent.agent.core.waiting import waiting_from_row

if TYPE_CHECKING:
    from edge_agent.agent.mesh.link import MeshLink

_log = logging.getLogger(__name__)

#: Most moves acted on from one heartbeat answer, and move outcomes kept to report.
MOVES_MAX = 100
OUTCOMES_KEPT = 200
#: Seconds a final move outcome keeps riding in heartbeats (the hub applies it once).
OUTCOME_REPORT_S = 600.0


@dataclass(frozen=True)
class HubMove:
    """One move from the hub's heartbeat answer: forward ``task_id`` to peer ``to``."""

    id: str
    task_id: str
    to: str
    reason: str
    saving_g: float
    start_at: float

    @classmethod
    def parse(cls, doc: Any) -> HubMove:
        """Return the move; ValueError names the field to fix."""
        if not isinstance(doc, dict):
            raise ValueError("a move must be a JSON object")
        for key in ("id", "task_id", "to"):
            if not isinstance(doc.get(key), str) or not 0 < len(doc[key]) <= 64:
                raise ValueError(f"move.{key}: expected a string of 1-64 characters")
        numbers = {}
        for key in ("saving_g", "start_at"):
            value = doc.get(key, 0.0)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"move.{key}: expected a number")
            numbers[key] = float(value)
        reason = str(doc.get("reason") or "moved by hub re-evaluation")[:200]
        return cls(doc["id"], doc["task_id"], doc["to"], reason, **numbers)


class HubMoves:
    """Acts on the hub's moves for the link's agent and keeps their outcomes to report."""

    def __init__(self, link: MeshLink) -> None:
        self.link = link
        #: move id -> its outcome for the hub (heartbeat ``move_outcomes``), newest last
        self.outcomes: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._moving: dict[str, tuple[str, str]] = {}  # task id -> (move id, peer) in flight

    def report(self) -> list[dict[str, Any]]:
        """Return the outcomes of the hub's moves (the heartbeat's ``move_outcomes``).

        A move under way is reported until it settles; a settled one for
        ``OUTCOME_REPORT_S`` (it stays known, so a repeated move is not acted on twice).
        """
        now = time.monotonic()
        return [
            {k: v for k, v in o.items() if k != "at"}
            for o in self.outcomes.values()
            if o["state"] == "accepted" or now - o["at"] < OUTCOME_REPORT_S
        ]

    def _outcome(
        self, move_id: str, state: str, reason: str | None = None, ran_on: str | None = None
    ) -> None:
        self.outcomes[move_id] = {
            "id": move_id,
            "state": state,
            "reason": reason,
            "ran_on": ran_on,
            "at": time.monotonic(),
        }
        self.outcomes.move_to_end(move_id)
        while len(self.outcomes) > OUTCOMES_KEPT:
            self.outcomes.popitem(last=False)

    async def execute(self, moves: Any) -> None:
        """Carry out (or refuse, saying why) the moves in a hub heartbeat answer; each once."""
        if not isinstance(moves, list):
            _log.warning("hub moves ignored: expected a list, got %s", type(moves).__name__)
            return
        for doc in moves[:MOVES_MAX]:
            try:
                move = HubMove.parse(doc)
            except ValueError as err:
                _log.warning("hub move ignored: %s", err)
                continue
            if move.id in self.outcomes:
                continue  # acted on already; its outcome goes with the next heartbeat
            try:
                refused = await self._move(move)
            except Exception as err:  # a failing move must not stop the hub link
                _log.exception("hub move %s of task %s failed", move.id, move.task_id)
                refused = f"the agent could not carry it out: {err}"
            if refused is not None:
                _log.info("hub move %s of task %s refused: %s", move.id, move.task_id, refused)
                self._outcome(move.id, "refused", refused)

    async def _move(self, move: HubMove) -> str | None:
        """Start ``move``; return None when accepted, else why it is refused."""
        link = self.link
        agent = link.agent
        row = await agent.store.get(move.task_id)
        if row is None:
            return f"no task {move.task_id} here"
        if not link.started:
            return "the mesh is not started here"
        if move.to == link.agent_id:
            return "the target is this agent"
        if not link.node.trusts(move.to):
            return f"{move.to} is not a trusted online mesh peer"
        allowed = agent.placer.policy.rules.get("allowed_peers")
        if allowed is not None and move.to not in allowed:
            return f"the policy's allowed_peers does not include {move.to}"
        if row.get("command") is not None:
            return "a command task runs only where it was submitted"
        state = row["state"]
        reason = move.reason
        if state == "deferred":
            try:
                plan = agent.deferrer.moved(move.task_id, move.to, move.start_at, move.id, reason)
            except ValueError as err:
                return str(err)
            if not await self._store_plan(move.task_id, plan):
                return "it is no longer deferred here"
            if agent.deferrer.plan_of(move.task_id) is None:  # released while stored
                return "it was released here meanwhile"
            agent.deferrer.move(move.task_id, plan)  # forwarded at plan.not_before
            self._outcome(move.id, "accepted", f"forwarded to {move.to} from {plan.not_before:.0f}")
            return None
        if state in ("queued", "interrupted"):
            if not agent.scheduler.remove(move.task_id):
                return f"it is no longer waiting here (state {state}, being placed)"
            waiting = waiting_from_row(row)
            local = decision_row(agent.placer.preview(waiting.contract))
            self._moving[move.task_id] = (move.id, move.to)
            self._outcome(move.id, "accepted", f"forwarding to {move.to}")
            link.offloader.spawn(waiting, local, move.to, reason)
            return None
        return f"it is no longer movable (state {state})"

    async def _store_plan(self, task_id: str, plan: Deferral) -> bool:
        return await self.link.agent.store.store_deferral(task_id, plan.to_dict(), plan.not_before)

    async def forward_deferred(self, task_id: str, plan: Deferral) -> None:
        """Deferrer hook: a moved task's hour has come; forward it to its peer (or run it here
        as usual when the mesh is down: still before its latest safe start)."""
        link = self.link
        agent = link.agent
        if not await agent.store.release_deferred(task_id):
            return  # cancelled meanwhile
        row = await agent.store.get(task_id)
        if row is None:
            return
        agent.metrics.move("deferred", "queued")
        waiting = waiting_from_row(row)
        if not link.started or plan.moved_to is None:
            agent.scheduler.add(waiting)
            if plan.move_id is not None:
                self._outcome(plan.move_id, "failed", "the mesh was down: queued here", None)
            return
        if plan.move_id is not None:
            self._moving[task_id] = (plan.move_id, plan.moved_to)
        local = decision_row(agent.placer.preview(waiting.contract))
        link.offloader.spawn(waiting, local, plan.moved_to, plan.move_reason or "moved")

    def cancelled(self, task_id: str) -> None:
        """MeshHandoff hook: ``task_id`` was cancelled before it could be offloaded."""
        moving = self._moving.pop(task_id, None)
        if moving is not None:
            self._outcome(moving[0], "failed", "cancelled before it was forwarded")

    def settled(
        self, task_id: str, done: bool, peer: str | None, ran_on: str | None, error: str | None
    ) -> None:
        """MeshHandoff hook: an offloaded task settled (``peer``: the other agent it ran on)."""
        moving = self._moving.pop(task_id, None)
        if moving is None:
            return
        move_id, target = moving
        if done and peer is not None and peer == target:
            self._outcome(move_id, "done", None, peer)
        else:
            state = "done" if done else "failed"
            where = f"ran on {ran_on}" if done and ran_on else f"{state}: {error}"
            self._outcome(move_id, "failed", f"not run on the target ({where})", ran_on)
