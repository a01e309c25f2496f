"""The agent's membership in the mesh: a MeshNode around the agent's own placer and executor.

``MeshLink(config)`` is made with the HTTP app (its signed endpoints are mounted at
``/mesh/v1``), attached to the Agent once its placer exists, started once the API listens
(the port is advertised) and stopped before the store closes.

Both directions go through the agent's own machinery, so a task is a task wherever it came
from:

- origin: the scheduler offers the mesh every task no device here can run, and every task
  whose local estimate exceeds ``[mesh] bid_above_s`` (``take``). The task row turns
  ``offloaded``; the node asks trusted peers for bids and forwards it (idempotency key: the
  task id) or runs it here after all. The row records where it ran (``ran_on``, a peer's
  agent id) and the decision chain, origin → peer (``chain``).
- moves: the hub's fleet re-evaluation names tasks to forward to a given peer in its
  heartbeat answers (``execute_moves``, docs/hub-protocol.md §12). A queued task goes now, a
  deferred one at the target's clean hour (``Deferrer.moved``: never after its latest safe
  start), through the same exactly-once offload with that peer asked first
  (``MeshNode.submit(to=...)``); the chain says "moved by hub re-evaluation (saving X g)".
  A move that cannot be carried out (the task ran or was cancelled meanwhile, the peer is
  not a trusted online one) is refused with the reason. Outcomes go back in the next
  heartbeats (``move_report``).
- peer: a forwarded attempt, already placed on our devices by the node, becomes a task row
  (``origin`` set, idempotency key ``mesh:<origin>:<key>:<attempt>``) and runs on the
  agent's executor like any other: it shows in ``edge-agent tasks`` and survives restarts
  as a record (never resumed here: its origin places it again).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from edge_agent import __version__
from edge_agent.agent import outbox
from edge_agent.agent.config import AgentConfig, ConfigError
from edge_agent.agent.deferral import Deferral
from edge_agent.agent.executor import Job
from edge_agent.agent.pools import usage_of
from edge_agent.agent.scheduler import Scheduler, Waiting, decision_row, waiting_from_row
from edge_agent.agent.store import NewTask
from edge_agent.errors import HetmeshError
from edge_agent.mesh import FleetKey, MeshConfig, MeshNode, Verifier, new_agent_id
from edge_agent.mesh.accept import MESH_META
from edge_agent.mesh.errors import FleetKeyError, MeshError
from edge_agent.mesh.offload import LOCAL
from edge_agent.mesh.peers import OFFLINE, ONLINE, SUSPECT
from edge_agent.mesh.routes import make_mesh_app
from edge_agent.placement import Decision, TaskContract

if TYPE_CHECKING:
    import sqlite_utils

    from edge_agent.agent.service import Agent

_log = logging.getLogger(__name__)

#: The mesh endpoints' mount point on the agent's app.
PREFIX = "/mesh/v1"
ID_FILE = "mesh_id"
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


class TaskFailed(HetmeshError):
    """A task run for the mesh failed on its device; the message is the task's error."""


def load_fleet_key(config: AgentConfig) -> FleetKey:
    """Return the configured fleet key; ConfigError saying what to fix when it is unusable."""
    text, where = config.mesh_fleet_key, "[mesh] fleet_key"
    if config.mesh_fleet_key_file:
        path = Path(config.mesh_fleet_key_file).expanduser()
        where = f"[mesh] fleet_key_file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"{where}: cannot read it ({err.strerror or err})") from None
    try:
        return FleetKey(text)
    except FleetKeyError as err:
        raise ConfigError(f"{where}: {err}") from None


def mesh_agent_id(config: AgentConfig) -> tuple[str, bool]:
    """Return (agent id, generated?): the configured id, else one kept in ``<data_dir>/mesh_id``.

    A generated id (48 random bits) is unique by construction, so its mDNS name is not probed.
    """
    if config.mesh_agent_id:
        return config.mesh_agent_id, False
    path = config.data_dir / ID_FILE
    try:
        found = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found, True
    config.data_dir.mkdir(parents=True, exist_ok=True)
    fresh = new_agent_id()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(fresh + "\n", encoding="utf-8")
    tmp.replace(path)
    return fresh, True


def mesh_config(config: AgentConfig, agent_id: str, generated: bool) -> MeshConfig:
    """Return the node's settings from the agent's ``[mesh]`` section."""
    address = config.mesh_address or config.host
    return MeshConfig(
        agent_id=agent_id,
        version=__version__,
        interfaces=tuple(config.mesh_interfaces) or (address,),
        address=address,
        heartbeat_s=config.mesh_heartbeat_s,
        peer_cap=config.mesh_peer_cap,
        bid_above_s=config.mesh_bid_above_s,
        lease_min_s=config.mesh_lease_min_s,
        lease_factor=config.mesh_lease_factor,
        lease_grace_s=config.mesh_lease_grace_s,
        probe_name=not generated,
    )


class MeshLink:
    """Serves the signed peer endpoints for the agent and offloads through its MeshNode."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.key = load_fleet_key(config)
        agent_id, generated = mesh_agent_id(config)
        self.agent_id = agent_id
        self.cfg = mesh_config(config, agent_id, generated)
        self.verifier = Verifier(self.key)  # one replay cache, shared with the node
        self.started = False
        self._node: MeshNode | None = None
        self._agent: Agent | None = None
        self._offloads: set[asyncio.Task[None]] = set()
        #: move id -> its outcome for the hub (heartbeat ``move_outcomes``), newest last
        self.outcomes: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._moving: dict[str, tuple[str, str]] = {}  # task id -> (move id, peer) in flight

    # --- wiring ------------------------------------------------------------------------
    def app(self) -> web.Application:
        """Return the signed endpoints, to mount at ``/mesh/v1``."""
        return make_mesh_app(self)

    @property
    def node(self) -> MeshNode:
        """Return the node (once attached)."""
        if self._node is None:
            raise MeshError("the mesh is not attached to an agent yet")
        return self._node

    @property
    def agent(self) -> Agent:
        """Return the agent (once attached)."""
        if self._agent is None:
            raise MeshError("the mesh is not attached to an agent yet")
        return self._agent

    def attach(self, agent: Agent) -> None:
        """Build the node around ``agent``'s placer; offer the agent's scheduler its peers."""
        self._agent = agent
        node = MeshNode(
            self.cfg,
            self.key,
            agent.placer,
            self.run_task,
            agent.config.data_dir / "mesh.db",
            run_task_settles=True,  # the agent's executor feeds back or releases
        )
        node.verifier = self.verifier
        node.on_duplicate = self._duplicate
        self._node = node
        agent.scheduler.offload = self.take
        agent.deferrer.forward = self.forward_deferred  # moved tasks, at their hour
        agent.metrics.watch_mesh(lambda: node.counters, self.peer_states)

    async def start(self, api_port: int) -> None:
        """Advertise ``api_port`` and start discovery and heartbeats."""
        await self.node.start(api_port)
        self.started = True
        _log.info(
            "mesh: agent %s (fleet key %s) on %s:%s",
            self.agent_id,
            self.key.fingerprint,
            self.cfg.address,
            api_port,
        )

    async def stop(self) -> None:
        """Stop offloading (those tasks resume after a restart), leave the mesh; idempotent."""
        if not self.started:
            return
        self.started = False
        for task in list(self._offloads):
            task.cancel()
        await asyncio.gather(*self._offloads, return_exceptions=True)
        await self.node.stop()

    # --- views ---------------------------------------------------------------------------
    def peer_ids(self) -> list[str]:
        """Return the trusted peers that are online now (the hub heartbeat's ``peers``)."""
        if self._node is None:
            return []
        return sorted(p.agent_id for p in self._node.peers.online())

    def peer_states(self) -> Mapping[str, int]:
        """Return the number of peers in each state."""
        counts = {ONLINE: 0, SUSPECT: 0, OFFLINE: 0}
        if self._node is not None:
            for peer in self._node.peers.peers.values():
                counts[peer.state] = counts.get(peer.state, 0) + 1
        return counts

    def peers_doc(self) -> dict[str, Any]:
        """Return ``GET /v1/peers``: this agent's mesh identity, its peers and counters."""
        node = self._node
        rows = [] if node is None else node.peers.rows()
        for row in rows:
            row["trusted"] = True  # the table holds only peers that proved the fleet key
        return {
            "enabled": True,
            "started": self.started,
            "agent_id": self.agent_id,
            "fingerprint": self.key.fingerprint,
            "address": self.cfg.address,
            "port": None if node is None else node.api_port,
            "kinds": None if node is None else node.kinds,
            "peers": rows,
            "counters": {} if node is None else dict(sorted(node.counters.items())),
        }

    # --- MeshHandlers: the endpoints answer through the node once it is attached -----------
    def count(self, name: str) -> None:
        """Add one to a mesh counter."""
        if self._node is not None:
            self._node.count(name)

    def _live(self) -> MeshNode:
        if self._node is None or not self.started:
            raise web.HTTPServiceUnavailable(text="mesh not started yet")
        return self._node

    async def on_hello(self, sender: str, remote: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Answer a signed hello."""
        return await self._live().on_hello(sender, remote, doc)

    async def on_heartbeat(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Answer a heartbeat."""
        return await self._live().on_heartbeat(sender, doc)

    async def on_bid(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Bid for a contract."""
        return await self._live().on_bid(sender, doc)

    async def on_forward(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Run a forwarded attempt once."""
        return await self._live().on_forward(sender, doc)

    async def on_cancel(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Cancel or fence a forwarded attempt."""
        return await self._live().on_cancel(sender, doc)

    # --- origin ----------------------------------------------------------------------------
    def take(self, task: Waiting, decision: Decision) -> bool:
        """Scheduler hook: True when the mesh takes ``task`` (it is not dispatched here).

        Offered: a task no device here can run, or one estimated over ``bid_above_s`` here,
        while some trusted peer is online. A command task stays here (its allowlist is ours).
        """
        if not self.started or task.command is not None or not self.node.peers.online():
            return False
        if decision.placed and decision.latency_s <= self.cfg.bid_above_s:
            return False
        self._spawn_offload(task, decision_row(decision))
        return True

    def _spawn_offload(
        self, task: Waiting, local: dict[str, Any], to: str | None = None, reason: str = ""
    ) -> None:
        job = asyncio.create_task(self._offload(task, local, to, reason))
        self._offloads.add(job)
        job.add_done_callback(self._offloads.discard)

    # --- moves from the hub's re-evaluation -------------------------------------------------
    def move_report(self) -> list[dict[str, Any]]:
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

    async def execute_moves(self, moves: Any) -> None:
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
        agent = self.agent
        row = await agent.store.get(move.task_id)
        if row is None:
            return f"no task {move.task_id} here"
        if not self.started:
            return "the mesh is not started here"
        if move.to == self.agent_id:
            return "the target is this agent"
        if not self.node.trusts(move.to):
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
            self._spawn_offload(waiting, local, move.to, reason)
            return None
        return f"it is no longer movable (state {state})"

    async def _store_plan(self, task_id: str, plan: Deferral) -> bool:
        doc = json.dumps(plan.to_dict())

        def op(db: sqlite_utils.Database) -> bool:
            cur = db.execute(
                "UPDATE tasks SET deferral = ?, not_before = ? WHERE id = ? AND state = 'deferred'",
                (doc, plan.not_before, task_id),
            )
            return cur.rowcount == 1

        return bool(await self.agent.store.db.write(op))

    async def forward_deferred(self, task_id: str, plan: Deferral) -> None:
        """Deferrer hook: a moved task's hour has come; forward it to its peer (or run it here
        as usual when the mesh is down: still before its latest safe start)."""
        agent = self.agent
        if not await agent.store.release_deferred(task_id):
            return  # cancelled meanwhile
        row = await agent.store.get(task_id)
        if row is None:
            return
        agent.metrics.move("deferred", "queued")
        waiting = waiting_from_row(row)
        if not self.started or plan.moved_to is None:
            agent.scheduler.add(waiting)
            if plan.move_id is not None:
                self._outcome(plan.move_id, "failed", "the mesh was down: queued here", None)
            return
        if plan.move_id is not None:
            self._moving[task_id] = (plan.move_id, plan.moved_to)
        local = decision_row(agent.placer.preview(waiting.contract))
        self._spawn_offload(waiting, local, plan.moved_to, plan.move_reason or "moved")

    async def _offload(
        self, task: Waiting, local: dict[str, Any], to: str | None = None, reason: str = ""
    ) -> None:
        agent = self.agent

        def mark(db: sqlite_utils.Database) -> bool:
            now = time.time()
            cur = db.execute(
                "UPDATE tasks SET state = 'offloaded', placed_at = ? "
                "WHERE id = ? AND state IN ('queued', 'interrupted')",
                (now, task.task_id),
            )
            if cur.rowcount != 1:
                return False  # cancelled meanwhile
            _insert(db, "decisions", {"task_id": task.task_id, "decided_at": now, **local})
            return True

        if not await agent.store.db.write(mark):
            moving = self._moving.pop(task.task_id, None)
            if moving is not None:
                self._outcome(moving[0], "failed", "cancelled before it was forwarded")
            return
        agent.metrics.move(task.state, "offloaded")
        contract = Scheduler._contract(task, time.time())  # the deadline counts from now
        try:
            out = await self.node.submit(
                contract, {LOCAL: task.task_id}, key=task.task_id, to=to, reason=reason
            )
        except Exception as err:  # the task fails with the reason; the agent keeps going
            if not isinstance(err, (MeshError, TaskFailed)):
                _log.exception("mesh: offloading task %s failed", task.task_id)
            out = {"state": "failed", "ran_on": None, "chain": [], "error": str(err)}
        await self._settled(task.task_id, out)

    async def _settled(self, task_id: str, out: dict[str, Any]) -> None:
        """Record an offloaded task's outcome: where it ran and the decision chain."""
        agent = self.agent
        ran_on = out.get("ran_on")
        peer = ran_on if ran_on not in (None, self.agent_id) else None
        links = list(out.get("chain", []))
        chain = json.dumps(links)
        done = out.get("state") == "done"
        result = out.get("result") if done else None
        error = None if done else str(out.get("error") or _last_action(out))
        state = "done" if done else "failed"
        device = _peer_device(peer, links) if peer else None

        text = None if result is None else json.dumps(result)
        ran_emulated = result.get("emulated") if isinstance(result, dict) else None
        emulated = None if not isinstance(ran_emulated, bool) else int(ran_emulated)

        def op(db: sqlite_utils.Database) -> bool:
            now = time.time()
            db.execute(
                "UPDATE tasks SET chain = ?, ran_on = ? WHERE id = ?", (chain, peer, task_id)
            )
            cur = db.execute(  # a run here recorded its own outcome already
                "UPDATE tasks SET state = ?, finished_at = ?, result = ?, error = ?, "
                "device = COALESCE(?, device), emulated = COALESCE(?, emulated) "
                "WHERE id = ? AND state = 'offloaded'",
                (state, now, text, error, device, emulated, task_id),
            )
            if cur.rowcount != 1:
                return False
            record = {"id": task_id, "state": state, "result": result, "error": error}
            outbox.append(db, "task", {**record, "ran_on": peer}, now, agent.store.outbox_limit)
            return True

        if await agent.store.db.write(op):
            agent.metrics.move("offloaded", state)
        moving = self._moving.pop(task_id, None)
        if moving is not None:
            move_id, target = moving
            if done and peer is not None and peer == target:
                self._outcome(move_id, "done", None, peer)
            else:
                where = f"ran on {ran_on}" if done and ran_on else f"{state}: {error}"
                self._outcome(move_id, "failed", f"not run on the target ({where})", ran_on)

    async def _duplicate(self, key: str, attempt: int, peer: str, doc: dict[str, Any]) -> None:
        """Note on the task that a lost attempt completed on ``peer`` too (result unused)."""
        link = {
            "node": peer,
            "attempt": attempt,
            "action": "duplicate",
            "summary": "completed there after all while cut off; recorded, its result unused",
        }

        def op(db: sqlite_utils.Database) -> None:
            found = db.execute("SELECT chain FROM tasks WHERE id = ?", (key,)).fetchone()
            if found is None:
                return
            chain = json.loads(found[0]) if found[0] else []
            chain.append(link)
            db.execute("UPDATE tasks SET chain = ? WHERE id = ?", (json.dumps(chain), key))

        await self.agent.store.db.write(op)

    # --- running placed work ------------------------------------------------------------------
    async def run_task(
        self, contract: TaskContract, decision: Decision, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Run a task the node placed on this box, through the agent's store and executor."""
        meta = payload.get(MESH_META)
        try:
            if isinstance(meta, dict):
                task_id = await self._forwarded_row(contract, decision, meta)
                await self._admit_forwarded(task_id, decision, str(meta.get("origin")))
            elif isinstance(payload.get(LOCAL), str):
                task_id = await self._local_row(str(payload[LOCAL]), decision)
            else:
                raise MeshError("a task for the mesh names neither an origin nor a local task")
        except BaseException:
            self.agent.placer.release(decision)
            raise
        job = Job(task_id, decision, None, contract.priority, math.inf, submitted_at=time.time())
        outcome = await self.agent.run_job(job)
        if not outcome.ok:
            raise TaskFailed(outcome.error or "the task failed")
        return dict(outcome.result or {})

    async def _admit_forwarded(self, task_id: str, decision: Decision, origin: str) -> None:
        """Count a peer's task against its tenant's pool here; TaskFailed when it is full.

        Work run for a peer never makes this box's own borrowed work yield, and never waits:
        refused, the attempt fails with the pool's reason and its origin places it elsewhere.
        The pool is given back when the task finishes, as for any task (``Agent._finished``).
        """
        agent = self.agent
        pools = agent.scheduler.pools
        tenant = decision.task.tenant
        if tenant not in pools.specs:
            return
        need = usage_of(decision, agent.placer.devices)
        verdict = pools.admit(task_id, tenant, need, lambda _task_id: False)
        if verdict.admit:
            return
        pools.forget(task_id)
        error = f"refused for {origin}: {verdict.reason}"

        def op(db: sqlite_utils.Database) -> None:
            now = time.time()
            cur = db.execute(
                "UPDATE tasks SET state = 'failed', finished_at = ?, error = ? "
                "WHERE id = ? AND state = 'placed'",
                (now, error, task_id),
            )
            if cur.rowcount == 1:
                record = {"id": task_id, "state": "failed", "result": None, "error": error}
                outbox.append(db, "task", record, now, agent.store.outbox_limit)

        await agent.store.db.write(op)
        agent.metrics.move("placed", "failed")
        raise TaskFailed(error)

    def _emulated(self, decision: Decision) -> bool:
        device = self.agent.placer.devices[decision.device_indices[0]]
        return bool(device.emulated or decision.task.model is None)

    async def _local_row(self, task_id: str, decision: Decision) -> str:
        """Turn our own offloaded task back into a placed one (the bids did not beat us)."""
        row = decision_row(decision)
        emulated = int(self._emulated(decision))

        def op(db: sqlite_utils.Database) -> bool:
            now = time.time()
            cur = db.execute(
                "UPDATE tasks SET state = 'placed', placed_at = ?, device = ?, emulated = ?, "
                "attempts = attempts + 1 WHERE id = ? AND state = 'offloaded'",
                (now, decision.device_id, emulated, task_id),
            )
            if cur.rowcount != 1:
                return False
            _insert(db, "decisions", {"task_id": task_id, "decided_at": now, **row})
            return True

        if not await self.agent.store.db.write(op):
            raise MeshError(f"task {task_id} is no longer offloaded (cancelled?)")
        self.agent.metrics.move("offloaded", "placed")
        return task_id

    async def _forwarded_row(
        self, contract: TaskContract, decision: Decision, meta: dict[str, Any]
    ) -> str:
        """Record a peer's forwarded attempt as a placed task of ours; return its id."""
        agent = self.agent
        if contract.model is not None:  # never a path from elsewhere: our model dirs only
            try:
                path = agent.intake.resolve_model(Path(contract.model).stem)
            except HetmeshError:
                if not self._emulated(decision):
                    raise
            else:
                decision.task = contract = _with_model(contract, str(path))
        key = f"mesh:{meta.get('origin')}:{meta.get('key')}:{meta.get('attempt')}"
        digest = hashlib.sha256(key.encode()).hexdigest()
        [(row, created)] = await agent.store.submit([NewTask(contract, digest, key)])
        if not created:
            raise MeshError(f"forwarded attempt {key} is already recorded here")
        agent.metrics.move(None, "queued")
        placed = decision_row(decision)
        emulated = int(self._emulated(decision))
        origin = str(meta.get("origin"))

        def op(db: sqlite_utils.Database) -> None:
            now = time.time()
            db.execute(
                "UPDATE tasks SET state = 'placed', placed_at = ?, device = ?, emulated = ?, "
                "attempts = 1, origin = ? WHERE id = ?",
                (now, decision.device_id, emulated, origin, row["id"]),
            )
            _insert(db, "decisions", {"task_id": row["id"], "decided_at": now, **placed})

        await agent.store.db.write(op)
        agent.metrics.move("queued", "placed")
        return str(row["id"])


#: Where the app keeps its MeshLink (absent: no mesh).
MESH = web.AppKey("mesh", MeshLink)


def _with_model(contract: TaskContract, model: str) -> TaskContract:
    import dataclasses

    return dataclasses.replace(contract, model=model)


def _insert(db: sqlite_utils.Database, table: str, row: dict[str, Any]) -> None:
    db.execute(
        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
        list(row.values()),
    )


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
