"""How long an emulated device takes for a job, and the outcome it reports.

An emulated device (a board profile, or any device given an opaque task: no model, no
command) serves a job for the profile's published latency of the model (the kernel's
roofline estimate, uncorrected, when none is published) with lognormal jitter. The
executor (executor.py) waits that long: a timer on the event loop, no thread.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from edge_agent.agent.core.fleet import Fleet
from edge_agent.agent.core.runners import Job, Outcome, checked
from edge_agent.placement import Placer, TaskContract

#: (device, model, precision) published latencies remembered (the profile's tables are small)
PUBLISHED_CACHE = 4096


class Emulation:
    """The emulated service times of one agent's devices."""

    def __init__(self, fleet: Fleet, placer: Placer, jitter: float) -> None:
        self.fleet = fleet
        self.placer = placer
        self._jitter = jitter
        self._rng = random.Random()
        self._published: dict[tuple[str, str, object], float | None] = {}

    def published_ms(self, device_id: str, contract: TaskContract) -> float | None:
        """Return the profile's published latency of the task's model on the device, or None.

        The profile does not change while the agent runs: each (device, model, precision)
        is looked up once (parsing the precision and searching the profile per task cost
        more than the rest of an emulated run).
        """
        name = Path(contract.model).stem if contract.model else contract.task_class
        precision = contract.requirements.precision or contract.semantics.precision
        key = (device_id, name, precision)
        try:
            return self._published[key]
        except KeyError:
            pass
        figure = self.fleet.published_ms(device_id, name, contract.precision().name.lower())
        if len(self._published) < PUBLISHED_CACHE:
            self._published[key] = figure
        return figure

    def target(self, job: Job, slots: int) -> tuple[float, str]:
        """Return the emulated service time of ``job`` and where its base figure came from.

        In one of ``slots`` slots a job has 1/N of the fabric: a published latency takes N
        times as long (the kernel's estimate already counts the slots).
        """
        d = job.decision
        device_id = job.device_id
        contract = d.task
        published = self.published_ms(device_id, contract)
        if published is not None:
            base, source = published / 1e3 * slots, "published latency"
        else:
            correction = self.placer.correction(contract.task_class, device_id)
            base, source = d.service_s / max(correction, 1e-9), "roofline estimate"
        sigma = self._jitter  # lognormal jitter: exp of a normal draw (``gauss``, the
        # faster sampler; ``lognormvariate`` draws the same distribution more slowly)
        target = base * math.exp(self._rng.gauss(-sigma * sigma / 2, sigma)) if sigma else base
        return target, source

    @staticmethod
    def outcome(
        job: Job, slot: int | None, target: float, source: str, wall: float, reconfig: float
    ) -> Outcome:
        """Return an emulated run's outcome: ``target`` as the measured latency.

        ``slot``: the FPGA slot it ran in (None: a device with one slot).
        """
        contract = job.decision.task
        target = max(target, 1e-9)  # the emulated device's service time, not the loop's pacing
        result: dict[str, Any] = {
            "emulated": True,
            "service_source": source,
            "latency_s": target,
            "wall_s": wall,
        }
        if contract.requirements.config_id:
            result["reconfig_s"] = reconfig
        if slot is not None:
            result["slot"] = slot
        if contract.model is None:
            result["note"] = "opaque task (no model, no command): service time emulated"
        return checked(job, Outcome(True, target, result, emulated=True))
