"""Carbon-aware agents: each box's Placer sees every site's grid intensity of the hour.

``Placer.update_live`` has no carbon field, so when the simulated hour changes each
agent's Placer is rebuilt over the same devices with the hour's ``carbon_g_per_kwh``,
keeping its learned corrections (exported, then imported: class indices are kept).
"""

from __future__ import annotations

import dataclasses
import logging
import math

from cloud_hub.simulator.agents import AgentChooser
from cloud_hub.simulator.carbon import HOUR_S
from cloud_hub.simulator.engine import FleetState, Job
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.workload import Task
from edge_agent.placement import Placer, Policy
from edge_agent.placement.kernel import Backend

log = logging.getLogger(__name__)


class CarbonAgentChooser(AgentChooser):
    """An AgentChooser whose Placers follow each site's carbon intensity hour by hour."""

    def __init__(
        self,
        fleet: Fleet,
        policy: Policy,
        *,
        admission: bool = False,
        backend: Backend | None = None,
    ) -> None:
        super().__init__(fleet, policy, admission=admission, backend=backend)
        self.policy = policy
        self.hour: int | None = None
        self.rebuilds = 0

    def intensities(self, hour: int) -> list[float]:
        """Return every device's site intensity during simulated hour ``hour``."""
        return [self.fleet.site(sd.box).at_hour(hour) for sd in self.fleet.devices]

    def _refresh(self, hour: int) -> None:
        grams = self.intensities(hour)
        fresh = []
        for b, old in enumerate(self.placers):
            devices = [
                dataclasses.replace(d, carbon_g_per_kwh=g)
                for d, g in zip(self.fleet.devices_from(b), grams, strict=True)
            ]
            placer = Placer(devices, self.policy, keep_reasons=False, backend=old.backend)
            placer.import_corrections(old.export_corrections())
            fresh.append(placer)
        self.placers = fresh
        self.hour = hour
        self.rebuilds += 1
        log.debug("hour %s: site intensities %s", hour, sorted(set(grams)))

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Bring the Placers to the current hour's intensities, then place as an agent."""
        hour = math.floor(now / HOUR_S)
        if hour != self.hour:
            self._refresh(hour)
        return super().choose(task, now, state)

    def finished(self, job: Job, now: float) -> None:
        """Report to the origin box's current Placer (an older one may have been replaced)."""
        placer, decision = self._open[job.task.index]
        current = self.placers[job.task.origin]
        if placer is not current:
            self._open[job.task.index] = (current, decision)
        super().finished(job, now)
