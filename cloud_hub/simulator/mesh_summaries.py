"""Sites that ask for bids through the agent's own bid gate, on capability summaries (13.6).

``SummarySites`` is ``MeshSites`` (one agent per box) whose origin decides whom to ask with
``edge_agent.mesh.bidgate.BidGate``, the class the agent runs: a peer is asked when its
fresh summary predicts it finishes sooner than here by the policy's ``offload_margin``,
round trip and input transfer included; every peer when nothing here can run the task or
the local estimate exceeds ``bid_above_s``; and each origin's bid messages are paid from
its token bucket (``bid_rate_per_s``, simulated time). Each site publishes its summary
every ``heartbeat_s`` (as the agent answers heartbeats): its ``preview`` estimate, queue
included, for each task class it has seen (its own tasks and the bids it was asked for).
A summary is used while younger than three heartbeats, as in the agent.
"""

from __future__ import annotations

from cloud_hub.simulator.engine import FleetState
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.mesh_sites import MeshSites
from cloud_hub.simulator.workload import Task
from edge_agent.mesh.bidgate import BidGate
from edge_agent.mesh.config import MeshConfig
from edge_agent.mesh.peers import Peer
from edge_agent.mesh.summary import Summary, device_names
from edge_agent.placement import Decision, Policy


class SummarySites(MeshSites):
    """``MeshSites`` under the summary bid gate (see the module doc); rule ``summary``."""

    def __init__(
        self,
        fleet: Fleet,
        policy: Policy,
        feasible: dict[tuple[str, str], list[int]],
        *,
        bid_above_s: float = 1.0,
        heartbeat_s: float = 2.0,
        bid_rate_per_s: float = 20.0,
    ) -> None:
        # the threshold rule stays the gate's upper override (bid_above_s)
        super().__init__(fleet, policy, "threshold", feasible, bid_above_s=bid_above_s)
        self.rule, self.name = "summary", "mesh-summary"
        self.heartbeat_s = heartbeat_s
        bandwidth = fleet.link_gbs * 1e9 if fleet.link_gbs > 0 else float("inf")
        cfg = MeshConfig(
            agent_id="sim",
            heartbeat_s=heartbeat_s,
            bid_above_s=bid_above_s,
            bid_rate_per_s=bid_rate_per_s,
            bid_burst=2 * bid_rate_per_s,
            link_bytes_per_s=bandwidth,
        )
        n = len(self.placers)
        self.gates = [BidGate(cfg, clock=lambda: self.now) for _ in range(n)]
        # views[o]: the peers of site o, each with the round trip of the link to it
        self.views: list[list[Peer]] = []
        for o in range(n):
            row = []
            for p in range(n):
                if p != o:
                    peer = Peer(str(p), "sim", 0, "sim", "")
                    peer.rtts.append(2 * fleet.link_s[o][p])
                    row.append(peer)
            self.views.append(row)
        self.seen: list[dict[str, Task]] = [{} for _ in range(n)]  # class -> a task of it
        self._due = [0.0] * n
        self.summaries: list[Summary | None] = [None] * n
        self.rate_limited = 0
        # bids of asks that could not wait (nothing at the origin can run the task): the
        # agent waits for their tokens, a simulated site borrows them
        self.necessary_by_site = [0] * n
        self.summaries_published = 0

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Note the task's class at its site, refresh due summaries, then place as MeshSites."""
        self.now = now
        self.seen[task.origin].setdefault(self._contract(task).contract.task_class, task)
        for site in range(len(self.placers)):
            if now >= self._due[site]:
                self._publish(site, now)
        return super().choose(task, now, state)

    def _publish(self, site: int, now: float) -> None:
        classes: dict[str, float] = {}
        for name, seen in self.seen[site].items():
            decision = self._estimate(site, seen, commit=False)
            if decision.placed:
                classes[name] = decision.latency_s
        kinds, formats = device_names(self.placers[site])
        summary = Summary(tuple(kinds), tuple(formats), 0.0, classes, now)
        self.summaries[site] = summary
        for row in self.views:
            for peer in row:
                if peer.agent_id == str(site):
                    peer.summary = summary
        self._due[site] = now + self.heartbeat_s
        self.summaries_published += 1

    def asked(self, origin: int, task: Task, local: Decision) -> list[int]:
        """Return the peers the origin's gate asks (paid from its bid budget)."""
        contract = self._contract(task).contract
        gate = self.gates[origin]
        ask = gate.choose(contract, local, self.views[origin], self.margin)
        granted = gate.admit_now(ask, contract.task_class)
        self.rate_limited += len(ask.peers) - len(granted)
        if ask.necessary:
            self.necessary_by_site[origin] += len(granted)
        for peer in granted:  # a bid teaches the peer the class (its next summary has it)
            self.seen[int(peer.agent_id)].setdefault(contract.task_class, task)
        return [int(peer.agent_id) for peer in granted]
