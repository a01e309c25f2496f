"""Sites that each place on their own devices and may offload to peers by bids (issue 13.6).

Every box is a site with its own agent: a ``Placer`` over the box's devices only, fed
back and started as an agent's (``slo_agents`` does the same for one site Placer). A task
arriving at a box is placed there unless the agent asks its peers for bids, as
``edge_agent/mesh/offload.py`` does today: only when the local estimate exceeds
``bid_above_s`` (``mesh_bid_above_s``, 1 s by default) or nothing local can run it. Each
asked peer answers with its own Placer's estimate (``preview``); the origin adds the
round trip and forwards to the best bid when it beats the local estimate by the policy's
``offload_margin``. A bid costs two messages (request, reply).

Rules compared: ``alone`` (never ask), ``threshold`` (today's rule), ``always`` (ask every
peer for every task: what a mesh that always knew could reach, at the most messages).
"""

from __future__ import annotations

import math
import time
from typing import Any

from cloud_hub.simulator.engine import FleetState, Job
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.slo_agents import HAS_CLOCK, StartEvents, report_finished
from cloud_hub.simulator.workload import Task
from edge_agent.placement import Decision, Placer, Policy, PreparedTask
from edge_agent.placement.codec import prepare
from edge_agent.resources.vocab import Health

RULES = ("alone", "threshold", "always")


class MeshSites:
    """One agent per box, offloading by bids under ``rule`` (see the module doc)."""

    def __init__(
        self,
        fleet: Fleet,
        policy: Policy,
        rule: str,
        feasible: dict[tuple[str, str], list[int]],
        *,
        bid_above_s: float = 1.0,
    ) -> None:
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}")
        self.name = f"mesh-{rule}"
        self.fleet = fleet
        self.rule = rule
        self.bid_above_s = bid_above_s
        self.margin = float(policy.rules.get("offload_margin", 0.2))
        self.now = 0.0
        extra: dict[str, Any] = {"clock": lambda: self.now} if HAS_CLOCK else {}
        self.local: list[list[int]] = [
            [sd.index for sd in fleet.devices_of(b)] for b in range(len(fleet.boxes))
        ]
        self.placers = [
            Placer([fleet.devices[d].device for d in devs], policy, keep_reasons=False, **extra)
            for devs in self.local
        ]
        # a device outside the scenario for a task type is offline for that type
        self._allowed = {tt: set(ds) for tt, ds in feasible.items()}
        self._health: list[dict[int, Health]] = [{} for _ in self.local]
        self._prepared: dict[tuple[str, str], PreparedTask] = {}
        self._open: dict[int, tuple[Placer, Decision]] = {}
        self._starts = StartEvents()
        self.messages = 0
        self.sent_by_site = [0] * len(self.local)  # bid requests each origin sent
        self.forwarded = 0
        self.place_s = 0.0

    def _contract(self, task: Task) -> PreparedTask:
        key = (task.model, task.precision)
        if key not in self._prepared:
            self._prepared[key] = prepare(model_info(task.model).contract(task.precision))
        return self._prepared[key]

    def _estimate(self, box: int, task: Task, commit: bool) -> Decision:
        placer = self.placers[box]
        allowed = self._allowed[(task.model, task.precision)]
        for k, dev in enumerate(self.local[box]):
            health = Health.ONLINE if dev in allowed else Health.OFFLINE
            if self._health[box].get(k) != health:
                placer.update_live(placer.device_ids[k], health=health)
                self._health[box][k] = health
        t0 = time.perf_counter()
        prepared = self._contract(task)
        decision = placer.place_one(prepared) if commit else placer.preview(prepared)
        self.place_s += time.perf_counter() - t0
        return decision

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Place ``task`` at its box, or on the peer whose bid wins."""
        self.now = now
        self._starts.report(now)
        origin = task.origin
        local = self._estimate(origin, task, commit=False)
        target = origin
        asked = self.asked(origin, task, local)
        if asked:
            best, best_total = None, math.inf
            self.sent_by_site[origin] += len(asked)
            for peer in asked:
                self.messages += 2
                bid = self._estimate(peer, task, commit=False)
                total = bid.latency_s + 2 * self.fleet.link_s[origin][peer]
                if bid.placed and total < best_total:
                    best, best_total = peer, total
            if best is not None and (
                not local.placed or best_total < local.latency_s * (1 - self.margin)
            ):
                target = best
                self.forwarded += 1
        decision = self._estimate(target, task, commit=True)
        if not decision.placed:
            return None
        dev = self.local[target][decision.device_indices[0]]
        self._open[task.index] = (self.placers[target], decision)
        return dev

    def job_started(self, job: Job) -> None:
        """Remember when its device took ``job`` (reported at the next event from then)."""
        self._starts.commit(job.start, *self._open[job.task.index])

    def asked(self, origin: int, task: Task, local: Decision) -> list[int]:
        """Return the peers ``origin`` asks for bids on ``task`` under the rule."""
        ask = self.rule == "always" or (
            self.rule == "threshold" and (not local.placed or local.latency_s > self.bid_above_s)
        )
        return [p for p in range(len(self.placers)) if p != origin] if ask else []

    def finished(self, job: Job, now: float) -> None:
        """Report the start (if not yet), then the true service time to the agent that ran it."""
        self.now = now
        self._starts.report(now)
        report_finished(self.fleet, *self._open.pop(job.task.index), job)
