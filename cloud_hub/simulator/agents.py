"""hetmesh policies in the simulator: one edge agent per box, each deciding with a Placer.

Every box's agent has its own ``Placer`` over the whole fleet, built from the devices as
that box sees them (peers' devices carry the link latency and bandwidth). Before each
decision the engine's committed work is pushed into the deciding Placer with
``update_live(queued_s=...)`` — the remaining estimated seconds (the charges of the
decisions that placed the work, minus elapsed run time; a task past its charge holds its
overrun again, as a Placer counts it: ``running.remaining_s``), as peers would gossip it, here
exact and instantaneous. On completion the deciding agent calls ``feedback`` with the true
service time, so each agent learns its own (task class, device) corrections, from cold
unless a corrections table is imported at start (``Placer.import_corrections``).
"""

from __future__ import annotations

import dataclasses
import time

from cloud_hub.simulator.engine import FleetState, Job
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.truth import TaskType
from cloud_hub.simulator.workload import Task
from edge_agent.placement import Decision, Placer, Policy, PreparedTask
from edge_agent.placement.codec import prepare
from edge_agent.placement.kernel import Backend
from edge_agent.placement.running import remaining_s
from edge_agent.resources.vocab import Health


def feasibility(fleet: Fleet, types: list[TaskType]) -> dict[TaskType, list[int]]:
    """Return, per task type, the devices that pass the kernel's hard constraints."""
    probe = Placer(fleet.devices_from(0), Policy.template("balanced"))
    out: dict[TaskType, list[int]] = {}
    for tt in types:
        verdict = probe.feasibility(model_info(tt[0]).contract(tt[1]))
        out[tt] = [d for d, device_id in enumerate(probe.device_ids) if verdict[device_id] == "ok"]
    return out


class AgentChooser:
    """Places with the hetmesh Placer of the task's origin box under ``policy``."""

    def __init__(
        self,
        fleet: Fleet,
        policy: Policy,
        *,
        admission: bool = False,
        backend: Backend | None = None,
        corrections: dict[str, dict[str, float]] | None = None,
    ) -> None:
        self.name = policy.name
        self.fleet = fleet
        self.admission = admission
        self.placers = [
            Placer(fleet.devices_from(b), policy, keep_reasons=False, backend=backend)
            for b in range(len(fleet.boxes))
        ]
        for placer in self.placers:  # e.g. profiled speeds, as Gavel assumes
            if corrections:
                placer.import_corrections(corrections)
        self._prepared: dict[tuple[str, str, float, int, str, float, int], PreparedTask] = {}
        self._open: dict[int, tuple[Placer, Decision]] = {}
        self._charge: dict[int, float] = {}
        self._allowed_for: FleetState | None = None
        self._allowed_sets: dict[TaskType, list[float]] = {}
        self.place_s = 0.0  # wall time of the update_live pass and Placer.place_one
        self.decisions = 0

    def _contract(self, task: Task) -> PreparedTask:
        bound = task.max_latency_s if self.admission else 0.0
        key = (task.model, task.precision, bound, task.priority, task.tenant, task.work)
        prepared = self._prepared.get((*key, task.config_id))
        if prepared is None:
            contract = model_info(task.model).contract(
                task.precision, bound, task.priority, task.tenant, task.work
            )
            if task.config_id:  # a configuration only an FPGA can hold
                req = dataclasses.replace(
                    contract.requirements, config_id=task.config_id, kinds=("fpga",)
                )
                contract = dataclasses.replace(contract, requirements=req)
            prepared = prepare(contract)
            if task.work == 1.0:  # per-job work (training steps) is rarely repeated
                self._prepared[(*key, task.config_id)] = prepared
        return prepared

    def estimate(self, task: Task) -> tuple[float, int]:
        """Return the origin agent's (service estimate, box it would pick) for ``task``."""
        decision = self.placers[task.origin].preview(self._contract(task))
        if not decision.placed:
            return float("inf"), task.origin
        return decision.service_s, self.fleet.devices[decision.device_indices[0]].box

    def _queued(self, state: FleetState, dev: int, now: float) -> float:
        total = 0.0
        for job in state.pending[dev]:  # running
            total += remaining_s(self._charge[job.task.index], now - job.start)
        for task in state.queued_tasks(dev):  # not started, input in or not
            total += self._charge[task.index]
        return total

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Sync the origin agent's view of every queue, then place with its Placer.

        A device outside the scenario for the task's type (no ground-truth figure for the
        pair, ``GroundTruth.available``) is pushed as offline for this decision.
        """
        placer = self.placers[task.origin]
        health = self._health(state, (task.model, task.precision), len(placer.device_ids))
        prepared = self._contract(task)
        queued = [self._queued(state, dev, now) for dev in range(len(placer.device_ids))]
        t0 = time.perf_counter()  # the live-state pass is part of every decision's cost
        placer.update_live_many(queued_s=queued, health=health)  # every device, one write
        decision = placer.place_one(prepared)
        self.place_s += time.perf_counter() - t0
        self.decisions += 1
        if not decision.placed:
            return None
        self._open[task.index] = (placer, decision)
        self._charge[task.index] = decision.charges[0]
        return decision.device_indices[0]

    def _health(self, state: FleetState, tt: TaskType, n: int) -> list[float]:
        """Return each device's health for a task type: offline outside its feasible set."""
        if self._allowed_for is not state:
            self._allowed_for = state
            self._allowed_sets = {}
        got = self._allowed_sets.get(tt)
        if got is None:
            allowed = frozenset(state.feasible.get(tt, ()))
            got = self._allowed_sets[tt] = [
                float(Health.ONLINE if dev in allowed else Health.OFFLINE) for dev in range(n)
            ]
        return got

    def finished(self, job: Job, now: float) -> None:
        """Report the true service time (and energy) to the agent that decided."""
        placer, decision = self._open.pop(job.task.index)
        del self._charge[job.task.index]
        power = self.fleet.devices[job.dev].device.capability.max_power_w
        placer.feedback(decision, latency_s=job.service, energy_j=power * job.service)
