"""Ground-truth service times: an emulation built from published per-model latencies.

For a (model, precision) on a device the base time is, for a device described inline
with ``rates``, 1 / its measured rate (Gavel's steps/s); else the firmware profile's published
latency (``published_latency_ms``) at that precision; else its published latency at any
other precision (a real figure for the same network on the same unit, e.g. a CPU's fp32
row for an int8 task); else the datasheet roofline with the device's efficiency (the
kernel's own formula, without corrections). The fleet's
per-device slowdown multiplies it, and each (task, device) pair draws one multiplicative
lognormal factor (median 1) from a seeded generator, the same draw under every policy.
This is not a measurement: it is the published figures replayed.
"""

from __future__ import annotations

import math

import numpy as np

from cloud_hub.simulator.fleet import Fleet, SimDevice
from cloud_hub.simulator.models import model_info
from edge_agent.resources.vocab import Precision, parse_name

TaskType = tuple[str, str]  # (model, precision)


def roofline_s(sd: SimDevice, model: str, precision: str) -> float:
    """Return the datasheet roofline time of one inference on a device (inf if unsupported)."""
    info = model_info(model)
    cap = sd.device.capability
    peak = cap.peak_gops(Precision(parse_name(Precision, precision, what="precision")))
    if peak <= 0.0:
        return math.inf
    sem = info.contract(precision).semantics
    moved = sem.param_bytes + sem.activation_bytes
    mem_s = moved / (cap.memory_bw_gbs * 1e9) if cap.memory_bw_gbs > 0 else 0.0
    return max(info.gops / (peak * cap.efficiency), mem_s) + cap.dispatch_s


def published_s(sd: SimDevice, model: str, precision: str) -> tuple[float, str] | None:
    """Return (seconds, label) of a measured rate or the profile's published latency."""
    rate = sd.rates.get(model)
    if rate is not None:
        return (1.0 / rate, "measured-rate") if rate > 0 else (math.inf, "measured-rate")
    if sd.profile is None:
        return None
    for want in (precision, None):
        for key in model_info(model).latency_keys():
            ms = sd.profile.published_latency_ms(sd.local_id, key, want)
            if ms is not None:
                return ms / 1e3, "published" if want else "published-other-precision"
    return None


class GroundTruth:
    """True service times for a fleet, a set of task types and a task count."""

    def __init__(
        self, fleet: Fleet, types: list[TaskType], n_tasks: int, sigma: float, seed: int
    ) -> None:
        self.fleet = fleet
        self.sigma = sigma
        self.types = list(dict.fromkeys(types))
        self.base: dict[TaskType, list[float]] = {}
        self.source: dict[TaskType, list[str]] = {}
        self._input = {
            tt: model_info(tt[0]).contract(tt[1]).semantics.input_bytes for tt in self.types
        }
        for tt in self.types:
            times, labels = [], []
            for sd in fleet.devices:
                pub = published_s(sd, *tt)
                base, label = pub if pub is not None else (roofline_s(sd, *tt), "roofline")
                times.append(base * sd.slowdown)
                labels.append(label)
            self.base[tt] = times
            self.source[tt] = labels
        rng = np.random.default_rng(seed)
        self._noise = np.exp(sigma * rng.standard_normal((max(n_tasks, 1), len(fleet.devices))))

    def service_s(self, task_index: int, tt: TaskType, dev: int) -> float:
        """Return the true service time of task ``task_index`` (type ``tt``) on ``dev``."""
        return self.base[tt][dev] * float(self._noise[task_index, dev])

    def input_bytes(self, tt: TaskType) -> float:
        """Return the bytes shipped when a task of type ``tt`` runs off its origin box."""
        return self._input[tt]

    def energy_j(self, dev: int, service_s: float) -> float:
        """Return the active energy of ``service_s`` seconds on ``dev`` (max power x time)."""
        return self.fleet.devices[dev].device.capability.max_power_w * service_s

    def coverage(self, feasible: dict[TaskType, list[int]]) -> float:
        """Return the share of feasible (type, device) pairs timed from published figures."""
        pairs = [(tt, d) for tt, ds in feasible.items() for d in ds]
        if not pairs:
            return 0.0
        return sum(self.source[tt][d] != "roofline" for tt, d in pairs) / len(pairs)
