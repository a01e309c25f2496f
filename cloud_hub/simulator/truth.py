"""Ground-truth service times: published or measured figures, never the kernel's formula.

For a (model, precision) on a device the base time is, in this order (the label in
``GroundTruth.source``):

1. ``measured-rate``: a device described inline with ``rates``: 1 / its measured rate
   (Gavel's steps/s).
2. ``published``: the firmware profile's published latency at that precision.
3. ``published-other-precision``: its published latency at another precision (a real
   figure for the same network on the same unit, e.g. a CPU's fp32 row for an int8 task).
4. ``scaled``: another model's figure on the same device (1-3; the same kind of task
   first, then the nearest in GOPs) times the published GOPs ratio of the two models
   (``models.py``), times its own lognormal factor per (type, hardware) (median 1, sigma
   ``SCALED_SIGMA``, calibrated on the published pairs: see docs/simulator.md; identical
   devices, the same profile's same unit, share it: the rule's error is the network's on
   that hardware, not the instance's; the fleet's slowdowns differ per instance). It uses
   no datasheet peak, efficiency or bandwidth: it is not the kernel's roofline.
5. ``none``: the device has no figure at all: the pair is left out of the scenario
   (``GroundTruth.available`` drops it; ``agents.AgentChooser`` marks such devices offline
   for that task type, the baselines never see them).

The fleet's per-device slowdown multiplies the base, and each (task, device) pair draws
one multiplicative lognormal factor (median 1) from a seeded generator, the same draw
under every policy. This is not a measurement: it is the published figures replayed.
"""

from __future__ import annotations

import math

import numpy as np

from cloud_hub.simulator.fleet import Fleet, SimDevice
from cloud_hub.simulator.models import MODELS, model_info
from edge_agent.resources.vocab import Precision, parse_name

TaskType = tuple[str, str]  # (model, precision)

#: Labels of figures that are a real measurement of that network on that device.
PUBLISHED = frozenset({"measured-rate", "published", "published-other-precision"})
#: Spread (sigma of the log) of the GOPs-scaling rule's error, leave-one-out over the 103
#: published (model, device) pairs of the profiles (``tools/truth_scaling_error.py``:
#: median |log error| 0.485, so a robust sigma of 0.72); a scaled pair draws one factor
#: from it, per (type, hardware: profile and unit), from the run's seed.
SCALED_SIGMA = 0.72
_SCALED_SEED = 0x5CA1ED  # mixed with the run's seed: a draw independent of the task noise


def roofline_s(sd: SimDevice, model: str, precision: str) -> float:
    """Return the datasheet roofline time of one inference on a device (inf if unsupported).

    The kernel's own estimate, without corrections: never ground truth; kept for
    comparisons (how far the datasheet is from the figures).
    """
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


def scaled_s(sd: SimDevice, model: str, precision: str) -> tuple[float, str] | None:
    """Return (seconds, reference model): another model's figure scaled by the GOPs ratio.

    The reference is a model with a figure on ``sd`` (``published_s``), of the same kind
    of task when there is one, then nearest in GOPs. None when the device has no figure at
    all, and for training jobs (their GOPs are priors, not published figures).
    """
    info = model_info(model)
    if info.task_type == "training":  # their GOPs are rough priors (models.TRAINING): no scaling
        return None
    best: tuple[tuple[bool, float], float, str] | None = None
    for name, ref in MODELS.items():
        if name == model or ref.task_type == "training":
            continue
        pub = published_s(sd, name, precision)
        if pub is None or not math.isfinite(pub[0]) or pub[0] <= 0:
            continue
        rank = (ref.task_type != info.task_type, abs(math.log(info.gops / ref.gops)))
        if best is None or rank < best[0]:
            best = (rank, pub[0] * info.gops / ref.gops, name)
    return None if best is None else (best[1], best[2])


def figure_s(sd: SimDevice, model: str, precision: str) -> tuple[float, str]:
    """Return (seconds, label) of one model on a device before slowdown and noise."""
    pub = published_s(sd, model, precision)
    if pub is not None:
        return pub
    scaled = scaled_s(sd, model, precision)
    if scaled is not None:
        return scaled[0], "scaled"
    return math.inf, "none"


def _hardware(sd: SimDevice) -> tuple[str, str | int]:
    """Return what identical devices share: (profile, unit); an inline device is its own."""
    if sd.profile is None:
        return "", sd.index
    return sd.profile.id, sd.local_id


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
        scale_rng = np.random.default_rng([seed, _SCALED_SEED])
        first_of_hardware: dict[tuple[str, str | int], int] = {}
        for sd in fleet.devices:
            first_of_hardware.setdefault(_hardware(sd), sd.index)
        for tt in self.types:
            times, labels = [], []
            factors = np.exp(SCALED_SIGMA * scale_rng.standard_normal(len(fleet.devices)))
            for sd in fleet.devices:
                base, label = figure_s(sd, *tt)
                if label == "scaled":  # the rule's error is the hardware's: twins share it
                    base *= float(factors[first_of_hardware[_hardware(sd)]])
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

    def available(
        self, feasible: dict[TaskType, list[int]], *, published_only: bool = False
    ) -> dict[TaskType, list[int]]:
        """Return ``feasible`` without the pairs that have no figure (or no published one).

        The scenario runs on these pairs only: a pair left out is a device that cannot
        take that task type (hetmesh's agents see it offline for the type).
        """
        keep = PUBLISHED if published_only else PUBLISHED | {"scaled"}
        return {tt: [d for d in ds if self.source[tt][d] in keep] for tt, ds in feasible.items()}

    def coverage(self, feasible: dict[TaskType, list[int]]) -> float:
        """Return the share of feasible (type, device) pairs timed from published figures."""
        pairs = [(tt, d) for tt, ds in feasible.items() for d in ds]
        if not pairs:
            return 0.0
        return sum(self.source[tt][d] in PUBLISHED for tt, d in pairs) / len(pairs)
