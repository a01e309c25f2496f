"""The agent's membership in the mesh: a MeshNode around the agent's own placer and executor.

``MeshLink(config)`` is made with the HTTP app (its signed endpoints are mounted at
``/mesh/v1``), attached to the Agent once its placer exists, started once the API listens
(the port is advertised) and stopped before the store closes. It is the rest of the agent's
one view of the mesh; the work is done by one module per concern, all through the agent's
own machinery, so a task is a task wherever it came from:

- origin (origin.py): the scheduler's tasks offered to peers, their rows settled with
  where they ran (``ran_on``) and the decision chain, origin → peer (``chain``).
- moves (hub_moves.py): the hub's re-evaluation moves carried out through that same offload,
  their outcomes reported in the next heartbeats.
- peer (serving.py): work the node placed on this box (a peer's forwarded attempt, or our
  own offload that the bids did not beat) run as a task row on the agent's executor.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from edge_agent import __version__
from edge_agent.agent.config import AgentConfig, ConfigError
from edge_agent.agent.mesh.hub_moves import HubMoves
from edge_agent.agent.mesh.origin import MeshHandoff
from edge_agent.agent.mesh.serving import MeshServe
from edge_agent.mesh import FleetKey, MeshConfig, MeshNode, Verifier, new_agent_id
from edge_agent.mesh.errors import FleetKeyError, MeshError
from edge_agent.mesh.peers import OFFLINE, ONLINE, SUSPECT
from edge_agent.mesh.routes import make_mesh_app

if TYPE_CHECKING:
    from edge_agent.agent.service import Agent

_log = logging.getLogger(__name__)

#: The mesh endpoints' mount point on the agent's app.
PREFIX = "/mesh/v1"
ID_FILE = "mesh_id"


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
        bid_rate_per_s=config.mesh_bid_rate_per_s,
        bid_burst=2 * config.mesh_bid_rate_per_s,
        link_bytes_per_s=config.mesh_link_bytes_per_s,
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
        self.verifier = Verifier(self.key, agent_id)  # one replay cache, shared with the node
        self.started = False
        self._node: MeshNode | None = None
        self._agent: Agent | None = None
        self.offloader = MeshHandoff(self)  # origin: the scheduler's tasks offered to peers
        self.moves = HubMoves(self)  # the hub's re-evaluation moves and their outcomes
        self.serve = MeshServe(self)  # work the node placed on this box

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
        """Build the node around ``agent``'s placer (the agent was built with this link: its
        scheduler offers ``offloader`` its tasks, its deferrer hands ``moves`` the moved ones)."""
        self._agent = agent
        node = MeshNode(
            self.cfg,
            self.key,
            agent.placer,
            self.serve.run_task,
            agent.config.data_dir / "mesh.db",
            run_task_settles=True,  # the agent's executor feeds back or releases
            verifier=self.verifier,
            loops=agent.loops,  # the heartbeat loop shows in the agent's health
            on_duplicate=self.offloader.duplicate,
        )
        self._node = node
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
        await self.offloader.cancel_all()
        await self.node.stop()

    # --- views ---------------------------------------------------------------------------
    def peer_ids(self) -> list[str]:
        """Return the trusted peers that are online now (the hub heartbeat's ``peers``)."""
        if self._node is None:
            return []
        return sorted(p.agent_id for p in self._node.peers.online())

    def peer_links(self) -> list[dict[str, Any]]:
        """Return every peer in the table (the hub heartbeat's ``peer_links``): its mesh id,
        state and last heartbeat round-trip time (ms, None before the first)."""
        rows = [] if self._node is None else self._node.peers.rows()
        return [{"id": r["agent_id"], "state": r["state"], "rtt_ms": r["rtt_ms"]} for r in rows]

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

    @property
    def own_endpoint(self) -> tuple[str, int]:
        """Return the (address, port) the node advertises (("", 0) before it starts)."""
        return ("", 0) if self._node is None else self._node.own_endpoint

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

    # --- the hub link's view of the moves (hub_moves.py) ----------------------------------
    async def execute_moves(self, moves: Any) -> None:
        """Carry out (or refuse, saying why) the moves in a hub heartbeat answer; each once."""
        await self.moves.execute(moves)

    def move_report(self) -> list[dict[str, Any]]:
        """Return the outcomes of the hub's moves (the heartbeat's ``move_outcomes``)."""
        return self.moves.report()


#: Where the app keeps its MeshLink (absent: no mesh).
MESH = web.AppKey("mesh", MeshLink)
